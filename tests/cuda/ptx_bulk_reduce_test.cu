// GPU test of the bulk reduce wrappers (src/cuda/ptx/bulk_reduce.h, sm_90+): several CTAs add padded shared
// rows into the same global rows twice, reusing the shared buffer after bulk_wait_read (the backward's dQ
// protocol). Checks the sums, that columns past the sent bytes stay untouched, and that the reuse does not
// let the second round's values leak into the first round's reads. Fresh random inputs; skipped below sm_90.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "cuda/ptx/bulk_reduce.h"
#include "harness/owned_tensor.h"
#include "support/compare.h"

namespace {

constexpr int kRows = 40, kCols = 48, kSentCols = 32, kStride = kCols + 8, kBlocks = 6, kRounds = 2;

// Round r of block b adds src[r][b] (kRows x kCols, only kSentCols per row sent) into dst (kRows x kCols).
__global__ void bulk_reduce_kernel(const float* src, float* dst) {
  __shared__ __align__(16) float tile[kRows * kStride];
  for (int round = 0; round < kRounds; ++round) {
    const float* mine = src + (round * kBlocks + blockIdx.x) * kRows * kCols;
    for (int e = threadIdx.x; e < kRows * kCols; e += blockDim.x) tile[(e / kCols) * kStride + e % kCols] = mine[e];
    flashgate::ptx::fence_proxy_async_shared();
    __syncthreads();
    if (threadIdx.x < 32) {
      for (int r = threadIdx.x; r < kRows; r += 32)
        flashgate::ptx::bulk_reduce_add_f32(dst + r * kCols, tile + r * kStride, kSentCols * sizeof(float));
      flashgate::ptx::bulk_commit();
      flashgate::ptx::bulk_wait_read<0>();
    }
    __syncthreads();  // the tile is free for the next round
  }
  if (threadIdx.x < 32) flashgate::ptx::bulk_wait<0>();
}

TEST(Ptx, BulkReduceAddF32) {
  FLASHGATE_REQUIRE_GPU();
  int device = 0, major = 0;
  ASSERT_EQ(cudaGetDevice(&device), cudaSuccess);
  ASSERT_EQ(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device), cudaSuccess);
  if (major < 9) GTEST_SKIP() << "cp.reduce.async.bulk needs sm_90";
  const uint64_t seed = flashgate::harness::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> src(size_t{kRounds} * kBlocks * kRows * kCols), dst(size_t{kRows} * kCols);
  for (auto& x : src) x = u(rng);
  for (auto& x : dst) x = u(rng);

  float *d_src = nullptr, *d_dst = nullptr;
  ASSERT_EQ(cudaMalloc(&d_src, src.size() * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&d_dst, dst.size() * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(d_src, src.data(), src.size() * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(d_dst, dst.data(), dst.size() * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  bulk_reduce_kernel<<<kBlocks, 128>>>(d_src, d_dst);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<float> out(dst.size());
  ASSERT_EQ(cudaMemcpy(out.data(), d_dst, out.size() * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  cudaFree(d_src);
  cudaFree(d_dst);

  for (int r = 0; r < kRows; ++r)
    for (int c = 0; c < kCols; ++c) {
      double want = dst[r * kCols + c];
      if (c < kSentCols)
        for (size_t k = 0; k < size_t{kRounds} * kBlocks; ++k) want += src[(k * kRows + r) * kCols + c];
      const float got = out[r * kCols + c];
      if (c < kSentCols) EXPECT_NEAR(got, want, 1e-4) << "row " << r << " column " << c;
      else EXPECT_EQ(got, dst[r * kCols + c]) << "row " << r << " column " << c << " (not sent)";
    }
}

}  // namespace
