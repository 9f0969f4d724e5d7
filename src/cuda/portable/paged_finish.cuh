// The end of a kv head in the serving kernel (paged_kernel.cuh): the WK warps' partial softmax states (same rows,
// different keys) merge through shared memory, and the CTA writes its rows: o itself (one split), or the split's
// normalised partial o and its log2 sum for paged_merge.cu.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "cuda/common/online_softmax.h"
#include "cuda/common/serving_params.h"

namespace flashgate::cuda {

namespace paged_detail {

// Per-row facts of the CTA's 16 rows, staged once per kv head in shared memory.
struct SharedRows {
  int64_t q_row[16];
  int head[16];   // query head, -1 for a padding row
  int pos[16];
  int lo[16];
  float q_unscale[16];  // 2^-s for a query row staged as q * 2^s (Tile::kScaleQ)
  int64_t gate_row[16];  // decode gate: offset of the row's terms in p.gate_bias (read in the gate branch only)
};

// 2^e as a float, exactly, for e in [-126, 127].
__device__ __forceinline__ float pow2(int e) { return __uint_as_float(static_cast<uint32_t>(e + 127) << 23); }

__device__ __forceinline__ void store_qo(void* base, int64_t i, ElementType t, float x) {
  if (t == ElementType::bf16) static_cast<__nv_bfloat16*>(base)[i] = __float2bfloat16_rn(x);
  else static_cast<__half*>(base)[i] = __float2half_rn(x);
}

// The merge and the write of one kv head, after every warp has left the stage loop. The ring's last consumed
// slots (before `read_slot`, the next to read) hold no loads in flight; per-token V: P * scale entered the mma
// divided by 2^(v_exp - 127). Ends before the CTA's closing barrier.
template <class Tile>
__device__ __forceinline__ void finish_head(const ServingParams& p, const SharedRows* rows,
                                            float* merge_facts, unsigned char* ring, int stages, int read_slot,
                                            const SoftmaxRow (&softmax)[2], const float (&acc)[Tile::kAccTiles][4],
                                            int v_exp, int split) {
  constexpr int VP = Tile::VP, VW = Tile::VW;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wk = warp / Tile::WV, wv = warp % Tile::WV;
  const int g = lane >> 2, c = lane & 3;
  // Warp w's part ([16][VP]) lies in the (w / kPartsPerSlot)-th most recently consumed slot (no load is in
  // flight to those, see load_end), or from the ring's start where parts do not fit a slot.
  const int last_slot = read_slot == 0 ? stages - 1 : read_slot - 1;
  auto part = [&](int w) -> float* {
    if constexpr (Tile::kMergeInSlots) {
      const int back = w / Tile::kPartsPerSlot;
      const int slot = last_slot - back < 0 ? last_slot - back + stages : last_slot - back;
      return reinterpret_cast<float*>(ring + slot * Tile::kStageBytes) + (w % Tile::kPartsPerSlot) * Tile::kRows * VP;
    } else {
      return reinterpret_cast<float*>(ring) + w * Tile::kRows * VP;
    }
  };
  float* red_max = merge_facts;                                // [WK][16]
  float* red_sum = red_max + Tile::WK * Tile::kRows;           // [WK][16]
  float* row_scale = red_sum + Tile::WK * Tile::kRows;         // [16]
  float* row_lse = row_scale + Tile::kRows;                    // [16]
  // A row's partial sums lie in its quad, or with keys as M in its column.
  float row_sum[2];
#pragma unroll
  for (int rs = 0; rs < 2; ++rs) {
    row_sum[rs] = Tile::kKeysAsM ? column_sum(softmax[rs].sum) : quad_sum(softmax[rs].sum);
  }
  if (wv == 0 && (Tile::kKeysAsM ? g : c) == 0) {
#pragma unroll
    for (int rs = 0; rs < 2; ++rs) {
      red_max[wk * Tile::kRows + Tile::lane_row(g, c, rs)] = softmax[rs].max2;
      red_sum[wk * Tile::kRows + Tile::lane_row(g, c, rs)] = row_sum[rs];
    }
  }
  __syncthreads();  // every warp is past the loop: the merge may take the slots it read last
  float* mine = part(wk);
#pragma unroll
  for (int rs = 0; rs < 2; ++rs) {
    const int r = Tile::lane_row(g, c, rs);
    float m = -INFINITY;
#pragma unroll
    for (int w = 0; w < Tile::WK; ++w) m = fmaxf(m, red_max[w * Tile::kRows + r]);
    // 0 for a warp that saw nothing; per-token V: times the unit P * scale was divided by.
    float factor = exp2f(softmax[rs].max2 - (m == -INFINITY ? 0.f : m));
    if (Tile::Traits::kTokenScales) factor *= pow2(v_exp - 127);
#pragma unroll
    for (int round = 0; round < Tile::kValueRounds; ++round)
#pragma unroll
      for (int t = 0; t < Tile::kRoundElems; ++t) {
        if constexpr (Tile::kKeysAsM) {  // value dim of lane g in n-tile t, row 2c + rs
          const int d = Tile::value_dim(round, g, t);
          mine[r * VP + Tile::reduce_col(r, d)] = acc[(round * Tile::kRoundElems + t) / 2][2 * (t & 1) + rs] * factor;
        } else {
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int d = wv * VW + Tile::value_dim(round, 2 * c + e, t);
            mine[r * VP + Tile::reduce_col(r, d)] = acc[round * Tile::kRoundElems + t][2 * rs + e] * factor;
          }
        }
      }
  }
  if (tid < Tile::kRows) {
    float m = -INFINITY, l = 0.f;
#pragma unroll
    for (int w = 0; w < Tile::WK; ++w) m = fmaxf(m, red_max[w * Tile::kRows + tid]);
    const float mu = m == -INFINITY ? 0.f : m;
#pragma unroll
    for (int w = 0; w < Tile::WK; ++w)
      l += red_sum[w * Tile::kRows + tid] * exp2f(red_max[w * Tile::kRows + tid] - mu);
    const bool v_per_tensor = !Tile::Traits::kTokenScales && p.v_scale_mode == CacheScale::per_tensor;
    float vmul = v_per_tensor ? p.v_scale[0] : 1.f;
    const int head = rows->head[tid];
    if (p.num_splits == 1) {
      const bool has_sink = p.sink != nullptr && head >= 0;
      const RowResult res = finish_row(m, l, has_sink, has_sink ? p.sink[head * p.sink_stride] : 0.f);
      row_scale[tid] = res.o_scale * vmul;
    } else {
      row_scale[tid] = l > 0.f ? vmul / l : 0.f;
      row_lse[tid] = l > 0.f ? m + log2f(l) : -INFINITY;
    }
  }
  __syncthreads();

  // Warp w writes rows w, w + 4, ...; lane l dims l, l + 32, ...: each store is a 32-dim run of one row
  // (coalesced), the merge-buffer reads of a run are conflict-free (reduce_col permutes dims within
  // aligned 32s), and the row's facts are read once (no division by V per element).
  auto merged = [&](int r, int d) {
    float x = 0.f;
#pragma unroll
    for (int w = 0; w < Tile::WK; ++w) x += part(w)[r * VP + Tile::reduce_col(r, d)];
    return x * row_scale[r];
  };
  for (int r = warp; r < Tile::kRows; r += Tile::kWarps) {
    const int head = rows->head[r];
    if (head < 0) continue;  // the same for the whole warp
    if (p.num_splits > 1) {
      const int64_t row = (static_cast<int64_t>(split) * p.total_q + rows->q_row[r]) * p.HQ + head;
      float* out = p.o_partial + row * p.V;
      if (lane == 0) p.lse_partial[row] = row_lse[r];
#pragma unroll
      for (int d = lane; d < VP; d += 32)
        if (d < p.V) out[d] = merged(r, d);
    } else {
      const int64_t out = rows->q_row[r] * p.o_row_stride + head * p.o_head_stride;
#pragma unroll
      for (int d = lane; d < VP; d += 32)
        if (d < p.V) store_qo(p.o, out + d, p.qo_dtype, merged(r, d));
    }
  }
}

}  // namespace paged_detail

}  // namespace flashgate::cuda
