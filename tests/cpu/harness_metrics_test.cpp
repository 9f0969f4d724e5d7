// SPEC §7's error metric (harness/metrics.h): relative RMS, its floor for nearly vanishing references, and how it
// scores NaN, matching and mismatching infinities, and an all-zero reference.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "harness/metrics.h"

namespace flashgate::harness {
namespace {

TEST(HarnessMetrics, RelativeRmsIsTheErrorOverTheReference) {
  const std::vector<double> ref = {3, -4}, out = {3.3, -4.4};
  EXPECT_NEAR(relative_rms(out, ref), 0.1, 1e-12);
  // A floor below rms(ref) changes nothing; one above it replaces rms(ref).
  EXPECT_NEAR(relative_rms(out, ref, 1.0), 0.1, 1e-12);
  const double rms_err = std::sqrt((0.09 + 0.16) / 2);
  EXPECT_NEAR(relative_rms(out, ref, 100.0), rms_err / 100.0, 1e-12);
}

TEST(HarnessMetrics, AnAllZeroReferenceScoresTheOutputsRmsOrItOverTheFloor) {
  const std::vector<double> zero = {0, 0, 0, 0}, out = {1e-3, -1e-3, 1e-3, -1e-3};
  EXPECT_EQ(relative_rms(zero, zero), 0.0);
  EXPECT_NEAR(relative_rms(out, zero), 1e-3, 1e-15);
  EXPECT_NEAR(relative_rms(out, zero, 0.5), 2e-3, 1e-15);
}

TEST(HarnessMetrics, NanAndUnmatchedInfinitiesFail) {
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  EXPECT_EQ(relative_rms({1, nan}, {1, 2}, 1.0), inf);
  EXPECT_EQ(relative_rms({1, inf}, {1, 2}), inf);
  EXPECT_EQ(relative_rms({1, -inf}, {1, -inf}), 0.0);
  EXPECT_EQ(relative_rms({1, 2}, {1}), inf);
}

}  // namespace
}  // namespace flashgate::harness
