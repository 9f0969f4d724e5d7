// The split-KV (flash-decoding) merge: a row's keys were cut into slices, each slice left its output
// normalised by its own sum, o_s, and the log2 of that sum, lse_s (-inf for a slice that saw no key).
// Then o = sum_s 2^(lse_s - M) o_s / (sum_s 2^(lse_s - M) + sink mass), M = max_s lse_s: an empty slice
// weighs exactly 0, and a row with no key anywhere gives o = 0 (SPEC §3, §6). One warp per row.
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
// out(d, value) for d < dims. `weights` is per-warp shared scratch of kMaxMergeSplits floats.
template <class Store>
__device__ __forceinline__ void merge_split_row(const float* lse, int64_t lse_stride, const float* o, int64_t o_stride,
                                                int splits, int dims, bool has_sink, float sink, float* weights,
                                                Store&& out) {
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
  for (int d = lane; d < dims; d += 32) {
    float x = 0.f;
    for (int s = 0; s < splits; ++s)
      if (weights[s] != 0.f) x += weights[s] * o[s * o_stride + d];
    out(d, x * res.o_scale);
  }
}

}  // namespace flashgate::cuda
