// The harness's random fills (harness/owned_tensor.h): filled in parallel chunks, their values depend on the
// seed alone (not on the thread count), cover every element of a strided view across chunk boundaries and
// leave the padding alone, and have the asked-for distribution.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "harness/owned_tensor.h"

namespace flashgate::harness {
namespace {

// 3 x 1000 x 1100 fp32 with 5 padding elements per row: 3.3 M elements, 4 fill chunks, rows that straddle
// chunk boundaries.
OwnedTensor padded_tensor() { return OwnedTensor(DType::f32, {3, 1000, 1100}, Device::cpu, 5); }

// The bytes of a fill with FLASHGATE_CPU_THREADS=threads (the variable restored afterwards).
std::vector<unsigned char> filled_bytes(uint64_t seed, const char* threads) {
  const char* before = std::getenv("FLASHGATE_CPU_THREADS");
  const std::string saved = before ? before : "";
  setenv("FLASHGATE_CPU_THREADS", threads, 1);
  OwnedTensor t = padded_tensor();
  t.poison();
  Rng rng(seed);
  t.fill_normal(rng);
  if (before) setenv("FLASHGATE_CPU_THREADS", saved.c_str(), 1);
  else unsetenv("FLASHGATE_CPU_THREADS");
  return t.raw_bytes();
}

TEST(HarnessFill, ValuesDependOnTheSeedAloneAndPaddingStays) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const std::vector<unsigned char> one = filled_bytes(seed, "1"), many = filled_bytes(seed, "7");
  EXPECT_TRUE(one == many) << "the fill depends on the thread count";
  EXPECT_FALSE(filled_bytes(seed + 1, "7") == many) << "another seed gave the same values";

  OwnedTensor t = padded_tensor();
  t.poison();
  Rng rng(seed);
  t.fill_normal(rng);
  const std::vector<double> v = t.values();  // every logical element: none left poisoned (NaN)
  double sum = 0, sum2 = 0;
  for (double x : v) {
    ASSERT_FALSE(std::isnan(x));
    sum += x, sum2 += x * x;
  }
  const double mean = sum / v.size(), var = sum2 / v.size() - mean * mean;
  EXPECT_LT(std::fabs(mean), 0.005);
  EXPECT_NEAR(var, 1.0, 0.01);
  // Padding bytes (5 floats after each 1100-float row) keep the poison.
  const std::vector<unsigned char> raw = t.raw_bytes();
  for (int64_t row = 0; row < 3 * 1000; ++row)
    for (int64_t p = 0; p < 5 * 4; ++p) ASSERT_EQ(raw[(row * 1105 + 1100) * 4 + p], 0xff) << "row " << row;
}

TEST(HarnessFill, UniformStaysInItsRange) {
  OwnedTensor t(DType::f32, {2, 1 << 20});  // two chunks
  Rng rng(fresh_seed());
  t.fill_uniform(rng, -2.0, 3.0);
  double lo = 1e9, hi = -1e9;
  for (double x : t.values()) lo = std::min(lo, x), hi = std::max(hi, x);
  EXPECT_GE(lo, -2.0);
  EXPECT_LE(hi, 3.0);  // a draw just below 3 may round to 3.0f
  EXPECT_LT(lo, -1.99);
  EXPECT_GT(hi, 2.99);
}

}  // namespace
}  // namespace flashgate::harness
