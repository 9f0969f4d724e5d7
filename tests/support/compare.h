// Shared test helpers: the visible GPU skip and the SPEC §7 comparison.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "flashgate/flashgate.h"
#include "harness/metrics.h"
#include "harness/owned_tensor.h"

// Skips the current test, saying so, when this process sees no CUDA device (CI has none).
#define FLASHGATE_REQUIRE_GPU()                                                  \
  do {                                                                           \
    if (!flashgate::cuda_available()) GTEST_SKIP() << "no CUDA device: GPU test skipped"; \
  } while (0)

namespace fgtest {

// Expects relative RMS(out, ref) <= tol and no NaN; `what` names the output in the failure message.
inline void expect_close(const std::string& what, const flashgate::harness::OwnedTensor& out,
                         const flashgate::harness::OwnedTensor& ref, double tol) {
  const std::vector<double> o = out.values(), r = ref.values();
  const double err = flashgate::harness::relative_rms(o, r);
  EXPECT_TRUE(flashgate::harness::no_nan(o)) << what << " has NaN";
  EXPECT_LE(err, tol) << what << ": relative RMS " << err << " > " << tol;
}

}  // namespace fgtest
