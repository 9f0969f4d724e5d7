#include "cuda/portable/forward_simple.h"

#include <cuda_runtime.h>

#include <cmath>

#include "cuda/common/cuda_check.h"
#include "cuda/common/element.h"
#include "cuda/common/online_softmax.h"
#include "cuda/common/sequence.h"
#include "cuda/common/visibility.h"

namespace flashgate::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kMaxDim = 512;
constexpr int kPerLane = kMaxDim / 32;  // value dims per lane

// The packed sequence holding token t: the last n with cu_seqlens[n] <= t (bounded reads).
__device__ int64_t sequence_of_token(const AttentionParams& p, int64_t t) {
  int64_t lo = 0, hi = p.num_seqs;
  while (lo < hi) {
    const int64_t mid = (lo + hi + 1) / 2;
    if (clamp_token(cu_seqlens_at(p.cu_seqlens, p.cu_seqlens_bytes, mid), 0, p.T) <= t) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

// Keys go 32 at a time: lane l scores key j0 + l, then the warp folds the 32 into every lane's value dims
// (lane owns dims lane, lane + 32, ...).
template <class T>
__global__ void __launch_bounds__(kWarps * 32) forward_simple_kernel(const __grid_constant__ AttentionParams p) {
  __shared__ float q_row[kWarps][kMaxDim];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t total = (p.packed ? p.T : p.B * p.T) * p.HQ;
  for (int64_t item = static_cast<int64_t>(blockIdx.x) * kWarps + warp; item < total;
       item += static_cast<int64_t>(gridDim.x) * kWarps) {
    const int64_t h = item % p.HQ, token = item / p.HQ;
    SequenceSpan seq;
    int i;
    if (p.packed) {
      const int64_t n = sequence_of_token(p, token);
      if (n >= p.num_seqs) continue;
      seq = sequence_span(p, n);
      if (token < seq.start || token >= seq.start + seq.len) continue;
      i = static_cast<int>(token - seq.start);
    } else {
      seq = sequence_span(p, token / p.T);
      i = static_cast<int>(token % p.T);
    }
    const int64_t kvh = h / p.group;
    const T* q = p.q.row<const T>(seq.batch, seq.start + i, h);
    __syncwarp();
    for (int d = lane; d < p.K; d += 32) q_row[warp][d] = to_float(q[d]);
    __syncwarp();
    const float* gc = p.has_gate ? p.gc_row(seq.batch, h) + seq.start : nullptr;
    const float gq2 = gc ? gc[i] * kLog2e : 0.f;

    float acc[kPerLane];
#pragma unroll
    for (int r = 0; r < kPerLane; ++r) acc[r] = 0.f;
    SoftmaxRow row;  // identical in every lane (all reductions are warp-wide)
    const KeySpan keys = keys_seen_by_rows(i, i + 1, seq.len, p.window);
    for (int j0 = keys.begin; j0 < keys.end; j0 += 32) {
      const int j = j0 + lane;
      float s2 = -INFINITY;
      if (j < keys.end && visible(i, j, seq.len, p.window)) {
        const T* k = p.k.row<const T>(seq.batch, seq.start + j, kvh);
        float dot = 0.f;
        for (int d = 0; d < p.K; ++d) dot = fmaf(q_row[warp][d], to_float(k[d]), dot);
        s2 = dot * p.scale_log2 + (gc ? gq2 - gc[j] * kLog2e : 0.f);
      }
      const float factor = row.rescale(warp_max(s2));
      const float prob = exp2f(s2 - row.exp_offset());
      row.sum += warp_sum(prob);
#pragma unroll
      for (int r = 0; r < kPerLane; ++r) acc[r] *= factor;
      const int keys_here = min(32, keys.end - j0);
      for (int l = 0; l < keys_here; ++l) {
        const float pl = __shfl_sync(0xffffffffu, prob, l);
        if (pl == 0.f) continue;  // uniform across the warp
        const T* v = p.v.row<const T>(seq.batch, seq.start + j0 + l, kvh);
#pragma unroll
        for (int r = 0; r < kPerLane; ++r) {
          const int d = lane + 32 * r;
          if (d < p.V) acc[r] = fmaf(pl, to_float(v[d]), acc[r]);
        }
      }
    }
    const RowResult res = finish_row(row.max2, row.sum, p.has_sink, p.has_sink ? p.sink[h] : 0.f);
    T* o = p.o.row<T>(seq.batch, seq.start + i, h);
#pragma unroll
    for (int r = 0; r < kPerLane; ++r) {
      const int d = lane + 32 * r;
      if (d < p.V) o[d] = from_float<T>(acc[r] * res.o_scale);
    }
    if (p.o_residual.data) {
      int8_t* code = p.o_residual.row<int8_t>(seq.batch, seq.start + i, h);
#pragma unroll
      for (int r = 0; r < kPerLane; ++r) {
        const int d = lane + 32 * r;
        const float x = acc[r] * res.o_scale;
        if (d < p.V) code[d] = residual_code<T>(x, to_float(from_float<T>(x)));
      }
    }
    if (p.has_lse && lane == 0) *p.lse.row<float>(seq.batch, seq.start + i, h) = res.lse;
  }
}

}  // namespace

void launch_forward_simple(const AttentionParams& p, CUstream_st* stream) {
  const int64_t rows = (p.packed ? p.T : p.B * p.T) * p.HQ;
  if (rows == 0) return;
  const int64_t blocks = (rows + kWarps - 1) / kWarps;
  const unsigned grid = static_cast<unsigned>(blocks < (1ll << 31) - 1 ? blocks : (1ll << 31) - 1);
  with_element_type(p.dtype, [&](auto zero) {
    using T = decltype(zero);
    forward_simple_kernel<T><<<grid, kWarps * 32, 0, stream>>>(p);
  });
  FLASHGATE_CHECK_LAUNCH("forward_simple_kernel");
}

}  // namespace flashgate::cuda
