// The backward's post-kernels: dq from its fp32 accumulator, dk/dv from head-part partials, the gate
// gradient by per-sequence suffix sum, and the sink gradient. All sums run in a fixed order.
#include <cmath>
#include <cstdint>

#include "cuda/common/backward_passes.h"
#include "cuda/common/backward_util.cuh"
#include "cuda/common/cuda_check.h"
#include "cuda/common/element.h"

namespace flashgate::cuda::bwd {
namespace {

constexpr int kThreads = 256, kWarps = kThreads / 32;

// dq[b, t, h, :] = scale * dq_acc of token t (dq_acc_offset's layout), one row per group of kLanes threads
// (for_each_row_group). `vec`: dq rows are 16-byte aligned and K is a whole number of 16-byte chunks of T, so
// a lane converts a 16-byte chunk at a time (a column pair is two adjacent floats of dq_acc). A token in no
// sequence (only with a broken, unchecked cu_seqlens) gets 0.
template <class T, int kLanes>
__global__ void __launch_bounds__(kThreads) dq_convert_kernel(BackwardParams p, bool vec) {
  constexpr int kChunk = 16 / static_cast<int>(sizeof(T));
  const int K = p.a.K;
  for_each_row_group<kLanes, kThreads>(p.a.B, p.a.HQ, p.a.T, [&](int64_t b, int64_t h, int64_t t, int lane) {
    if (t >= p.a.T) return;
    const TokenPlace place = place_token(p.a, b, t);
    T* dst = p.dq.row<T>(b, t, h);
    if (place.pos < 0) {
      for (int d = lane; d < K; d += kLanes) dst[d] = from_float<T>(0.f);
      return;
    }
    const int64_t row0 = dq_row(p.a, place.seq.batch, h, place.n, place.seq.start);
    const int i = place.pos;
    const float scale = p.a.scale;
    const float* src = p.dq_acc;
    if (!vec) {
      for (int d = lane; d < K; d += kLanes) dst[d] = from_float<T>(scale * src[dq_acc_offset(row0, i, d, p.K16)]);
      return;
    }
    for (int c = lane * kChunk; c < K; c += kLanes * kChunk) {
      alignas(16) T out[kChunk];
#pragma unroll
      for (int e = 0; e < kChunk; e += 2) {
        const float2 v = *reinterpret_cast<const float2*>(src + dq_acc_offset(row0, i, c + e, p.K16));
        out[e] = from_float<T>(scale * v.x);
        out[e + 1] = from_float<T>(scale * v.y);
      }
      *reinterpret_cast<uint4*>(dst + c) = *reinterpret_cast<const uint4*>(out);
    }
  });
}

// One warp per (b, kv head, key t) row (key_rows of them per sequence): out[b, t, hk, :] = the sum over parts of part[(part, b, hk, t), :],
// parts in order.
template <class T>
__global__ void __launch_bounds__(kThreads) dkv_reduce_kernel(BackwardParams p, const float* part, int dim,
                                                              int part_dim, TokenHeadTensor out, int64_t rows) {
  const int lane = threadIdx.x % 32;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kWarps;
  const int64_t part_stride = rows * part_dim;
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32; r < rows; r += stride) {
    const int64_t keys = p.key_rows(), t = r % keys, bh = r / keys, hk = bh % p.a.H, b = bh / p.a.H;
    T* dst = out.row<T>(b, t, hk);
    for (int d = lane; d < dim; d += 32) {
      const float* src = part + r * part_dim + d;
      float acc = 0.f;
      for (int q = 0; q < p.head_parts; ++q) acc += src[q * part_stride];
      dst[d] = from_float<T>(acc);
    }
  }
}

// One block per (sequence, query head): dg[t] = sum_{u >= t} dGc[u], scanning the sequence from its end
// in chunks of kThreads tokens (a warp-shuffle scan, warp totals, a carry between chunks).
__global__ void __launch_bounds__(kThreads) gate_grad_kernel(BackwardParams p, int64_t jobs) {
  __shared__ float warp_totals[kThreads / 32];
  __shared__ float carry;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int64_t job = blockIdx.x; job < jobs; job += gridDim.x) {
    const int64_t n = job / p.a.HQ, h = job % p.a.HQ;
    const SequenceSpan seq = sequence_span(p.a, n);
    const int64_t base = p.row_index(seq.batch, h, seq.start);
    // Where every visible pair is (t, t) (a window of 1, a sequence of one token) the gate's term G_t - G_t
    // vanishes from every score: dg is 0 exactly, where the two sides below would leave their fp32 rounding.
    const bool diagonal = p.a.window == 1 || seq.len == 1;
    if (threadIdx.x == 0) carry = 0.f;
    __syncthreads();
    for (int chunk = 0; chunk < seq.len; chunk += kThreads) {
      const int u = seq.len - 1 - (chunk + static_cast<int>(threadIdx.x));  // reversed position
      float x = 0.f;
      if (u >= 0 && !diagonal) {
        // Row side sum_j dS[u,j] = E_u - D_u sum_j P[u,j] from the kernels' own sums: with the same D and P
        // as the column sums on the other side, a row far below t cancels out of the suffix sum exactly
        // (up to fp32 order), instead of leaving its o-rounding error E - D or an lse mismatch behind.
        x = (p.E[base + u] - p.D[base + u] * p.mass[base + u]) - p.colsum[base + u];
      }
      float inclusive = x;
#pragma unroll
      for (int d = 1; d < 32; d *= 2) {
        const float y = __shfl_up_sync(0xffffffffu, inclusive, d);
        if (lane >= d) inclusive += y;
      }
      if (lane == 31) warp_totals[warp] = inclusive;
      __syncthreads();
      float before = carry, total = carry;
      for (int w = 0; w < kThreads / 32; ++w) {
        before += w < warp ? warp_totals[w] : 0.f;
        total += warp_totals[w];
      }
      if (u >= 0) *p.dg.row<float>(seq.batch, seq.start + u, h) = before + inclusive;
      __syncthreads();  // all have read carry and warp_totals
      if (threadIdx.x == 0) carry = total;
      __syncthreads();
    }
  }
}

// One block per query head: dsink[h] = -sum over all rows of exp(sink[h] - lse_i) E_i, from the row sums E or, where
// the Hopper kernel summed it per key tile (p.sink_parts), from its parts (in their order: deterministic).
__global__ void __launch_bounds__(kThreads) sink_grad_kernel(BackwardParams p) {
  __shared__ float scratch[kThreads / 32];
  for (int64_t h = blockIdx.x; h < p.a.HQ; h += gridDim.x) {
    float acc = 0.f;
    if (p.sink_parts) {
      const int64_t hk = h / p.a.group, parts = p.sink_part_tiles * 8;
      for (int64_t u = threadIdx.x; u < parts; u += kThreads)
        acc += p.sink_parts[sink_part_index(p, hk, u / 8, h, static_cast<int>(u % 8))];
    } else {
      const float sink = p.a.sink[h];
      for (int64_t b = 0; b < p.a.B; ++b) {
        const int64_t base = p.row_index(b, h, 0);
        for (int64_t t = threadIdx.x; t < p.a.T; t += kThreads) {
          const float e = p.E[base + t];
          if (e != 0.f) acc += expf(sink - p.lse[base + t]) * e;  // empty rows hold E = 0
        }
      }
    }
    const float total = block_sum<kThreads>(acc, scratch);
    if (threadIdx.x == 0) p.dsink[h] = -total;
  }
}

// A slice pair: rows x < rows are the query rows (row_index order), the rest the keys (key_index order).
__global__ void __launch_bounds__(kThreads) slice_grads_kernel(BackwardParams p, SliceBackwardParams s, int64_t rows,
                                                               int64_t keys) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
  for (int64_t x = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; x < rows + keys; x += stride) {
    if (x < rows) {
      const int64_t i = x % p.a.T, bh = x / p.a.T, h = bh % p.a.HQ, b = bh / p.a.HQ;
      if (p.a.has_gate) *s.dgate_q.row<float>(b, i, h) = p.E[x] - p.D[x] * p.mass[x];
      if (p.a.has_sink) s.dsink_rows[x] = slice_sink_part(p.a.sink[h], p.lse[x], p.D[x]);
    } else {
      const int64_t y = x - rows, j = y % p.key_rows(), bh = y / p.key_rows(), h = bh % p.a.HQ, b = bh / p.a.HQ;
      *s.dgate_k.row<float>(b, j, h) = -p.colsum[y];
    }
  }
}

// dsink[h]: its rows' parts over every batch entry, one block per head, in a fixed order.
__global__ void __launch_bounds__(kThreads) slice_dsink_kernel(SliceBackwardParams p) {
  __shared__ float scratch[kWarps];
  const int64_t h = blockIdx.x;
  float x = 0.f;
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t i = threadIdx.x; i < p.Tq; i += kThreads) x += p.dsink_rows[(b * p.HQ + h) * p.Tq + i];
  const float total = block_sum<kThreads>(x, scratch);
  if (threadIdx.x == 0) p.dsink[h] = total;
}

}  // namespace

void launch_slice_grads(const BackwardParams& p, const SliceBackwardParams& s, cudaStream_t stream) {
  const int64_t rows = p.a.B * p.a.HQ * p.a.T, keys = p.a.has_gate ? p.a.B * p.a.HQ * p.key_rows() : 0;
  if (rows + keys == 0 || !(p.a.has_gate || p.a.has_sink)) return;
  slice_grads_kernel<<<grid_for(rows + keys, kThreads), kThreads, 0, stream>>>(p, s, rows, keys);
  FLASHGATE_CHECK_LAUNCH("slice_grads_kernel");
}

void launch_slice_dsink(const SliceBackwardParams& s, cudaStream_t stream) {
  if (!s.has_sink || s.HQ == 0) return;
  slice_dsink_kernel<<<static_cast<unsigned>(s.HQ), kThreads, 0, stream>>>(s);
  FLASHGATE_CHECK_LAUNCH("slice_dsink_kernel");
}

void launch_dq_convert(const BackwardParams& p, cudaStream_t stream) {
  if (p.a.B * p.a.HQ * p.a.T == 0) return;
  with_element_type(p.a.dtype, [&](auto tag) {
    using T = decltype(tag);
    constexpr int kChunk = 16 / static_cast<int>(sizeof(T));
    const bool vec = p.dq_width >= 16 && p.a.K % kChunk == 0;
    with_lanes_per_row(p.a.K, kChunk, [&](auto lanes) {
      constexpr int kLanes = decltype(lanes)::value;
      const dim3 grid = row_group_grid(p.a.B * p.a.HQ, p.a.T, kThreads / kLanes);
      dq_convert_kernel<T, kLanes><<<grid, kThreads, 0, stream>>>(p, vec);
    });
  });
  FLASHGATE_CHECK_LAUNCH("dq_convert_kernel");
}

void launch_dkv_reduce(const BackwardParams& p, cudaStream_t stream) {
  const int64_t rows = p.a.B * p.a.H * p.key_rows();
  if (rows == 0) return;
  with_element_type(p.a.dtype, [&](auto tag) {
    using T = decltype(tag);
    dkv_reduce_kernel<T><<<grid_for(rows, kWarps), kThreads, 0, stream>>>(p, p.dk_part, p.a.K, p.K16, p.dk, rows);
    FLASHGATE_CHECK_LAUNCH("dkv_reduce_kernel (dk)");
    dkv_reduce_kernel<T><<<grid_for(rows, kWarps), kThreads, 0, stream>>>(p, p.dv_part, p.a.V, p.V16, p.dv, rows);
    FLASHGATE_CHECK_LAUNCH("dkv_reduce_kernel (dv)");
  });
}

void launch_gate_grad(const BackwardParams& p, cudaStream_t stream) {
  const int64_t jobs = p.a.num_seqs * p.a.HQ;
  if (jobs == 0 || p.a.T == 0) return;
  gate_grad_kernel<<<grid_for(jobs, 1), kThreads, 0, stream>>>(p, jobs);
  FLASHGATE_CHECK_LAUNCH("gate_grad_kernel");
}

void launch_sink_grad(const BackwardParams& p, cudaStream_t stream) {
  if (p.a.HQ == 0) return;
  sink_grad_kernel<<<grid_for(p.a.HQ, 1), kThreads, 0, stream>>>(p);
  FLASHGATE_CHECK_LAUNCH("sink_grad_kernel");
}

}  // namespace flashgate::cuda::bwd
