// The SIMT backward: fp32 inputs, and any input on a GPU whose shared memory cannot hold an MMA bucket's
// tiles. Correct rather than fast: a warp per query row recomputes its visible scores one key at a time
// (dq and E), a warp per key row does the same over the rows that see it, for every query head of its
// group (dk, dv and the gate's column sums). Lanes own head-dim columns lane, lane+32, ...; every sum runs
// in a fixed order, so the path is deterministic. A slice pair's backward (context parallelism) runs here where the
// MMA path cannot take it (host/slice_backward.cpp): its rows shifted against its keys, lse and D given, the gates'
// gradients per position of each slice.
#include <cmath>

#include "cuda/common/backward_passes.h"
#include "cuda/common/cuda_check.h"
#include "cuda/common/element.h"
#include "cuda/common/visibility.h"
#include "cuda/portable/backward_kernels.h"
#include "cuda/common/backward_util.cuh"

namespace flashgate::cuda::bwd {
namespace {

constexpr int kThreads = 128, kWarps = kThreads / 32;
constexpr int kCols = 512 / 32;  // columns per lane at the largest head dim

// Loads this lane's columns of a row (zeros past `dim`).
template <class T>
__device__ __forceinline__ void load_row(float (&x)[kCols], const T* row, int dim) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int m = 0; m < kCols; ++m) {
    const int c = lane + 32 * m;
    x[m] = c < dim ? to_float(row[c]) : 0.f;
  }
}

template <class T>
__device__ __forceinline__ void store_row(T* row, const float (&x)[kCols], float scale, int dim) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int m = 0; m < kCols; ++m) {
    const int c = lane + 32 * m;
    if (c < dim) row[c] = from_float<T>(scale * x[m]);
  }
}

// <x, row> over the warp (this lane's columns of x against the row read from memory).
template <class T>
__device__ __forceinline__ float dot_row(const float (&x)[kCols], const T* row, float (&row_out)[kCols], int dim) {
  load_row(row_out, row, dim);
  float s = 0.f;
#pragma unroll
  for (int m = 0; m < kCols; ++m) s += x[m] * row_out[m];
  return warp_sum(s);
}

// One warp per (b, query head, t) row, in row_index order.
template <class T>
__global__ void __launch_bounds__(kThreads) simt_dq_kernel(BackwardParams p, int64_t rows) {
  const AttentionParams& a = p.a;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kWarps;
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32; r < rows; r += stride) {
    const int64_t t = r % a.T, bh = r / a.T, h = bh % a.HQ, b = bh / a.HQ, hk = h / a.group;
    const TokenPlace place = place_token(a, b, t);
    float q[kCols], dout[kCols], dq[kCols] = {}, kr[kCols], vr[kCols];
    float e_sum = 0.f, mass = 0.f;
    const float lse = p.lse[r];
    if (place.pos >= 0 && lse != -INFINITY) {
      load_row(q, a.q.row<const T>(b, t, h), a.K);
      load_row(dout, p.dout.row<const T>(b, t, h), a.V);
      const float d_row = p.D[r];
      const float* gc = a.has_gate ? a.gc_row(b, h) : nullptr;
      const float gc_i = gc ? gc[t] : 0.f;
      const KeySpan keys = keys_seen_by_rows(place.pos, place.pos + 1, place.seq.len, a.window);
      for (int j = keys.begin; j < keys.end; ++j) {
        const int64_t tj = place.seq.start + j;
        const float s = dot_row(q, a.k.row<const T>(b, tj, hk), kr, a.K) * a.scale + (gc ? gc_i - gc[tj] : 0.f);
        const float pij = expf(s - lse);
        const float dp = dot_row(dout, a.v.row<const T>(b, tj, hk), vr, a.V);
        const float ds = pij * (dp - d_row);
        e_sum += pij * dp;
        mass += pij;
#pragma unroll
        for (int m = 0; m < kCols; ++m) dq[m] += ds * kr[m];
      }
    }
    store_row(p.dq.row<T>(b, t, h), dq, a.scale, a.K);
    if (p.need_E && threadIdx.x % 32 == 0) p.E[r] = e_sum;
    if (a.has_gate && threadIdx.x % 32 == 0) p.mass[r] = mass;
  }
}

// One warp per (b, kv head, t) key row: dk, dv summed over the group's query heads, and per query head
// the column sum of dS (gate).
template <class T>
__global__ void __launch_bounds__(kThreads) simt_dkdv_kernel(BackwardParams p, int64_t keys) {
  const AttentionParams& a = p.a;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kWarps;
  for (int64_t w = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32; w < keys; w += stride) {
    const int64_t t = w % a.T, bh = w / a.T, hk = bh % a.H, b = bh / a.H;
    const TokenPlace place = place_token(a, b, t);
    float kr[kCols], vr[kCols], dk[kCols] = {}, dv[kCols] = {}, qr[kCols], dor[kCols];
    if (place.pos >= 0) {
      load_row(kr, a.k.row<const T>(b, t, hk), a.K);
      load_row(vr, a.v.row<const T>(b, t, hk), a.V);
      const KeySpan rows = rows_seeing_keys(place.pos, place.pos + 1, place.seq.len, a.window);
      for (int64_t h = hk * a.group; h < (hk + 1) * a.group; ++h) {
        const float* gc = a.has_gate ? a.gc_row(b, h) : nullptr;
        const float gc_j = gc ? gc[t] : 0.f;
        const int64_t base = p.row_index(b, h, place.seq.start);
        float col = 0.f;
        for (int i = rows.begin; i < rows.end; ++i) {
          const int64_t ti = place.seq.start + i;
          const float s = dot_row(kr, a.q.row<const T>(b, ti, h), qr, a.K) * a.scale + (gc ? gc[ti] - gc_j : 0.f);
          const float pij = expf(s - p.lse[base + i]);
          const float dp = dot_row(vr, p.dout.row<const T>(b, ti, h), dor, a.V);
          const float ds = pij * (dp - p.D[base + i]);
          col += ds;
#pragma unroll
          for (int m = 0; m < kCols; ++m) {
            dk[m] += ds * qr[m];
            dv[m] += pij * dor[m];
          }
        }
        if (a.has_gate && threadIdx.x % 32 == 0) p.colsum[p.row_index(b, h, t)] = col;
      }
    }
    store_row(p.dk.row<T>(b, t, hk), dk, a.scale, a.K);
    store_row(p.dv.row<T>(b, t, hk), dv, 1.f, a.V);
  }
}

// ---- slice pairs ----------------------------------------------------------------------------------------------

__device__ __forceinline__ float at(const TokenHeadTensor& t, int64_t b, int64_t i, int64_t h) {
  return *t.row<const float>(b, i, h);
}

// P[i, j] from the scaled dot product, the two cumulative gates (0 without a gate) and the row's lse. Far from the
// sequence's start the gates and lse run to hundreds, whose fp32 sum would leave P a relative error of about 1e-5:
// the row term sum_j dS (E - D mass, a cancellation) lost it (fp16 rows 500 positions after their keys: 0.03
// relative RMS against the reference). The argument is summed in fp64 and is small once summed.
__device__ __forceinline__ float slice_weight(float dot, float g_i, float g_j, float lse) {
  return expf(static_cast<float>(static_cast<double>(dot) + (static_cast<double>(g_i) - g_j) - lse));
}

// One warp per (b, query head, i) row of the query slice: dq, the row's gate gradient sum_j dS and its sink part.
template <class T>
__global__ void __launch_bounds__(kThreads) slice_dq_kernel(SliceBackwardParams p, int64_t rows) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kWarps;
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32; r < rows; r += stride) {
    const int64_t i = r % p.Tq, bh = r / p.Tq, h = bh % p.HQ, b = bh / p.HQ, hk = h / p.group;
    float q[kCols], dout[kCols], dq[kCols] = {}, kr[kCols], vr[kCols];
    float row_sum = 0.f;
    const float lse = at(p.lse, b, i, h), d_row = at(p.D, b, i, h);
    if (lse != -INFINITY) {
      load_row(q, p.q.row<const T>(b, i, h), p.K);
      load_row(dout, p.dout.row<const T>(b, i, h), p.V);
      const float g_i = p.has_gate ? at(p.gate_q, b, i, h) : 0.f;
      const KeySpan keys = keys_seen_by_rows(static_cast<int>(i), static_cast<int>(i) + 1, static_cast<int>(p.Tq),
                                             p.window, p.shift, static_cast<int>(p.Tk));
      for (int j = keys.begin; j < keys.end; ++j) {
        const float pij = slice_weight(dot_row(q, p.k.row<const T>(b, j, hk), kr, p.K) * p.scale, g_i,
                                       p.has_gate ? at(p.gate_k, b, j, h) : 0.f, lse);
        const float ds = pij * (dot_row(dout, p.v.row<const T>(b, j, hk), vr, p.V) - d_row);
        row_sum += ds;
#pragma unroll
        for (int m = 0; m < kCols; ++m) dq[m] += ds * kr[m];
      }
    }
    store_row(p.dq.row<T>(b, i, h), dq, p.scale, p.K);
    if (threadIdx.x % 32 == 0) {
      if (p.has_gate) *p.dgate_q.row<float>(b, i, h) = row_sum;  // G_q[i] enters s[i, j] with +1
      if (p.has_sink) p.dsink_rows[r] = slice_sink_part(p.sink[h], lse, d_row);
    }
  }
}

// One warp per (b, kv head, j) key of the key slice: dk, dv over the group's query heads, and per query head the
// key's gate gradient -sum_i dS.
template <class T>
__global__ void __launch_bounds__(kThreads) slice_dkdv_kernel(SliceBackwardParams p, int64_t keys) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kWarps;
  for (int64_t w = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32; w < keys; w += stride) {
    const int64_t j = w % p.Tk, bh = w / p.Tk, hk = bh % p.H, b = bh / p.H;
    float kr[kCols], vr[kCols], dk[kCols] = {}, dv[kCols] = {}, qr[kCols], dor[kCols];
    load_row(kr, p.k.row<const T>(b, j, hk), p.K);
    load_row(vr, p.v.row<const T>(b, j, hk), p.V);
    // Rows i with 0 <= i + shift - j < window: from j - shift, up to the window or the slice's end.
    const int64_t first = j - p.shift;
    const int64_t end = p.window < 0 ? p.Tq : (first + p.window < p.Tq ? first + p.window : p.Tq);
    for (int64_t h = hk * p.group; h < (hk + 1) * p.group; ++h) {
      const float g_j = p.has_gate ? at(p.gate_k, b, j, h) : 0.f;
      float col = 0.f;
      for (int64_t i = first < 0 ? 0 : first; i < end; ++i) {
        const float lse = at(p.lse, b, i, h);
        if (lse == -INFINITY) continue;
        const float pij = slice_weight(dot_row(kr, p.q.row<const T>(b, i, h), qr, p.K) * p.scale,
                                       p.has_gate ? at(p.gate_q, b, i, h) : 0.f, g_j, lse);
        const float ds = pij * (dot_row(vr, p.dout.row<const T>(b, i, h), dor, p.V) - at(p.D, b, i, h));
        col += ds;
#pragma unroll
        for (int m = 0; m < kCols; ++m) {
          dk[m] += ds * qr[m];
          dv[m] += pij * dor[m];
        }
      }
      if (p.has_gate && threadIdx.x % 32 == 0) *p.dgate_k.row<float>(b, j, h) = -col;  // G_k[j] enters with -1
    }
    store_row(p.dk.row<T>(b, j, hk), dk, p.scale, p.K);
    store_row(p.dv.row<T>(b, j, hk), dv, 1.f, p.V);
  }
}

}  // namespace

void launch_simt_slice_backward(const SliceBackwardParams& p, cudaStream_t stream) {
  const int64_t rows = p.B * p.HQ * p.Tq, keys = p.B * p.H * p.Tk;
  with_element_type(p.dtype, [&](auto tag) {
    using T = decltype(tag);
    if (rows > 0) {
      slice_dq_kernel<T><<<grid_for(rows, kWarps), kThreads, 0, stream>>>(p, rows);
      FLASHGATE_CHECK_LAUNCH("slice_dq_kernel");
    }
    if (keys > 0) {
      slice_dkdv_kernel<T><<<grid_for(keys, kWarps), kThreads, 0, stream>>>(p, keys);
      FLASHGATE_CHECK_LAUNCH("slice_dkdv_kernel");
    }
  });
  launch_slice_dsink(p, stream);
}

void launch_simt_backward(const BackwardParams& p, cudaStream_t stream) {
  const int64_t rows = p.a.B * p.a.HQ * p.a.T, keys = p.a.B * p.a.H * p.a.T;
  if (rows == 0) return;
  with_element_type(p.a.dtype, [&](auto tag) {
    using T = decltype(tag);
    simt_dq_kernel<T><<<grid_for(rows, kWarps), kThreads, 0, stream>>>(p, rows);
    FLASHGATE_CHECK_LAUNCH("simt_dq_kernel");
    simt_dkdv_kernel<T><<<grid_for(keys, kWarps), kThreads, 0, stream>>>(p, keys);
    FLASHGATE_CHECK_LAUNCH("simt_dkdv_kernel");
  });
}

}  // namespace flashgate::cuda::bwd
