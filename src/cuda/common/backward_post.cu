// The backward's post-kernels: dq from its fp32 accumulator, dk/dv from head-part partials, the gate
// gradient by per-sequence suffix sum, and the sink gradient. All sums run in a fixed order.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "cuda/common/backward_passes.h"
#include "cuda/common/backward_util.cuh"
#include "cuda/common/block_scan.cuh"
#include "cuda/common/cuda_check.h"
#include "cuda/common/element.h"

namespace flashgate::cuda::bwd {
namespace {

constexpr int kThreads = 256, kWarps = kThreads / 32;

// One 16-row group of dq_acc (dq_acc_offset's layout) and where its rows go.
struct DqGroup {
  int64_t batch = 0, h = 0, t0 = 0;  // batch index, query head and token of the group's first row
  int rows = 0;                      // rows inside its sequence (0: a group no sequence uses)
};

// The groups in their order in dq_acc (item = (b * HQ + h) * groups + g). Packed, sequence n's rows start at
// dq_packed_row; the walk keeps the sequence of the last group it placed and the row where the next one starts,
// so a block that converts consecutive groups looks its first one up and then steps, reading cu_seqlens only when
// it passes into the next sequence.
struct DqGroupWalk {
  const AttentionParams& a;
  int64_t groups;
  int64_t n = -1;              // packed: the last sequence whose rows start at or before the last group placed
  int64_t row = 0, next = 0;   // first_row(n) and first_row(n + 1) (past every row when n is the last)
  SequenceSpan seq;            // sequence n

  __device__ int64_t first_row(int64_t s) const {
    return s < a.num_seqs ? dq_packed_row(s, sequence_span(a, s).start) : INT64_MAX;
  }
  __device__ void take(int64_t s) { n = s, row = first_row(s), next = first_row(s + 1), seq = sequence_span(a, s); }

  __device__ DqGroup at(int64_t item) {
    DqGroup r;
    const int64_t bh = item / groups, g = item - bh * groups, b = bh / a.HQ;
    r.h = bh - b * a.HQ;
    if (!a.packed) {
      r.batch = b, r.t0 = 16 * g, r.rows = static_cast<int>(min(int64_t{16}, a.T - 16 * g));
      return r;
    }
    if (n < 0 || row > 16 * g) {  // the block's first group, or a new head: the last n with first_row(n) <= 16 g
      int64_t lo = 0, hi = a.num_seqs - 1;
      while (lo < hi) {
        const int64_t mid = (lo + hi + 1) / 2;
        if (first_row(mid) <= 16 * g) lo = mid;
        else hi = mid - 1;
      }
      take(lo);
    }
    while (next <= 16 * g) take(n + 1);
    const int64_t i = 16 * g - row;
    r.t0 = seq.start + i;
    r.rows = i < seq.len ? static_cast<int>(min(int64_t{16}, seq.len - i)) : 0;
    return r;
  }
};

// Two converted values at an even element of a shared tile, in one store.
template <class T>
__device__ __forceinline__ void put_pair(T* at, float x, float y) {
  struct alignas(2 * sizeof(T)) Pair {
    T x, y;
  };
  *reinterpret_cast<Pair*>(at) = Pair{from_float<T>(x), from_float<T>(y)};
}

// dq[b, t, h, :] = scale * dq_acc, a block converting a run of consecutive 16-row groups: the threads read a group
// as it lies (16-byte pieces, each two columns of rows r and r + 8), write the converted pairs into a shared tile
// of whole rows and store those rows (16-byte pieces where `vec`: dq rows 16-byte aligned, K a whole number of
// them), the next group's reads in flight meanwhile. Rows past their sequence's end are padding, not stored.
// kLoads: float4 per thread and group, for K16 up to kLoads * kThreads / 4 (at 2, four blocks a multiprocessor).
template <class T, int kLoads>
__global__ void __launch_bounds__(kThreads, kLoads == 2 ? 4 : 1) dq_convert_kernel(BackwardParams p, bool vec) {
  constexpr int kChunk = 16 / static_cast<int>(sizeof(T)), kMaxK = kLoads * kThreads / 4;
  constexpr int kPitch = kMaxK + kChunk;  // the pad spreads a warp's pairs over the banks
  __shared__ alignas(16) T tile[16 * kPitch];
  const AttentionParams& a = p.a;
  const int K = a.K, pieces = 4 * p.K16;  // float4 of a group
  const float scale = a.scale;
  const int64_t groups = dq_acc_rows_per_head(a) / 16, items = a.B * a.HQ * groups;
  const int64_t per_block = (items + gridDim.x - 1) / gridDim.x, begin = blockIdx.x * per_block;
  const int64_t end = min(items, begin + per_block);
  DqGroupWalk walk{a, groups};
  float4 x[kLoads];
  const auto fetch = [&](const DqGroup& group, int64_t item) {
    const float4* src = reinterpret_cast<const float4*>(p.dq_acc) + item * pieces;
#pragma unroll
    for (int j = 0; j < kLoads; ++j) {
      const int f = static_cast<int>(threadIdx.x) + j * kThreads;
      if (group.rows > 0 && f < pieces) x[j] = src[f];
    }
  };
  DqGroup group;
  if (begin < end) fetch(group = walk.at(begin), begin);
  for (int64_t item = begin; item < end; ++item) {
    // float4 f: columns 8 (f / 32) + 2 c of rows q and q + 8, q = (f % 32) / 4, c = f % 4.
#pragma unroll
    for (int j = 0; j < kLoads; ++j) {
      const int f = static_cast<int>(threadIdx.x) + j * kThreads;
      if (group.rows == 0 || f >= pieces) continue;
      const int q = (f % 32) / 4, col = 8 * (f / 32) + 2 * (f % 4);
      put_pair(&tile[q * kPitch + col], scale * x[j].x, scale * x[j].y);
      put_pair(&tile[(q + 8) * kPitch + col], scale * x[j].z, scale * x[j].w);
    }
    __syncthreads();
    const DqGroup next = item + 1 < end ? walk.at(item + 1) : DqGroup{};
    if (item + 1 < end) fetch(next, item + 1);
    if (vec) {
      const int chunks = K / kChunk;
      for (int u = threadIdx.x; u < group.rows * chunks; u += kThreads) {
        const int r = u / chunks, c = (u - r * chunks) * kChunk;
        *reinterpret_cast<uint4*>(p.dq.row<T>(group.batch, group.t0 + r, group.h) + c) =
            *reinterpret_cast<const uint4*>(&tile[r * kPitch + c]);
      }
    } else {
      for (int u = threadIdx.x; u < group.rows * K; u += kThreads) {
        const int r = u / K, d = u - r * K;
        p.dq.row<T>(group.batch, group.t0 + r, group.h)[d] = tile[r * kPitch + d];
      }
    }
    __syncthreads();  // the tile is rewritten next turn
    group = next;
  }
  // Tokens in no sequence (only with a broken, unchecked cu_seqlens: before the first offset or after the last
  // sequence's end) get 0.
  if (a.packed) {
    const SequenceSpan last_seq = sequence_span(a, a.num_seqs - 1);
    const int64_t first = sequence_span(a, 0).start, last = last_seq.start + last_seq.len;
    const int64_t outside = (first + a.T - last) * a.HQ * K;
    for (int64_t e = int64_t{blockIdx.x} * kThreads + threadIdx.x; e < outside; e += int64_t{gridDim.x} * kThreads) {
      const int64_t x = e / K, d = e - x * K, h = x % a.HQ, j = x / a.HQ, t = j < first ? j : last + (j - first);
      p.dq.row<T>(0, t, h)[d] = from_float<T>(0.f);
    }
  }
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
      const ChunkScan<float> scan = scan_chunk<kThreads>(x, warp_totals, carry);
      if (u >= 0) *p.dg.row<float>(seq.batch, seq.start + u, h) = scan.before + scan.inclusive;
      __syncthreads();  // all have read carry and warp_totals
      if (threadIdx.x == 0) carry = scan.total;
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

void launch_dq_convert(const BackwardParams& p, int sms, cudaStream_t stream) {
  if (p.a.B * p.a.HQ * p.a.T == 0) return;
  with_element_type(p.a.dtype, [&](auto tag) {
    using T = decltype(tag);
    constexpr int kChunk = 16 / static_cast<int>(sizeof(T));
    const bool vec = p.dq_width >= 16 && p.a.K % kChunk == 0;
    const int64_t items = p.a.B * p.a.HQ * dq_acc_rows_per_head(p.a) / 16;
    const auto launch = [&](auto kernel) {
      int resident = 0;
      FLASHGATE_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&resident, kernel, kThreads, 0));
      const int64_t blocks = std::min<int64_t>(items, int64_t{std::max(resident, 1)} * sms);  // one wave
      kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(p, vec);
    };
    if (p.K16 <= 128) launch(dq_convert_kernel<T, 2>);
    else if (p.K16 <= 256) launch(dq_convert_kernel<T, 4>);
    else launch(dq_convert_kernel<T, 8>);
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
