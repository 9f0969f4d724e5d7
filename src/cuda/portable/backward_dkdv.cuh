// The key-major backward kernel (dK, dV; in default mode also dQ and E through atomics). One CTA of 8 warps
// per (key tile of kBc keys, kv head, head part, column slice); see backward.h for the design.
//
// Warp layouts (8 warps):
//   scores  S, dP, P, dS  [kBr x kBc]:       SM = kBr/16 warp rows x SN = 8/SM warp columns
//   dK, dV  [kBc x kSliceKV] accumulators:   WN = kBc/16 warp rows x WD = 8/WN warp columns
//   dQ      [kBr x kSliceKV] (transient):     QM = kBr/16 warp rows x QD = 8/QM warp columns, 64-column chunks
#pragma once

#include "cuda/common/cuda_check.h"
#include "cuda/common/sequence.h"
#include "cuda/common/tile_io.h"
#include "cuda/common/tile_scheduler.h"
#include "cuda/portable/backward_kernels.h"
#include "cuda/portable/backward_mma.cuh"

namespace flashgate::cuda::bwd {

template <class T, int kD>
__global__ void __launch_bounds__(kMmaThreads, 1)
    dkdv_kernel(BackwardParams p, TileSchedule key_tiles, int slices, int stages, bool with_dq) {
  using C = TileConfig<kD>;
  constexpr int kBc = C::kBc, kBr = C::kBr, kSlice = C::kSliceKV;
  constexpr int LD = kD + 8, LDP = kBc + 8;
  constexpr int SM = kBr / 16, SN = 8 / SM, NT = kBc / SN / 8;
  constexpr int WN = kBc / 16, WD = 8 / WN, NTD = kSlice / WD / 8;
  constexpr int QM = kBr / 16, QD = 8 / QM, QW = kSlice / QD, QCH = QW < 64 ? QW : 64;
  static_assert(SM * SN == 8 && WN * WD == 8 && QM * QD == 8 && NTD % 2 == 0 && QW % QCH == 0, "8 warps");

  // Shared memory: K, V | stages x (Q, dO) | P, dS | column-sum partials [SM][kBc] (see dkdv_smem_bytes).
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* sK = reinterpret_cast<T*>(smem_raw);
  T* sV = sK + kBc * LD;
  T* sQdO = sV + kBc * LD;  // stage s: Q at sQdO + s * 2*kBr*LD, dO right after it
  T* sP = sQdO + stages * 2 * kBr * LD;
  T* sdS = sP + kBr * LDP;
  float* sRed = reinterpret_cast<float*>(sdS + kBr * LDP);

  const AttentionParams& a = p.a;
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, g = lane / 4, c = lane % 4;

  // blockIdx.x = ((tile * H + hk) * head_parts + part) * slices + slice
  int64_t x = blockIdx.x;
  const int slice = static_cast<int>(x % slices);
  x /= slices;
  const int part = static_cast<int>(x % p.head_parts);
  x /= p.head_parts;
  const int64_t hk = x % a.H, tile = x / a.H;
  const TileMapEntry te = key_tile_heaviest_first(key_tiles, tile);
  if (te.seq < 0) return;
  const SequenceSpan seq = sequence_span(a, te.seq);
  const int j0 = te.tile * kBc, len = seq.len;
  if (j0 >= len) return;
  const int col0 = slice * kSlice;  // first dK/dV/dQ column of this slice
  const bool first_slice = slice == 0;

  // K and V tiles stay for the whole CTA.
  load_tile<T, kBc, kD, LD, kMmaThreads>(sK, a.k.row<T>(seq.batch, seq.start + j0, hk), a.k.token_stride, len - j0,
                                         a.K, p.K16, tid);
  load_tile<T, kBc, kD, LD, kMmaThreads>(sV, a.v.row<T>(seq.batch, seq.start + j0, hk), a.v.token_stride, len - j0,
                                         a.V, p.V16, tid);
  ptx::cp_async_commit();

  const int sm = warp / SN, sn = warp % SN;  // score block of this warp: rows sm*16.., columns sn*NT*8..
  const int wn = warp / WD, wd = warp % WD;  // dK/dV block: keys wn*16.., columns col0 + wd*NTD*8..
  const int qm = warp / QD, qd = warp % QD;  // dQ block: rows qm*16.., columns col0 + qd*QW..
  const int s_m0 = sm * 16, s_n0 = sn * NT * 8;
  const int kv_n0 = col0 + wd * NTD * 8;

  // The loop runs over (query head of this part, query tile) steps; Q/dO of step `it` live in stage it % stages.
  const KeySpan rows = rows_seeing_keys(j0, j0 + kBc, len, a.window);
  const int tiles_per_head = rows.empty() ? 0 : (rows.end - rows.begin + kBr - 1) / kBr;
  const int heads_per_part = static_cast<int>(a.group / p.head_parts);
  const int64_t h_first = hk * a.group + part * heads_per_part;
  const int steps = heads_per_part * tiles_per_head;
  auto load_step = [&](int it, int stage) {
    const int64_t h = h_first + it / tiles_per_head;
    const int i0 = rows.begin + (it % tiles_per_head) * kBr;
    T* q_dst = sQdO + stage * 2 * kBr * LD;
    load_tile<T, kBr, kD, LD, kMmaThreads>(q_dst, a.q.row<T>(seq.batch, seq.start + i0, h), a.q.token_stride,
                                           len - i0, a.K, p.K16, tid);
    load_tile<T, kBr, kD, LD, kMmaThreads>(q_dst + kBr * LD, p.dout.row<T>(seq.batch, seq.start + i0, h),
                                           p.dout.token_stride, len - i0, a.V, p.V16, tid);
    ptx::cp_async_commit();
  };
  if (stages == 2 && steps > 0) load_step(0, 0);

  float dk[NTD][4], dv[NTD][4];
  zero(dk);
  zero(dv);
  float col_terms[NT][2], colsum[NT][2];

  for (int it = 0; it < steps; ++it) {
    const int64_t h = h_first + it / tiles_per_head;
    const int i0 = rows.begin + (it % tiles_per_head) * kBr;
    const float* gc = a.has_gate ? a.gc_row(seq.batch, h) + seq.start : nullptr;
    const int64_t base = p.row_index(seq.batch, h, seq.start);
    if (it % tiles_per_head == 0) {  // a new query head
      load_col_terms(col_terms, gc, j0 + s_n0 + 2 * c, len);
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) colsum[nt][0] = colsum[nt][1] = 0.f;
    }
    const RowTerms rt = load_row_terms(p, base, gc, i0 + s_m0 + g, len);

    __syncthreads();  // the previous step's readers of its Q/dO stage and of sP, sdS are done
    const int stage = stages == 2 ? it % 2 : 0;
    if (stages == 1) {
      load_step(it, 0);
      ptx::cp_async_wait<0>();
    } else if (it + 1 < steps) {
      load_step(it + 1, stage ^ 1);  // prefetch into the stage the previous step used
      ptx::cp_async_wait<1>();
    } else {
      ptx::cp_async_wait<0>();
    }
    __syncthreads();
    const T* sQ = sQdO + stage * 2 * kBr * LD;
    const T* sdO = sQ + kBr * LD;

    float s[NT][4], dp[NT][4];
    gemm_abt<T, NT>(s, sQ, sK, LD, s_m0, s_n0, p.K16 / 16, lane);
    gemm_abt<T, NT>(dp, sdO, sV, LD, s_m0, s_n0, p.V16 / 16, lane);
    const bool masked = block_needs_mask(i0, i0 + kBr, j0, j0 + kBc, len, a.window);
    RowSums sums;
    probs_and_grads(s, dp, rt, col_terms, a.scale_log2, masked, i0 + s_m0 + g, j0 + s_n0 + 2 * c, len, a.window, sums);
    if (with_dq && p.need_E && first_slice) {
#pragma unroll
      for (int hi = 0; hi < 2; ++hi) {
        const float e = quad_sum(sums.e[hi]);
        const float mass = a.has_gate ? quad_sum(sums.mass[hi]) : 0.f;
        const int i = i0 + s_m0 + g + 8 * hi;
        if (c == 0 && i < len) {
          atomicAdd(&p.E[base + i], e);
          if (a.has_gate) atomicAdd(&p.mass[base + i], mass);
        }
      }
    }
    if (a.has_gate) {
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        colsum[nt][0] += dp[nt][0] + dp[nt][2];
        colsum[nt][1] += dp[nt][1] + dp[nt][3];
      }
    }
    store_fragment<T, NT>(sP, LDP, s, s_m0, s_n0, lane);
    store_fragment<T, NT>(sdS, LDP, dp, s_m0, s_n0, lane);
    __syncthreads();

    gemm_atb<T, NTD, kBr>(dv, sP, LDP, sdO, LD, wn * 16, kv_n0, p.V16, lane);
    gemm_atb<T, NTD, kBr>(dk, sdS, LDP, sQ, LD, wn * 16, kv_n0, p.K16, lane);

    if (with_dq) {
      // dQ[i0.., slice] += dS K: 64-column chunks, straight into the fp32 accumulator.
#pragma unroll
      for (int ch = 0; ch < QW / QCH; ++ch) {
        const int n0 = col0 + qd * QW + ch * QCH;
        if (n0 >= p.K16) break;
        float acc[QCH / 8][4];
        zero(acc);
        gemm_ab<T, QCH / 8, kBc>(acc, sdS, LDP, sK, LD, qm * 16, n0, p.K16, lane);
#pragma unroll
        for (int hi = 0; hi < 2; ++hi) {
          const int i = i0 + qm * 16 + g + 8 * hi;
          if (i >= len) continue;
          float* row = p.dq_acc + (base + i) * p.K16;
#pragma unroll
          for (int nt = 0; nt < QCH / 8; ++nt) {
            const int col = n0 + nt * 8 + 2 * c;
            if (col < p.K16) atomic_add_pair(row + col, acc[nt][2 * hi], acc[nt][2 * hi + 1]);
          }
        }
      }
    }

    if (a.has_gate && first_slice && it % tiles_per_head == tiles_per_head - 1) {
      // The head's column sums of dS over every row that sees the keys: over the 8 row groups of the warp,
      // then over the SM warps of a column block, in a fixed order.
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int lo = 0; lo < 2; ++lo) {
          float v = colsum[nt][lo];
          v += __shfl_xor_sync(0xffffffffu, v, 4);
          v += __shfl_xor_sync(0xffffffffu, v, 8);
          v += __shfl_xor_sync(0xffffffffu, v, 16);
          if (g == 0) sRed[sm * kBc + s_n0 + nt * 8 + 2 * c + lo] = v;
        }
      __syncthreads();
      for (int col = tid; col < kBc; col += kMmaThreads) {
        float v = 0.f;
        for (int w = 0; w < SM; ++w) v += sRed[w * kBc + col];
        if (j0 + col < len) p.colsum[base + j0 + col] = v;
      }
      // sRed is next written after at least one more __syncthreads (the next step's first).
    }
  }
  ptx::cp_async_wait<0>();  // K/V copies are still in flight when no query row sees these keys

  // Keys that no query row sees (window 0) still get their zero column sums.
  if (a.has_gate && first_slice && steps == 0) {
    for (int64_t h = h_first; h < h_first + heads_per_part; ++h) {
      const int64_t base = p.row_index(seq.batch, h, seq.start);
      for (int col = tid; col < kBc; col += kMmaThreads)
        if (j0 + col < len) p.colsum[base + j0 + col] = 0.f;
    }
  }

  // Epilogue: this slice's dK (times scale) and dV columns of the keys j0..
  const int valid_keys = len - j0;
  if (p.head_parts == 1) {
    const int64_t t0 = seq.start + j0;
    store_fragment_global<T, NTD>([&](int r) { return p.dk.row<T>(seq.batch, t0 + r, hk); }, dk, a.scale, wn * 16,
                                  kv_n0, valid_keys, a.K, p.dk_width, lane);
    store_fragment_global<T, NTD>([&](int r) { return p.dv.row<T>(seq.batch, t0 + r, hk); }, dv, 1.f, wn * 16,
                                  kv_n0, valid_keys, a.V, p.dv_width, lane);
  } else {
    const int64_t krow = p.kv_row_index(part, seq.batch, hk, seq.start + j0);
    store_fragment_global<float, NTD>([&](int r) { return p.dk_part + (krow + r) * p.K16; }, dk, a.scale, wn * 16,
                                      kv_n0, valid_keys, p.K16, 16, lane);
    store_fragment_global<float, NTD>([&](int r) { return p.dv_part + (krow + r) * p.V16; }, dv, 1.f, wn * 16,
                                      kv_n0, valid_keys, p.V16, 16, lane);
  }
}

template <class T, int kD>
void launch_dkdv_mma(const BackwardParams& p, const TileSchedule& keys, int slices, int stages, cudaStream_t stream) {
  const int64_t blocks = keys.num_tiles * p.a.H * p.head_parts * slices;
  if (blocks == 0) return;
  const size_t smem = dkdv_smem_bytes<kD>(stages);
  FLASHGATE_CUDA_CHECK(cudaFuncSetAttribute(dkdv_kernel<T, kD>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            static_cast<int>(smem)));
  dkdv_kernel<T, kD><<<static_cast<unsigned>(blocks), kMmaThreads, smem, stream>>>(p, keys, slices, stages,
                                                                                   !p.deterministic);
  FLASHGATE_CHECK_LAUNCH("dkdv_kernel");
}

#define FLASHGATE_INSTANTIATE_DKDV(T, D)                                                               \
  template void launch_dkdv_mma<T, D>(const BackwardParams&, const TileSchedule&, int, int, cudaStream_t);

}  // namespace flashgate::cuda::bwd
