// One chunk of a block-wide inclusive scan, one value a thread in thread order: the pre-kernels that scan
// sequences (tile maps, the gate's prefix sums and their gradient, the decode gate's bias) walk a sequence in chunks
// of the block's threads and carry the sum from chunk to chunk.
#pragma once

namespace flashgate::cuda {

// `before`: the carry plus the totals of the warps before this thread's (in that order); `inclusive`: this warp's
// values up to this thread's; `total`: the carry plus every warp's. The thread's inclusive prefix is before +
// inclusive.
template <class T>
struct ChunkScan {
  T before, inclusive, total;
};

// `warp_sums` (kThreads / 32 in shared memory) is written here and read after one __syncthreads; the caller syncs
// again before the next chunk writes it. `carry` is read after that sync (it may sit in shared memory).
template <int kThreads, class T>
__device__ __forceinline__ ChunkScan<T> scan_chunk(T x, T* warp_sums, const T& carry) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
#pragma unroll
  for (int d = 1; d < 32; d *= 2) {
    const T y = __shfl_up_sync(0xffffffffu, x, d);
    if (lane >= d) x += y;
  }
  if (lane == 31) warp_sums[warp] = x;
  __syncthreads();
  T before = carry, total = carry;
#pragma unroll
  for (int w = 0; w < kThreads / 32; ++w) {
    before += w < warp ? warp_sums[w] : T{};
    total += warp_sums[w];
  }
  return {before, x, total};
}

}  // namespace flashgate::cuda
