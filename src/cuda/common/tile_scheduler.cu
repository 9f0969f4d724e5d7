// The packed tile-map pre-kernel: one block scans the per-sequence tile counts in chunks of kThreads
// sequences and every thread writes its sequence's entries.
#include "cuda/common/cuda_check.h"
#include "cuda/common/sequence.h"
#include "cuda/common/tile_scheduler.h"

namespace flashgate::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads) build_tile_map_kernel(AttentionParams p, TileSchedule s, TileMapEntry* map) {
  __shared__ int64_t warp_sums[kThreads / 32];
  __shared__ int64_t carry;
  if (threadIdx.x == 0) carry = 0;
  __syncthreads();
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int64_t chunk = 0; chunk < p.num_seqs; chunk += kThreads) {
    const int64_t n = chunk + threadIdx.x;
    const int64_t tiles = n < p.num_seqs ? ceil_div(sequence_span(p, n).len, s.tile_rows) : 0;
    // Inclusive scan of `tiles` over the block: warp shuffles, then the warp totals.
    int64_t x = tiles;
#pragma unroll
    for (int d = 1; d < 32; d *= 2) {
      const int64_t y = __shfl_up_sync(0xffffffffu, x, d);
      if (lane >= d) x += y;
    }
    if (lane == 31) warp_sums[warp] = x;
    __syncthreads();
    int64_t before = carry, total = carry;
    for (int w = 0; w < kThreads / 32; ++w) {
      before += w < warp ? warp_sums[w] : 0;
      total += warp_sums[w];
    }
    const int64_t first = before + x - tiles;  // exclusive prefix: this sequence's first tile number
    for (int64_t t = 0; t < tiles && first + t < s.num_tiles; ++t)
      map[first + t] = {static_cast<int32_t>(n), static_cast<int32_t>(t)};
    __syncthreads();  // all have read carry and warp_sums
    if (threadIdx.x == 0) carry = total;
    __syncthreads();
  }
  for (int64_t t = carry + threadIdx.x; t < s.num_tiles; t += kThreads) map[t] = {-1, -1};
}

}  // namespace

void launch_build_tile_map(const AttentionParams& p, const TileSchedule& s, TileMapEntry* map, CUstream_st* stream) {
  if (!p.packed || s.num_tiles == 0) return;
  build_tile_map_kernel<<<1, kThreads, 0, stream>>>(p, s, map);
  FLASHGATE_CHECK_LAUNCH("build_tile_map_kernel");
}

}  // namespace flashgate::cuda
