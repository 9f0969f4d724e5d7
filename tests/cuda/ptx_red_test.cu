// GPU test of the predicated vector reduction (src/cuda/ptx/red.h, sm_90+): several blocks add random
// integer-valued float4s (exact in fp32 in any order) into shared targets where a random predicate holds;
// checks the sums, that unpredicated adds left no trace and that the other three lanes of a vector are
// its own. Fresh random inputs; skipped below sm_90.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "cuda/ptx/red.h"
#include "harness/owned_tensor.h"
#include "support/compare.h"

namespace {

constexpr int kTargets = 64, kBlocks = 8, kThreads = 128;  // each thread adds into target tid % kTargets

__global__ void red_v4_kernel(const float4* values, const int* pred, float* dst) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  const int i = blockIdx.x * kThreads + threadIdx.x;
  flashgate::ptx::red_add_v4_f32(dst + 4 * (threadIdx.x % kTargets), values[i], pred[i] != 0);
#endif
}

TEST(Ptx, RedAddV4F32) {
  FLASHGATE_REQUIRE_GPU();
  int device = 0, major = 0;
  ASSERT_EQ(cudaGetDevice(&device), cudaSuccess);
  ASSERT_EQ(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device), cudaSuccess);
  if (major < 9) GTEST_SKIP() << "red.global.add.v4.f32 needs sm_90";
  const uint64_t seed = flashgate::harness::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> small(-64, 64);
  const int n = kBlocks * kThreads;
  std::vector<float4> values(n);
  std::vector<int> pred(n);
  std::vector<float> start(4 * kTargets), want(4 * kTargets);
  for (int t = 0; t < 4 * kTargets; ++t) want[t] = start[t] = static_cast<float>(small(rng));
  for (int i = 0; i < n; ++i) {
    values[i] = make_float4(small(rng), small(rng), small(rng), small(rng));
    pred[i] = static_cast<int>(rng() % 3 != 0);
    if (!pred[i]) continue;
    float* w = &want[4 * (i % kThreads % kTargets)];
    w[0] += values[i].x, w[1] += values[i].y, w[2] += values[i].z, w[3] += values[i].w;
  }
  float4* d_values = nullptr;
  int* d_pred = nullptr;
  float* d_dst = nullptr;
  ASSERT_EQ(cudaMalloc(&d_values, n * sizeof(float4)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&d_pred, n * sizeof(int)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&d_dst, start.size() * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(d_values, values.data(), n * sizeof(float4), cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(d_pred, pred.data(), n * sizeof(int), cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(d_dst, start.data(), start.size() * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  red_v4_kernel<<<kBlocks, kThreads>>>(d_values, d_pred, d_dst);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<float> got(start.size());
  ASSERT_EQ(cudaMemcpy(got.data(), d_dst, got.size() * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  cudaFree(d_values);
  cudaFree(d_pred);
  cudaFree(d_dst);
  for (int t = 0; t < 4 * kTargets; ++t) EXPECT_EQ(got[t], want[t]) << "target " << t / 4 << " lane " << t % 4;
}

}  // namespace
