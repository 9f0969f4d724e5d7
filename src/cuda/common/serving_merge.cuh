// The split-KV (flash-decoding) merge: a row's keys were cut into slices, each slice left its output
// normalised by its own sum, o_s, and the log2 of that sum, lse_s (-inf for a slice that saw no key).
// Then o = sum_s 2^(lse_s - M) o_s / (sum_s 2^(lse_s - M) + sink mass), M = max_s lse_s: an empty slice
// weighs exactly 0, and a row with no key anywhere gives o = 0 (SPEC §3, §6). One warp per row and
// 32 of its dims.
#pragma once

#include <cstdint>

#include "cuda/common/online_softmax.h"

namespace flashgate::cuda {

// Merges `splits` partials of one row (lse at lse[s * lse_stride], o at o[s * o_stride + d]) into
// out(d, value) for d = dim_begin + lane < dim_end (one dim per lane, at most 32 per call). The kernel is
// latency-bound (a long context has tens of splits per row), so the splits go in batches of kBatch whose
// lse values (kBatch / 32 per lane) and partials (one per split for the lane's dim) are all in flight before
// any is used: a batch costs one round trip. The launcher takes the smallest batch that holds every split,
// since each load of a batch is an L2 request whether or not its split exists. Batches combine like the
// online softmax (running max, rescaled sums); a lane's weight reaches the others by shuffle.
template <int kBatch, class Store>
__device__ __forceinline__ void merge_split_row(const float* lse, int64_t lse_stride, const float* o, int64_t o_stride,
                                                int splits, int dim_begin, int dim_end, bool has_sink, float sink,
                                                Store&& out) {
  constexpr int kLsePerLane = (kBatch + 31) / 32;
  const int lane = threadIdx.x & 31;
  const int d = min(dim_begin + lane, dim_end - 1);  // lanes past the dims read a valid address, store nothing
  // Indices past the last split repeat it, so that every load is unpredicated (predicated ones were put next
  // to their adds by the compiler: one round trip per split, 17 us for one 128K sequence's 33 splits in
  // ncu); their weight is 0.
  auto at = [&](int s) { return min(s, splits - 1); };
  // A select, not a branch: an empty slice (or a repeated index) weighs 0 whatever its partial holds.
  auto take = [](float w, float part) { return w != 0.f ? w * part : 0.f; };
  float m = -INFINITY, z = 0.f, x = 0.f;  // running max of lse, sum of weights and o numerator relative to it
  for (int s0 = 0; s0 < splits; s0 += kBatch) {
    float l[kLsePerLane], part[kBatch];
#pragma unroll
    for (int j = 0; j < kLsePerLane; ++j) l[j] = __ldcg(lse + at(s0 + 32 * j + lane) * lse_stride);
#pragma unroll
    for (int u = 0; u < kBatch; ++u) part[u] = __ldcg(o + at(s0 + u) * o_stride + d);
    float batch_max = -INFINITY;
#pragma unroll
    for (int j = 0; j < kLsePerLane; ++j) {  // lane's split s0 + 32 j + lane: in this batch and real, or -inf
      const int u = 32 * j + lane;
      l[j] = u < kBatch && s0 + u < splits ? l[j] : -INFINITY;
      batch_max = fmaxf(batch_max, l[j]);
    }
    const float m_new = fmaxf(m, warp_max(batch_max));
    if (m_new == -INFINITY) continue;  // no slice with keys yet (the same in every lane)
    const float rescale = exp2f(m - m_new);  // 0 while m is -inf
    x *= rescale, z *= rescale, m = m_new;
    float w_sum = 0.f;  // from here l[j] is the weight of split s0 + 32 j + lane
#pragma unroll
    for (int j = 0; j < kLsePerLane; ++j) l[j] = exp2f(l[j] - m), w_sum += l[j];
    z += warp_sum(w_sum);
#pragma unroll
    for (int u = 0; u < kBatch; ++u) x += take(__shfl_sync(0xffffffffu, l[u / 32], u & 31), part[u]);
  }
  const RowResult res = finish_row(m, z, has_sink, sink);
  if (dim_begin + lane < dim_end) out(dim_begin + lane, x * res.o_scale);
}

}  // namespace flashgate::cuda
