// GPU test of the vector reductions (src/cuda/ptx/red.h, sm_90+): several blocks add random integer-valued
// float vectors (exact in fp32 in any order) into shared targets, where a random predicate holds (v4, and the
// predicated v2) or always (plain v2, odd threads); checks the sums, that predicated-off adds left no trace
// and that the other lanes of a vector are its own. Fresh random inputs; skipped below sm_90.
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

// Thread i adds values[W*i .. W*i+W) into target tid % kTargets.
template <int W>
__global__ void red_kernel(const float* values, const int* pred, float* dst) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  const int i = blockIdx.x * kThreads + threadIdx.x;
  float* at = dst + W * (threadIdx.x % kTargets);
  const float* v = values + W * i;
  if constexpr (W == 4) {
    flashgate::ptx::red_add_v4_f32(at, make_float4(v[0], v[1], v[2], v[3]), pred[i] != 0);
  } else if (threadIdx.x % 2) {
    flashgate::ptx::red_add_v2_f32(at, v[0], v[1]);
  } else {
    flashgate::ptx::red_add_v2_f32(at, v[0], v[1], pred[i] != 0);
  }
#endif
}

template <int W>
void check_red() {
  int device = 0, major = 0;
  ASSERT_EQ(cudaGetDevice(&device), cudaSuccess);
  ASSERT_EQ(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device), cudaSuccess);
  if (major < 9) GTEST_SKIP() << "red.global.add.v" << W << ".f32 needs sm_90";
  const uint64_t seed = flashgate::harness::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed) + ", width " + std::to_string(W));
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> small(-64, 64);
  const int n = kBlocks * kThreads;
  std::vector<float> values(W * n);
  std::vector<int> pred(n);
  std::vector<float> start(W * kTargets), want(W * kTargets);
  for (int t = 0; t < W * kTargets; ++t) want[t] = start[t] = static_cast<float>(small(rng));
  for (int i = 0; i < n; ++i) {
    const int tid = i % kThreads;
    for (int e = 0; e < W; ++e) values[W * i + e] = static_cast<float>(small(rng));
    pred[i] = static_cast<int>(rng() % 3 != 0);
    const bool adds = pred[i] || (W == 2 && tid % 2);  // odd threads take the plain v2 form
    if (!adds) continue;
    for (int e = 0; e < W; ++e) want[W * (tid % kTargets) + e] += values[W * i + e];
  }
  float* d_values = nullptr;
  int* d_pred = nullptr;
  float* d_dst = nullptr;
  ASSERT_EQ(cudaMalloc(&d_values, values.size() * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&d_pred, n * sizeof(int)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&d_dst, start.size() * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(d_values, values.data(), values.size() * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(d_pred, pred.data(), n * sizeof(int), cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(d_dst, start.data(), start.size() * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  red_kernel<W><<<kBlocks, kThreads>>>(d_values, d_pred, d_dst);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<float> got(start.size());
  ASSERT_EQ(cudaMemcpy(got.data(), d_dst, got.size() * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  cudaFree(d_values);
  cudaFree(d_pred);
  cudaFree(d_dst);
  for (int t = 0; t < W * kTargets; ++t) EXPECT_EQ(got[t], want[t]) << "target " << t / W << " lane " << t % W;
}

TEST(Ptx, RedAddV2F32) {
  FLASHGATE_REQUIRE_GPU();
  check_red<2>();
}

TEST(Ptx, RedAddV4F32) {
  FLASHGATE_REQUIRE_GPU();
  check_red<4>();
}

}  // namespace
