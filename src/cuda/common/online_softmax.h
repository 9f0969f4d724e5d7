// Online softmax in the exp2 domain (scores pre-multiplied by log2 e), one row at a time, with the sink's
// mass and empty rows folded in at the end. A thread may hold a partial row (its columns of a tile): the
// max must be shared across the row's threads before `rescale`, the sum only before `finish_row`.
#pragma once

#include <cmath>

#include "cuda/common/host_device.h"

namespace flashgate::cuda {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

struct SoftmaxRow {
  float max2 = -INFINITY;  // running max of the visible scores (log2 domain); -inf while none was seen
  float sum = 0.f;         // sum of exp2(score - max2) over the scores seen so far (this thread's part)

  // Folds in the max of a new tile's scores; returns the factor that earlier accumulators (o and sum,
  // which this multiplies already) must be scaled by. A row that has seen nothing keeps factor 1.
  FG_HOST_DEVICE float rescale(float tile_max2) {
    const float new_max = fmaxf(max2, tile_max2);
    const float factor = (new_max == -INFINITY) ? 1.f : exp2f(max2 - new_max);
    max2 = new_max;
    sum *= factor;
    return factor;
  }

  // `rescale`, lazily: the running max moves only where the tile's exceeds it by more than kLazySlack (log2
  // units), so once a row's maxima settle its tiles return factor 1 and the accumulators need no multiply. Until
  // it moves, exp2(score - max2) reaches up to 2^kLazySlack, which fp32 sums and fp16 / bf16 probabilities hold;
  // o and lse do not depend on the max the row is summed against. One binade, not more: a key that holds nearly a
  // row's mass but stays within the slack of an earlier max gets a probability of up to 2^slack rounded to the
  // MMA's dtype (the exact max gives it 1); o carries that error into the backward's D = o·do, which the key's
  // dS = P (dP - D) cancels down to (docs/perf-notes.md, lazy rescale).
  static constexpr float kLazySlack = 1.f;
  FG_HOST_DEVICE float rescale_lazily(float tile_max2) {
    return tile_max2 > max2 + kLazySlack ? rescale(tile_max2) : 1.f;
  }

  // What to subtract from a score before exp2: the running max, or 0 while it is -inf (then every score
  // of the row is -inf too and exp2 gives 0 instead of NaN).
  FG_HOST_DEVICE float exp_offset() const { return max2 == -INFINITY ? 0.f : max2; }
};

// The end of a row: the factor that turns the accumulated sum_j exp2(s_j - max2) v_j into o, and lse
// (natural log). `total_sum` is the whole row's sum (partials already reduced). The sink adds
// exp(sink) to the normaliser and nothing to the value; a row with no visible key gives o = 0 and
// lse = -inf, or lse = sink with a sink (SPEC §3).
struct RowResult {
  float o_scale;
  float lse;
};

FG_HOST_DEVICE RowResult finish_row(float max2, float total_sum, bool has_sink, float sink) {
  float m = max2;
  float z = total_sum;
  if (has_sink) {
    const float sink2 = sink * kLog2e;
    const float new_max = fmaxf(m, sink2);
    z = (m == -INFINITY ? 0.f : z * exp2f(m - new_max)) + exp2f(sink2 - new_max);
    const float o_factor = (m == -INFINITY) ? 0.f : exp2f(m - new_max);
    m = new_max;
    return {o_factor / z, (m + log2f(z)) * kLn2};
  }
  if (!(z > 0.f)) return {0.f, -INFINITY};
  return {1.f / z, (m + log2f(z)) * kLn2};
}

#if defined(__CUDACC__)
// Reductions over the 4 threads of an mma quad (lanes 4r..4r+3 hold one accumulator row between them).
__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}
// Reductions over the 8 threads of an mma column (lanes c, c+4, ..., c+28 hold one accumulator column between
// them: a row's values where the rows lie in the mma's n, as in the serving kernel's 8-row tile).
__device__ __forceinline__ float column_max(float x) {
#pragma unroll
  for (int m = 4; m <= 16; m <<= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, m));
  return x;
}
__device__ __forceinline__ float column_sum(float x) {
#pragma unroll
  for (int m = 4; m <= 16; m <<= 1) x += __shfl_xor_sync(0xffffffffu, x, m);
  return x;
}
// Reductions over a whole warp (every lane gets the result).
__device__ __forceinline__ float warp_max(float x) {
#pragma unroll
  for (int m = 16; m > 0; m /= 2) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, m));
  return x;
}
__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
  for (int m = 16; m > 0; m /= 2) x += __shfl_xor_sync(0xffffffffu, x, m);
  return x;
}
#endif

}  // namespace flashgate::cuda
