// The packed tile-map pre-kernels, one block each: sequence after sequence (a scan of the per-sequence tile counts
// in chunks of kThreads sequences, every thread writing its sequence's entries), and longest first.
#include "cuda/common/block_scan.cuh"
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
  for (int64_t chunk = 0; chunk < p.num_seqs; chunk += kThreads) {
    const int64_t n = chunk + threadIdx.x;
    const int64_t tiles = n < p.num_seqs ? ceil_div(sequence_span(p, n).len, s.tile_rows) : 0;
    const ChunkScan<int64_t> scan = scan_chunk<kThreads>(tiles, warp_sums, carry);
    const int64_t first = scan.before + scan.inclusive - tiles;  // exclusive prefix: this sequence's first tile number
    for (int64_t t = 0; t < tiles && first + t < s.num_tiles; ++t)
      map[first + t] = {static_cast<int32_t>(n), static_cast<int32_t>(t)};
    __syncthreads();  // all have read carry and warp_sums
    if (threadIdx.x == 0) carry = scan.total;
    __syncthreads();
  }
  for (int64_t t = carry + threadIdx.x; t < s.num_tiles; t += kThreads) map[t] = {-1, -1};
}

// The longest-first map (launch_build_longest_first_map), one block: with n_s the tile count of sequence s, count[v]
// = the sequences of v tiles; then, by two suffix sums, count[t] = the tiles of an index above t, where index t's
// tiles begin; each sequence claims a place there for each of its tiles. `limit`: counts in shared memory (bound of
// every n_s, + 1).
__global__ void __launch_bounds__(kThreads) build_longest_first_map_kernel(AttentionParams p, TileSchedule s,
                                                                          TileMapEntry* map, int limit) {
  extern __shared__ int count[];
  __shared__ int warp_sums[kThreads / 32];
  __shared__ int carry, total;
  for (int v = threadIdx.x; v < limit; v += kThreads) count[v] = 0;
  if (threadIdx.x == 0) total = 0;
  __syncthreads();
  int mine = 0;
  for (int64_t n = threadIdx.x; n < p.num_seqs; n += kThreads) {
    const int tiles = static_cast<int>(ceil_div(sequence_span(p, n).len, s.tile_rows));
    if (tiles > 0) atomicAdd(&count[tiles], 1);
    mine += tiles;
  }
  atomicAdd(&total, mine);
  // count[t] becomes sum over v > t of count[v] (inclusive suffix sums, shifted by one), twice: the sequences
  // with more than t tiles (index t's tiles), then the tiles of indices above t.
  const auto suffix_sums_above = [&] {
    if (threadIdx.x == 0) carry = 0;
    __syncthreads();
    for (int end = limit; end > 0; end -= kThreads) {  // chunks from the top; thread 0 takes a chunk's highest v
      const int v = end - 1 - static_cast<int>(threadIdx.x);
      const int x = v >= 0 ? count[v] : 0;
      const ChunkScan<int> scan = scan_chunk<kThreads>(x, warp_sums, carry);
      __syncthreads();  // every thread read count[v], carry and warp_sums
      if (v >= 0) count[v] = scan.before + scan.inclusive - x;  // the sum over v' > v
      if (threadIdx.x == 0) carry = scan.total;
      __syncthreads();
    }
  };
  suffix_sums_above();
  suffix_sums_above();
  for (int64_t n = threadIdx.x; n < p.num_seqs; n += kThreads) {
    const int tiles = static_cast<int>(ceil_div(sequence_span(p, n).len, s.tile_rows));
    for (int t = 0; t < tiles; ++t) map[atomicAdd(&count[t], 1)] = {static_cast<int32_t>(n), static_cast<int32_t>(t)};
  }
  for (int64_t t = total + threadIdx.x; t < s.num_tiles; t += kThreads) map[t] = {-1, -1};
}

}  // namespace

TileSchedule launch_build_longest_first_map(const AttentionParams& p, TileSchedule s, TileMapEntry* map,
                                            CUstream_st* stream) {
  const int64_t most = ceil_div(p.T, s.tile_rows);  // no sequence holds more tiles
  if (!p.packed || s.num_tiles == 0 || most > kLongestFirstMaxTiles) {
    launch_build_tile_map(p, s, map, stream);
    return s;
  }
  const int limit = static_cast<int>(most) + 1;
  build_longest_first_map_kernel<<<1, kThreads, limit * sizeof(int), stream>>>(p, s, map, limit);
  FLASHGATE_CHECK_LAUNCH("build_longest_first_map_kernel");
  s.longest_first = true;
  return s;
}

void launch_build_tile_map(const AttentionParams& p, const TileSchedule& s, TileMapEntry* map, CUstream_st* stream) {
  if (!p.packed || s.num_tiles == 0) return;
  build_tile_map_kernel<<<1, kThreads, 0, stream>>>(p, s, map);
  FLASHGATE_CHECK_LAUNCH("build_tile_map_kernel");
}

}  // namespace flashgate::cuda
