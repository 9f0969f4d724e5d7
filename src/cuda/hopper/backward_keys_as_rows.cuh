// Steps of the Hopper backward made with the keys as rows (sm_90a): S^T = K Q^T and dP^T = V dO^T as m64nN
// accumulators whose rows are the tile's keys and whose columns are the step's queries (cuda/ptx/wgmma.h has the
// accumulator layout), and the gate's terms and column sums of a thread's keys. The narrow kernel's consumers and the
// wide kernel's split consumers take them.
#pragma once

#include <cstdint>

#include "cuda/common/attention_params.h"
#include "cuda/common/backward_params.h"
#include "cuda/common/online_softmax.h"
#include "cuda/common/visibility.h"
#include "cuda/hopper/backward_roles.cuh"
#include "cuda/ptx/fast_math.h"

namespace flashgate::cuda::hopper {

#if defined(__CUDACC__)
namespace bwd_detail {

// P^T = exp2(S^T scale log2 e - row offset - key term) in place in s (kN query columns). This thread's keys are keys.x
// and keys.y (accumulator rows g and g + 8), with their gate terms in key_term where kKeyTerms; the columns are the
// step's queries at key positions from pos0 (i0 + key_shift), their row offsets in row_offsets. kMasked: the step's
// block crosses the causal diagonal, the window's edge or the keys' end (a slice pair's key_end: a sequence's keys
// past its end meet only rows past it, whose P is 0 through their terms).
template <bool kMasked, bool kKeyTerms, int kN>
__device__ __forceinline__ void probabilities_by_key(float (&s)[kN / 2], const AttentionParams& a,
                                                     const float* row_offsets, int pos0, int2 keys, float2 key_term,
                                                     int lane) {
  const int c = lane % 4;
  const unsigned bound = distance_bound(a.window);
#pragma unroll
  for (int j = 0; j < kN / 8; ++j) {
    const float2 r = *reinterpret_cast<const float2*>(row_offsets + 8 * j + 2 * c);
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int q = pos0 + 8 * j + 2 * c + (e & 1), kk = (e >> 1) ? keys.y : keys.x;
      const float offset = ((e & 1) ? r.y : r.x) + (kKeyTerms ? ((e >> 1) ? key_term.y : key_term.x) : 0.f);
      float pr = ptx::exp2_ftz(fmaf(s[4 * j + e], a.scale_log2, -offset));
      if (kMasked && (!visible_at_distance(q - kk, bound) || kk >= a.key_end)) pr = 0.f;
      s[4 * j + e] = pr;
    }
  }
}

// With a gate: its key terms Gc_key log2 e of a thread's keys (key0 and key0 + 8: accumulator rows g and g + 8) for
// query head h, 0 past the keys' end, a slice pair's relative to its anchor (gate_anchor).
template <int BN>
__device__ __forceinline__ float2 key_gate_terms(const AttentionParams& a, const KeyWork& w, int64_t h, int key0) {
  const float* gc = a.gc_key_row(w.seq.batch, h) + w.seq.start;
  const float anchor = gate_anchor<BN>(a, w, h);
  const int k0 = key0, k1 = key0 + 8, n = a.key_len(w.seq.len);
  return make_float2(k0 < n ? (gc[k0] - anchor) * kLog2e : 0.f, k1 < n ? (gc[k1] - anchor) * kLog2e : 0.f);
}

// The gate's column sums of a thread's keys (key0 and key0 + 8: accumulator rows g and g + 8) for query head h: each
// key's parts over the thread's columns (colsum, zeroed here) summed over its quad and stored by the quad's first
// lane, where `store` says so (a CTA pair's second CTA holds the same sums) and the key is in the sequence.
__device__ __forceinline__ void store_key_colsums(float (&colsum)[2], const bwd::BackwardParams& p, const KeyWork& w,
                                                  int64_t h, int key0, int lane, bool store) {
  const int64_t base = p.key_index(w.seq.batch, h, w.seq.start);
  const int n = p.a.key_len(w.seq.len);
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int key = key0 + 8 * half;
    const float v = quad_sum(colsum[half]);
    colsum[half] = 0.f;
    if (p.a.has_gate && store && lane % 4 == 0 && key < n) p.colsum[base + key] = v;
  }
}

// A warp's sums over its 16 key rows of four values a thread holds for query columns col and col + 1 (col = 8 j +
// 2 c): sums[0..1] those columns' E parts, sums[2..3] their mass parts, each already over the thread's two keys. They
// go to partials[(E | mass) kWarps + warp][col..], one value a lane: each exchange halves what a lane keeps, so that
// lane bits 4 and 3 end up naming which of the four it holds.
template <int kWarps, int kRows>
__device__ __forceinline__ void store_query_sums(const float (&sums)[4], float* partials, int warp, int col,
                                                 int lane) {
  const bool b4 = lane & 16, b3 = lane & 8;
  float keep0 = b4 ? sums[2] : sums[0], keep1 = b4 ? sums[3] : sums[1];
  keep0 += __shfl_xor_sync(0xffffffffu, b4 ? sums[0] : sums[2], 16);
  keep1 += __shfl_xor_sync(0xffffffffu, b4 ? sums[1] : sums[3], 16);
  float keep = b3 ? keep1 : keep0;
  keep += __shfl_xor_sync(0xffffffffu, b3 ? keep0 : keep1, 8);
  keep += __shfl_xor_sync(0xffffffffu, keep, 4);
  if (!(lane & 4)) partials[((b4 ? kWarps : 0) + warp) * kRows + col + (b3 ? 1 : 0)] = keep;
}

}  // namespace bwd_detail
#endif  // __CUDACC__

}  // namespace flashgate::cuda::hopper
