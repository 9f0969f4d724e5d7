// The query-major backward kernel of deterministic mode: dQ and E without atomics. One CTA of 8 warps per
// (query tile of kQueryRows rows, query head, column slice) holds its Q and dO tiles and walks the key
// tiles that its rows can see in ascending order, recomputing S, P, dP and dS per key tile; dQ (kSliceQ
// columns) and the row sums E stay in registers until the end.
//
// Warp layouts (8 warps):
//   scores  [kQueryRows x kKeyCols]:     SM = rows/16 x SN = 8/SM
//   dQ      [kQueryRows x kSliceQ]:      QM = rows/16 x QD = 8/QM
#pragma once

#include "cuda/common/cuda_check.h"
#include "cuda/common/sequence.h"
#include "cuda/common/tile_io.h"
#include "cuda/common/tile_scheduler.h"
#include "cuda/portable/backward_kernels.h"
#include "cuda/portable/backward_mma.cuh"

namespace flashgate::cuda::bwd {

template <class T, int kD>
__global__ void __launch_bounds__(kMmaThreads, TileConfig<kD>::kMinBlocksDq)
    dq_kernel(BackwardParams p, TileSchedule query_tiles, int slices, int stages, bool d_only) {
  using C = TileConfig<kD>;
  constexpr int kBr = C::kQueryRows, kBc = C::kKeyCols, kSlice = C::kSliceQ;
  constexpr int LD = kD + 8, LDS = kBc + 8;
  constexpr int SM = kBr / 16, SN = 8 / SM, NT = kBc / SN / 8;
  constexpr int QM = kBr / 16, QD = 8 / QM, NTQ = kSlice / QD / 8;
  static_assert(SM * SN == 8 && QM * QD == 8 && NTQ % 2 == 0, "8 warps");

  // Shared memory: Q, dO | stages x (K, V) | dS | row-sum partials [SN][kBr] (see dq_smem_bytes).
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* sQ = reinterpret_cast<T*>(smem_raw);
  T* sdO = sQ + kBr * LD;
  T* sKV = sdO + kBr * LD;  // stage s: K at sKV + s * 2*kBc*LD, V right after it
  T* sdS = sKV + stages * 2 * kBc * LD;
  float* sRed = reinterpret_cast<float*>(sdS + kBr * LDS);

  const AttentionParams& a = p.a;
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, g = lane / 4, c = lane % 4;

  // blockIdx.x = (tile * HQ + h) * slices + slice
  int64_t x = blockIdx.x;
  const int slice = static_cast<int>(x % slices);
  x /= slices;
  const int64_t h = x % a.HQ, tile = x / a.HQ, hk = h / a.group;
  const TileMapEntry te = tile_longest_first(query_tiles, tile);  // the last query tiles see the most keys
  if (te.seq < 0) return;
  const SequenceSpan seq = sequence_span(a, te.seq);
  const int i0 = te.tile * kBr, len = seq.len;
  if (i0 >= len) return;
  const int col0 = slice * kSlice;

  load_tile<T, kBr, kD, LD, kMmaThreads>(sQ, a.q.row<T>(seq.batch, seq.start + i0, h), a.q.token_stride, len - i0,
                                         a.K, p.K16, tid);
  load_tile<T, kBr, kD, LD, kMmaThreads>(sdO, p.dout.row<T>(seq.batch, seq.start + i0, h), p.dout.token_stride,
                                         len - i0, a.V, p.V16, tid);
  ptx::cp_async_commit();

  const int sm = warp / SN, sn = warp % SN;
  const int qm = warp / QD, qd = warp % QD;
  const int s_m0 = sm * 16, s_n0 = sn * NT * 8;
  const int q_n0 = col0 + qd * NTQ * 8;

  const float* gc = a.has_gate ? a.gc_row(seq.batch, h) + seq.start : nullptr;
  const int64_t base = p.row_index(seq.batch, h, seq.start);
  const RowTerms<1> rt = load_row_terms<T, 1>(p, base, gc, i0 + s_m0 + g, len);

  // Key tiles the rows see, in ascending order; K/V of step `it` live in stage it % stages.
  const KeySpan keys = keys_seen_by_rows(i0, i0 + kBr, len, a.window);
  const int steps = keys.empty() ? 0 : (keys.end - keys.begin + kBc - 1) / kBc;
  auto load_step = [&](int it, int stage) {
    const int j0 = keys.begin + it * kBc;
    T* k_dst = sKV + stage * 2 * kBc * LD;
    load_tile<T, kBc, kD, LD, kMmaThreads>(k_dst, a.k.row<T>(seq.batch, seq.start + j0, hk), a.k.token_stride,
                                           len - j0, a.K, p.K16, tid);
    load_tile<T, kBc, kD, LD, kMmaThreads>(k_dst + kBc * LD, a.v.row<T>(seq.batch, seq.start + j0, hk),
                                           a.v.token_stride, len - j0, a.V, p.V16, tid);
    ptx::cp_async_commit();
  };
  if (stages == 2 && steps > 0) load_step(0, 0);

  float dq[1][NTQ][4];  // one m16 tile of rows per warp
  zero(dq);
  RowSums<1> sums;

  for (int it = 0; it < steps; ++it) {
    const int j0 = keys.begin + it * kBc;
    float col_terms[NT][2];
    load_col_terms(col_terms, gc, j0 + s_n0 + 2 * c, len);

    __syncthreads();  // the previous step's readers of its K/V stage and of sdS are done
    const int stage = stages == 2 ? it % 2 : 0;
    if (stages == 1) {
      load_step(it, 0);
      ptx::cp_async_wait<0>();
    } else if (it + 1 < steps) {
      load_step(it + 1, stage ^ 1);
      ptx::cp_async_wait<1>();
    } else {
      ptx::cp_async_wait<0>();
    }
    __syncthreads();
    const T* sK = sKV + stage * 2 * kBc * LD;
    const T* sV = sK + kBc * LD;

    float s[1][NT][4], dp[1][NT][4];
    gemm_abt<T, 1, NT, 0>(s, ldsm_a<uint32_t>(sQ, LD, s_m0, lane), ldsm_b<uint32_t>(sK, LD, s_n0, lane), LD,
                          p.K16 / 16);
    const bool masked = block_needs_mask(i0, i0 + kBr, j0, j0 + kBc, len, a.window);
    probs<false>(s, rt, col_terms, a.scale_log2, masked, i0 + s_m0 + g, j0 + s_n0 + 2 * c, len, a.window, a.key_end);
    gemm_abt<T, 1, NT, 0>(dp, ldsm_a<uint32_t>(sdO, LD, s_m0, lane), ldsm_b<uint32_t>(sV, LD, s_n0, lane), LD,
                          p.V16 / 16);
    grads<T>(dp, s, 0, rt, sums);
    if (d_only) continue;  // E only (its sums are in); the loop's first barrier still guards the stage
    store_fragment<T, 1, NT>(sdS, LDS, dp, s_m0, s_n0, lane);
    __syncthreads();

    gemm_ab<T, 1, NTQ, kBc, true>(dq, ldsm_a<uint32_t>(sdS, LDS, qm * 16, lane), LDS,
                                  ldsm_b_trans<uint32_t>(sK, LD, q_n0, lane), LD, q_n0, p.K16);
  }
  ptx::cp_async_wait<0>();  // Q/dO copies are still in flight when the rows see no key

  if ((p.need_E || d_only) && slice == 0) {
    // E (and the mass) over the row's quad, then over the SN warps of a row block, in a fixed order. d_only puts
    // D = E / (mass + the sink's share) into p.D: normalised by this pass's own P, a row whose mass sits on one
    // key gets D = dP of that key to rounding, so dS = P (dP - D) cancels to ~0 as it should (a small mismatch
    // between the forward's lse and the recomputed scores would otherwise stay in dS as (1 - P) dP).
    float row_e = 0.f;  // d_only: row tid's E while its mass is summed (kBr <= kMmaThreads)
    static_assert(kBr <= kMmaThreads, "one row per thread in the row-sum pass");
    for (int pass = 0; pass < (a.has_gate || d_only ? 2 : 1); ++pass) {
      __syncthreads();  // sRed is free
#pragma unroll
      for (int hi = 0; hi < 2; ++hi) {
        const float sum = quad_sum(pass == 0 ? sums.e[0][hi] : sums.mass[0][hi]) * PScale<T>::kInv;
        if (c == 0) sRed[sn * kBr + s_m0 + g + 8 * hi] = sum;
      }
      __syncthreads();
      const int r = tid;
      if (r >= kBr) continue;
      float v = 0.f;
      for (int w = 0; w < SN; ++w) v += sRed[w * kBr + r];
      if (i0 + r >= len) continue;
      if (!d_only) {
        (pass == 0 ? p.E : p.mass)[base + i0 + r] = v;
      } else if (pass == 0) {
        row_e = v;
      } else {
        const float lse = p.lse[base + i0 + r];
        const float mass = v + (a.has_sink && lse != -INFINITY ? expf(a.sink[h] - lse) : 0.f);
        p.D[base + i0 + r] = mass > 0.f ? row_e / mass : 0.f;
      }
    }
  }

  if (d_only) return;
  const int64_t t0 = seq.start + i0;
  store_fragment_global<T, 1, NTQ>([&](int r) { return p.dq.row<T>(seq.batch, t0 + r, h); }, dq, a.scale, qm * 16,
                                   q_n0, len - i0, a.K, p.dq_width, lane);
}

template <class T, int kD>
void launch_dq_mma(const BackwardParams& p, const TileSchedule& queries, int slices, int stages, bool d_only,
                   cudaStream_t stream) {
  const int64_t blocks = queries.num_tiles * p.a.HQ * slices;
  if (blocks == 0) return;
  const size_t smem = dq_smem_bytes<kD>(stages);
  FLASHGATE_CUDA_CHECK(cudaFuncSetAttribute(dq_kernel<T, kD>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            static_cast<int>(smem)));
  dq_kernel<T, kD><<<static_cast<unsigned>(blocks), kMmaThreads, smem, stream>>>(p, queries, slices, stages, d_only);
  FLASHGATE_CHECK_LAUNCH("dq_kernel");
}

#define FLASHGATE_INSTANTIATE_DQ(T, D)                                                                 \
  template void launch_dq_mma<T, D>(const BackwardParams&, const TileSchedule&, int, int, bool, cudaStream_t);

}  // namespace flashgate::cuda::bwd
