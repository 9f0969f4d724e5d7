// GPU tests of the reductions into global memory (src/cuda/ptx/red.h, sm_90+): several blocks add random
// integer-valued float4s (exact in fp32 in any order) into shared targets, checking every lane's sum (each lane of
// a vector lands in its own float); and several blocks have the copy engine add runs of their shared memory into one
// run of global memory (two bulk reductions of unequal size in one group, the source overwritten once read).
// Fresh random inputs; skipped below sm_90.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "cuda/ptx/red.h"
#include "cuda/ptx/tma.h"
#include "harness/owned_tensor.h"
#include "support/compare.h"

namespace {

constexpr int kTargets = 64, kBlocks = 8, kThreads = 128;  // each thread adds into target tid % kTargets
constexpr int W = 4;                                        // floats per reduction

// Thread i adds values[W*i .. W*i+W) into target tid % kTargets.
__global__ void red_kernel(const float* values, float* dst) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  const int i = blockIdx.x * kThreads + threadIdx.x;
  const float* v = values + W * i;
  flashgate::ptx::red_add_v4_f32(dst + W * (threadIdx.x % kTargets), make_float4(v[0], v[1], v[2], v[3]));
#endif
}

// The device's compute capability major into *major.
void compute_major(int* major) {
  int device = 0;
  ASSERT_EQ(cudaGetDevice(&device), cudaSuccess);
  ASSERT_EQ(cudaDeviceGetAttribute(major, cudaDevAttrComputeCapabilityMajor, device), cudaSuccess);
}

// Runs kernel<<<kBlocks, kThreads>>>(values, dst) with dst holding `start` on the GPU; *got: dst afterwards.
void run_adds(void (*kernel)(const float*, float*), const std::vector<float>& values, const std::vector<float>& start,
              std::vector<float>* got) {
  float* d_values = nullptr;
  float* d_dst = nullptr;
  ASSERT_EQ(cudaMalloc(&d_values, values.size() * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&d_dst, start.size() * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(d_values, values.data(), values.size() * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(d_dst, start.data(), start.size() * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  kernel<<<kBlocks, kThreads>>>(d_values, d_dst);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  got->resize(start.size());
  ASSERT_EQ(cudaMemcpy(got->data(), d_dst, got->size() * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  cudaFree(d_values);
  cudaFree(d_dst);
}

TEST(Ptx, RedAddV4F32) {
  FLASHGATE_REQUIRE_GPU();
  int major = 0;
  ASSERT_NO_FATAL_FAILURE(compute_major(&major));
  if (major < 9) GTEST_SKIP() << "red.global.add.v4.f32 needs sm_90";
  const uint64_t seed = flashgate::harness::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> small(-64, 64);
  const int n = kBlocks * kThreads;
  std::vector<float> values(W * n);
  std::vector<float> start(W * kTargets), want(W * kTargets);
  for (int t = 0; t < W * kTargets; ++t) want[t] = start[t] = static_cast<float>(small(rng));
  for (int i = 0; i < n; ++i) {
    const int tid = i % kThreads;
    for (int e = 0; e < W; ++e) values[W * i + e] = static_cast<float>(small(rng));
    for (int e = 0; e < W; ++e) want[W * (tid % kTargets) + e] += values[W * i + e];
  }
  std::vector<float> got;
  ASSERT_NO_FATAL_FAILURE(run_adds(red_kernel, values, start, &got));
  for (int t = 0; t < W * kTargets; ++t) EXPECT_EQ(got[t], want[t]) << "target " << t / W << " lane " << t % W;
}

constexpr int kRun = 1024, kSplit = 384;  // floats of the run; the first reduction's share

// Block b adds values[b kRun ..] into dst[0 .. kRun) through shared memory: two bulk reductions (kSplit floats, then
// the rest) in one group; once the engine has read them, the source is overwritten (what it added stays as read).
__global__ void bulk_kernel(const float* values, float* dst) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  __shared__ alignas(128) float run[kRun];
  for (int i = threadIdx.x; i < kRun; i += blockDim.x) run[i] = values[blockIdx.x * kRun + i];
  flashgate::ptx::fence_async_shared();
  __syncthreads();
  if (threadIdx.x == 0) {
    flashgate::ptx::bulk_add_f32(dst, run, kSplit * 4);
    flashgate::ptx::bulk_add_f32(dst + kSplit, run + kSplit, (kRun - kSplit) * 4);
    flashgate::ptx::bulk_commit();
    flashgate::ptx::bulk_wait_read<0>();
  }
  __syncthreads();
  for (int i = threadIdx.x; i < kRun; i += blockDim.x) run[i] = 1e30f;
  if (threadIdx.x == 0) flashgate::ptx::bulk_wait_done<0>();
#endif
}

TEST(Ptx, BulkAddF32) {
  FLASHGATE_REQUIRE_GPU();
  int major = 0;
  ASSERT_NO_FATAL_FAILURE(compute_major(&major));
  if (major < 9) GTEST_SKIP() << "cp.reduce.async.bulk needs sm_90";
  const uint64_t seed = flashgate::harness::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> small(-64, 64);
  std::vector<float> values(kBlocks * kRun), want(kRun);
  for (int i = 0; i < kRun; ++i) want[i] = static_cast<float>(small(rng));
  const std::vector<float> start = want;
  for (int b = 0; b < kBlocks; ++b)
    for (int i = 0; i < kRun; ++i) want[i] += values[b * kRun + i] = static_cast<float>(small(rng));
  std::vector<float> got;
  ASSERT_NO_FATAL_FAILURE(run_adds(bulk_kernel, values, start, &got));
  for (int i = 0; i < kRun; ++i) EXPECT_EQ(got[i], want[i]) << "float " << i;
}

}  // namespace
