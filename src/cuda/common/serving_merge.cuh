// The split-KV (flash-decoding) merge: a row's keys were cut into slices, each slice left its output
// normalised by its own sum, o_s, and the log2 of that sum, lse_s (-inf for a slice that saw no key).
// Then o = sum_s 2^(lse_s - M) o_s / (sum_s 2^(lse_s - M) + sink mass), M = max_s lse_s: an empty slice
// weighs exactly 0, and a row with no key anywhere gives o = 0 (SPEC §3, §6). One warp per row and
// 32 of its dims.
#pragma once

#include <cstdint>

#include "cuda/common/online_softmax.h"

namespace flashgate::cuda {

constexpr int kMaxMergeSplits = 256;

__device__ __forceinline__ float warp_max(float x) {
#pragma unroll
  for (int o = 16; o > 0; o /= 2) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}
__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
  for (int o = 16; o > 0; o /= 2) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

// Merges `splits` partials of one row (lse at lse[s * lse_stride], o at o[s * o_stride + d]) into
// out(d, value) for d in [dim_begin, dim_end), one dim per lane. `weights` is per-warp shared scratch of
// kMaxMergeSplits floats. The partials are read kSplitBatch splits at a time with independent loads: the
// kernel is latency-bound (a long context has tens of splits per row), not bandwidth-bound.
template <class Store>
__device__ __forceinline__ void merge_split_row(const float* lse, int64_t lse_stride, const float* o, int64_t o_stride,
                                                int splits, int dim_begin, int dim_end, bool has_sink, float sink,
                                                float* weights, Store&& out) {
  constexpr int kSplitBatch = 16;  // 33 splits (one 128K sequence on 132 SMs): 3 round trips, not 5
  const int lane = threadIdx.x & 31;
  float m = -INFINITY;
  for (int s = lane; s < splits; s += 32) m = fmaxf(m, lse[s * lse_stride]);
  m = warp_max(m);
  float z = 0.f;
  for (int s = lane; s < splits; s += 32) {
    const float w = m == -INFINITY ? 0.f : exp2f(lse[s * lse_stride] - m);
    weights[s] = w;
    z += w;
  }
  z = warp_sum(z);
  __syncwarp();
  const RowResult res = finish_row(m, z, has_sink, sink);
  // A select, not a branch: an empty slice weighs 0 whatever its partial holds.
  auto take = [](float w, float part) { return w != 0.f ? w * part : 0.f; };
  for (int d = dim_begin + lane; d < dim_end; d += 32) {
    float x = 0.f;
    // Whole batches first: kSplitBatch loads with no predicate, all issued before the first add (with a
    // predicate per split and `if (w != 0) x += ...` the compiler put each load next to its add, one round
    // trip per split: 17 us for the 33 splits of one 128K sequence, 23 us for fp8's 49, in ncu).
    int s0 = 0;
    for (; s0 + kSplitBatch <= splits; s0 += kSplitBatch) {
      float part[kSplitBatch];
#pragma unroll
      for (int u = 0; u < kSplitBatch; ++u) part[u] = __ldcg(o + (s0 + u) * o_stride + d);
#pragma unroll
      for (int u = 0; u < kSplitBatch; ++u) x += take(weights[s0 + u], part[u]);
    }
    for (; s0 < splits; ++s0) x += take(weights[s0], __ldcg(o + s0 * o_stride + d));
    out(d, x * res.o_scale);
  }
}

}  // namespace flashgate::cuda
