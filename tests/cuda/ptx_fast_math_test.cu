// GPU test of the softmax's exponentials (src/cuda/ptx/fast_math.h): exp2_fma, 2^x on the FP32 pipe, against
// std::exp2 in double over fresh random x in [-130, 0] and the edges (0, integers, the -125 cut, -inf): relative
// error within 4e-6 from -125 up, exactly 0 below; exp2_ftz within 2 ulp-ish (1e-6) where its result is normal.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "cuda/ptx/fast_math.h"
#include "harness/owned_tensor.h"
#include "support/compare.h"

namespace {

__global__ void exp2_kernel(const float* x, float* fma_out, float* mufu_out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) fma_out[i] = flashgate::ptx::exp2_fma(x[i]), mufu_out[i] = flashgate::ptx::exp2_ftz(x[i]);
}

TEST(Ptx, Exp2OnTheFmaPipe) {
  FLASHGATE_REQUIRE_GPU();
  const uint64_t seed = flashgate::harness::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> any(-130.f, 0.f), near(-1.f, 0.f);
  std::vector<float> x = {0.f, -0.f, -0.5f, -0.25f, -1.f, -2.f, -64.f, -124.5f, -125.f, -125.0001f, -126.f, -200.f,
                          -std::numeric_limits<float>::infinity()};
  for (int i = 0; i < 20000; ++i) x.push_back(any(rng));
  for (int i = 0; i < 20000; ++i) x.push_back(near(rng));
  const int n = static_cast<int>(x.size());
  float *d_x = nullptr, *d_fma = nullptr, *d_mufu = nullptr;
  ASSERT_EQ(cudaMalloc(&d_x, n * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&d_fma, n * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&d_mufu, n * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(d_x, x.data(), n * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemset(d_fma, 0xff, n * sizeof(float)), cudaSuccess);  // NaN: an unwritten element fails
  exp2_kernel<<<(n + 255) / 256, 256>>>(d_x, d_fma, d_mufu, n);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<float> fma(n), mufu(n);
  ASSERT_EQ(cudaMemcpy(fma.data(), d_fma, n * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(mufu.data(), d_mufu, n * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  cudaFree(d_x), cudaFree(d_fma), cudaFree(d_mufu);
  for (int i = 0; i < n; ++i) {
    const double want = std::exp2(static_cast<double>(x[i]));
    if (x[i] < -125.f) {
      ASSERT_EQ(fma[i], 0.f) << "x " << x[i];
      continue;
    }
    ASSERT_LE(std::abs(fma[i] - want) / want, 4e-6) << "x " << x[i] << " got " << fma[i];
    if (x[i] >= -125.f) ASSERT_LE(std::abs(mufu[i] - want) / want, 1e-6) << "exp2_ftz at x " << x[i];
  }
}

}  // namespace
