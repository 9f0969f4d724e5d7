// Small device helpers of the backward's light kernels: block reductions (over warp_sum, online_softmax.h), grid
// sizing, and the sequence that holds a token.
#pragma once

#include <cstdint>
#include <type_traits>

#include "cuda/common/online_softmax.h"
#include "cuda/common/sequence.h"

namespace flashgate::cuda::bwd {

// A slice pair's row's share of dsink (the one place for this rule): -exp(sink - lse) D with the merged row's lse
// and D, 0 for a row that sees nothing.
__device__ __forceinline__ float slice_sink_part(float sink, float lse, float d) {
  return lse != -INFINITY ? -expf(sink - lse) * d : 0.f;
}

// Sum over a block of kThreads threads in a fixed order (deterministic); the result is valid in thread 0.
template <int kThreads>
__device__ __forceinline__ float block_sum(float x, float* scratch /* kThreads / 32 floats */) {
  x = warp_sum(x);
  if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = x;
  __syncthreads();
  float total = 0.f;
  if (threadIdx.x == 0)
    for (int w = 0; w < kThreads / 32; ++w) total += scratch[w];
  __syncthreads();
  return total;
}

// The [B][HQ][T] rows (row_index order) handed out kRows at a time to each group of kLanes threads: a block
// takes kRows * kThreads / kLanes consecutive t of one (b, h) per iteration (grid y over b*HQ + h, x over t), the
// group's rows kThreads / kLanes apart, so that a lane can issue the loads of its kRows rows together. The loops
// are uniform per warp, so every lane reaches the caller's group shuffles; `f(b, h, t0, lane_in_group)` gets rows t0 + r * (kThreads / kLanes), r < kRows, and must itself skip
// those at or past T.
template <int kLanes, int kThreads, int kRows, class F>
__device__ __forceinline__ void for_each_row_group(int64_t B, int64_t HQ, int64_t T, F&& f) {
  constexpr int kGroups = kThreads / kLanes, kBlockRows = kGroups * kRows;
  const int group = static_cast<int>(threadIdx.x) / kLanes, lane = static_cast<int>(threadIdx.x) % kLanes;
  for (int64_t bh = blockIdx.y; bh < B * HQ; bh += gridDim.y) {
    const int64_t b = bh / HQ, h = bh - b * HQ;
    for (int64_t t0 = int64_t{blockIdx.x} * kBlockRows; t0 < T; t0 += int64_t{gridDim.x} * kBlockRows)
      f(b, h, t0 + group, lane);
  }
}

// Sum over aligned groups of kLanes lanes (a power of two <= 32); every lane of the warp must call it.
template <int kLanes>
__device__ __forceinline__ float group_sum(float x) {
#pragma unroll
  for (int d = kLanes / 2; d > 0; d /= 2) x += __shfl_xor_sync(0xffffffffu, x, d);
  return x;
}

// Calls f(std::integral_constant<int, kLanes>) with the lanes per row for rows of `elems` elements moved in
// 16-byte chunks of `chunk` elements: enough to cover the row in one pass, up to a warp (8, 16 or 32).
template <class F>
void with_lanes_per_row(int elems, int chunk, F&& f) {
  if (elems <= 8 * chunk) f(std::integral_constant<int, 8>{});
  else if (elems <= 16 * chunk) f(std::integral_constant<int, 16>{});
  else f(std::integral_constant<int, 32>{});
}

// The grid of for_each_row_group for B*HQ x T rows at rows_per_block rows per block and iteration.
inline dim3 row_group_grid(int64_t bh, int64_t T, int rows_per_block) {
  const int64_t x = (T + rows_per_block - 1) / rows_per_block;
  const auto cap = [](int64_t v, int64_t hi) { return static_cast<unsigned>(v < 1 ? 1 : v > hi ? hi : v); };
  return dim3(cap(x, int64_t{1} << 20), cap(bh, 65535), 1);
}

// Blocks for `jobs` units of work at `per_block` units per block, capped so grid-stride loops take over.
inline unsigned grid_for(int64_t jobs, int per_block) {
  const int64_t blocks = (jobs + per_block - 1) / per_block;
  const int64_t cap = int64_t{1} << 30;
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > cap ? cap : blocks));
}

// The sequence that holds token t (global index when packed) and t's local position in it. A token that
// no sequence holds (only with an unchecked, broken cu_seqlens) gives pos = -1.
struct TokenPlace {
  SequenceSpan seq;
  int64_t n = 0;  // the sequence's index (the batch index when dense)
  int pos = -1;
};

__device__ __forceinline__ TokenPlace place_token(const AttentionParams& p, int64_t b, int64_t t) {
  TokenPlace r;
  if (!p.packed) {
    r.seq = sequence_span(p, b);
    r.n = b;
    r.pos = static_cast<int>(t);
    return r;
  }
  // The last n in [0, N) with cu_seqlens[n] <= t: with zero-length segments that is the one t lies in.
  int64_t lo = 0, hi = p.num_seqs - 1;
  while (lo < hi) {
    const int64_t mid = (lo + hi + 1) / 2;
    if (clamp_token(cu_seqlens_at(p.cu_seqlens, p.cu_seqlens_bytes, mid), 0, p.T) <= t) lo = mid;
    else hi = mid - 1;
  }
  r.seq = sequence_span(p, lo);
  r.n = lo;
  if (t >= r.seq.start && t < r.seq.start + r.seq.len) r.pos = static_cast<int>(t - r.seq.start);
  return r;
}

}  // namespace flashgate::cuda::bwd
