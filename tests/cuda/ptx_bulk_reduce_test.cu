// GPU test of the bulk reductions (src/cuda/ptx/bulk_reduce.h, sm_90+): several blocks stage random
// integer-valued float rows (exact in fp32 in any order) in a padded shared tile and add them into one global
// tile with one bulk reduction per row, where a random predicate holds and over a random prefix of the row
// (a multiple of 4 floats); two rounds reuse the shared tile after bulk_wait_read, as the backward does.
// Checks the sums and that columns past each prefix and predicated-off rows left no trace. Fresh random
// inputs; skipped below sm_90.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "cuda/ptx/bulk_reduce.h"
#include "harness/owned_tensor.h"
#include "support/compare.h"

namespace {

constexpr int kRows = 16, kCols = 64, kPad = 8, kBlocks = 8, kRounds = 2, kThreads = 128;
constexpr int kLds = kCols + kPad;

// values[round][block][row][col]; cols[round][block][row]: floats added from that row (0: none).
__global__ void bulk_reduce_kernel(const float* values, const int* cols, float* dst) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  __shared__ __align__(16) float tile[kRows * kLds];
  const int tid = threadIdx.x;
  for (int round = 0; round < kRounds; ++round) {
    const float* v = values + (static_cast<int64_t>(round) * kBlocks + blockIdx.x) * kRows * kCols;
    for (int e = tid; e < kRows * kCols; e += kThreads) tile[(e / kCols) * kLds + e % kCols] = v[e];
    flashgate::ptx::fence_proxy_async_shared();
    __syncthreads();
    if (tid < kRows) {
      const int n = cols[(round * kBlocks + blockIdx.x) * kRows + tid];
      if (n > 0) flashgate::ptx::bulk_reduce_add_f32(dst + tid * kCols, tile + tid * kLds, 4u * n);
      flashgate::ptx::bulk_commit();
      flashgate::ptx::bulk_wait_read<0>();  // the tile may be written again after the barrier
    }
    __syncthreads();
  }
  if (tid < kRows) flashgate::ptx::bulk_wait<0>();
#endif
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
  std::uniform_int_distribution<int> small(-64, 64);
  const int tiles = kRounds * kBlocks;
  std::vector<float> values(static_cast<size_t>(tiles) * kRows * kCols);
  std::vector<int> cols(static_cast<size_t>(tiles) * kRows);
  std::vector<float> start(kRows * kCols), want(kRows * kCols);
  for (int e = 0; e < kRows * kCols; ++e) want[e] = start[e] = static_cast<float>(small(rng));
  for (auto& x : values) x = static_cast<float>(small(rng));
  for (int t = 0; t < tiles; ++t)
    for (int r = 0; r < kRows; ++r) {
      const int n = rng() % 4 == 0 ? 0 : 4 * static_cast<int>(1 + rng() % (kCols / 4));
      cols[t * kRows + r] = n;
      for (int c = 0; c < n; ++c) want[r * kCols + c] += values[(static_cast<size_t>(t) * kRows + r) * kCols + c];
    }
  float* d_values = nullptr;
  int* d_cols = nullptr;
  float* d_dst = nullptr;
  ASSERT_EQ(cudaMalloc(&d_values, values.size() * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&d_cols, cols.size() * sizeof(int)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&d_dst, start.size() * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(d_values, values.data(), values.size() * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(d_cols, cols.data(), cols.size() * sizeof(int), cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(d_dst, start.data(), start.size() * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  bulk_reduce_kernel<<<kBlocks, kThreads>>>(d_values, d_cols, d_dst);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<float> got(start.size());
  ASSERT_EQ(cudaMemcpy(got.data(), d_dst, got.size() * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  cudaFree(d_values);
  cudaFree(d_cols);
  cudaFree(d_dst);
  for (int e = 0; e < kRows * kCols; ++e) EXPECT_EQ(got[e], want[e]) << "row " << e / kCols << " col " << e % kCols;
}

}  // namespace
