// The key-major backward kernel (dK, dV; in default mode also dQ and E through atomics). One CTA of 8 warps
// per (key tile of kBc keys, kv head, head part, column slice); see backward.h for the design.
//
// Warp layouts (8 warps, TileConfig): each warp owns a block of MS/MK/MQ m16 tiles by NT/NTD/QW columns of
//   scores  S, dP, P, dS  [kBr x kBc]:       SM warp rows (MS tiles each) x SN = 8/SM warp columns (NT n8 tiles)
//   dK, dV  [kBc x kSliceKV] accumulators:   WN warp rows (MK tiles)      x WD = 8/WN warp columns (NTD tiles)
//   dQ      [kBr x kSliceKV] (transient):     QM warp rows (MQ tiles)      x QD = 8/QM warp columns, QCH-column chunks
#pragma once

#include "cuda/common/cuda_check.h"
#include "cuda/common/sequence.h"
#include "cuda/common/tile_io.h"
#include "cuda/common/tile_scheduler.h"
#include "cuda/portable/tile_stream.cuh"
#include "cuda/portable/backward_kernels.h"
#include "cuda/portable/backward_mma.cuh"

namespace flashgate::cuda::bwd {

// A step's row and column terms from its shared copy (lse[kBr] | D[kBr] | Gc of the rows [kBr] | Gc of the
// key columns), the same values load_row_terms / load_col_terms read from global memory, with the gate terms
// taken relative to `anchor` (0, or a slice pair's Gc at one key of the tile: anchored_gate_term).
template <class T, int MT, int kBr, bool kAnchored>
__device__ __forceinline__ RowTerms<MT> row_terms_of(const float* terms, bool has_gate, float anchor, int r_first,
                                                     int i_first, int len) {
  RowTerms<MT> rt;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int hi = 0; hi < 2; ++hi) {
      const int r = r_first + 16 * mt + 8 * hi;
      rt.term[mt][hi] = -INFINITY;
      rt.d[mt][hi] = 0.f;
      if (i_first + 16 * mt + 8 * hi < len) {
        const float lse = terms[r];
        const float gc = has_gate ? terms[2 * kBr + r] : 0.f;
        const float term = kAnchored ? anchored_gate_term(gc, lse, anchor) : gc - lse;
        if (lse != -INFINITY) rt.term[mt][hi] = PScale<T>::plus_log2(term * kLog2e);
        rt.d[mt][hi] = terms[kBr + r] * PScale<T>::kInv;
      }
    }
  return rt;
}

template <bool kAnchored, int NT>
__device__ __forceinline__ void col_terms_of(float (&col)[NT][2], const float* col_gc, bool has_gate, float anchor,
                                             int c_first) {
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int lo = 0; lo < 2; ++lo)
      col[nt][lo] = has_gate ? (kAnchored ? __fsub_rn(col_gc[c_first + nt * 8 + lo], anchor)
                                          : col_gc[c_first + nt * 8 + lo]) * kLog2e
                             : 0.f;
}

// The dK/dV kernel's ldmatrix addresses (the one place for this rule): 32-bit shared addresses formed once
// per CTA (the stage adds its offset) save the per-step address arithmetic, but keep six registers live
// across the loop; generic pointers re-formed from the stage's tiles each step leave ptxas free to rematerialise them. Per-CTA addresses only without the row sums: with them
// sm_90a D256 kFull spilled 28 B (-Xptxas -v; spill-free re-formed).
template <bool kRowSums>
__device__ constexpr bool cta_ldsm_addresses() {
  return !kRowSums;
}

// threadIdx.x through an opaque move: under register pressure ptxas re-reads %tid.x (S2R) inside the step
// loop to rebuild per-thread offsets, and the IMADs after that long-latency read stalled ~6% of the D128
// kernel's samples (ncu, v8). An asm result cannot be re-derived from %tid.x, so the value stays in a register.
// sm_90 only: on sm_80 the held register spilled D256 (44 B), and the H200 is where the stall was measured.
__device__ __forceinline__ int held_thread_index() {
  if constexpr (kSm8xDevicePass) return static_cast<int>(threadIdx.x);
  int t;
  asm volatile("mov.u32 %0, %%tid.x;" : "=r"(t));
  return t;
}

// kFull: the head dims fill the bucket (K16 == V16 == kD), so every GEMM runs over compile-time bounds
// without column guards (straight-line code the compiler can software-pipeline); otherwise the run-time
// K16 / V16 bound the columns.
// kRowSums (BackwardParams::needs_row_sums: a gate or a sink): the E/mass row sums, the gate's row and
// column terms and dS column sums. Without them (the common case) a step's gradient is just dS = P (dP - D),
// which frees the registers and instructions those sums take next to the GEMMs.
// kSlicePair (attention_backward_slice, AttentionParams::Tk): the rows shifted against Tk keys, the key bound and the
// anchored gate terms; the whole-sequence variants carry none of them (their instructions are the same without).
template <class T, int kD, bool kFull, bool kRowSums, bool kSlicePair>
__global__ void __launch_bounds__(kMmaThreads, 1)
    dkdv_kernel(BackwardParams p, TileSchedule key_tiles, int slices, int stages, bool with_dq) {
  using C = TileConfig<kD>;
  constexpr int kBc = C::kBc, kBr = C::kBr, kSlice = C::kSliceKV;
  constexpr int LD = kD + 8, LDP = kBc + 8;
  constexpr int SM = C::kScoreWarpRows, SN = 8 / SM, MS = kBr / SM / 16, NT = kBc / SN / 8;
  constexpr int WN = C::kKvWarpRows, WD = 8 / WN, MK = kBc / WN / 16, NTD = kSlice / WD / 8;
  constexpr int QM = C::kDqWarpRows, QD = 8 / QM, MQ = kBr / QM / 16, QW = kSlice / QD;
  constexpr int QCH = QW < C::kDqChunk ? QW : C::kDqChunk;
  constexpr int kPasses = kRowSums ? C::kScorePassesRowSums : C::kScorePasses, NPS = NT / kPasses;
  static_assert(SM * SN == 8 && WN * WD == 8 && QM * QD == 8, "8 warps");
  static_assert(MS * SM * 16 == kBr && NT * SN * 8 == kBc && MK * WN * 16 == kBc && NTD * WD * 8 == kSlice &&
                    MQ * QM * 16 == kBr && NPS * kPasses == NT && NTD % 2 == 0 && QW % QCH == 0 && QCH % 16 == 0,
                "warp tiles cover the products");

  // Shared memory: K, V | P, dS | column-sum partials [SM][kBc] | stages x (Q, dO, step terms) (see
  // dkdv_smem_bytes); the per-stage buffers last, so only they move with the runtime stage count.
  extern __shared__ __align__(16) unsigned char smem_raw[];
  constexpr int kStepTerms = 3 * kBr + kBc;                  // lse, D, row Gc [kBr] each | column Gc [kBc]
  constexpr int kStageBytes = 2 * kBr * LD * 2 + kStepTerms * 4;  // Q, dO, terms
  T* sK = reinterpret_cast<T*>(smem_raw);
  T* sV = sK + kBc * LD;
  T* sP = sV + kBc * LD;
  T* sdS = sP + kBr * LDP;
  float* sColsum = reinterpret_cast<float*>(sdS + kBr * LDP);
  unsigned char* sStages = reinterpret_cast<unsigned char*>(sColsum + SM * kBc);
  auto stage_q = [&](int stage) { return reinterpret_cast<T*>(sStages + stage * kStageBytes); };  // dO follows
  auto stage_terms = [&](int stage) { return reinterpret_cast<float*>(sStages + stage * kStageBytes + 2 * kBr * LD * 2); };

  const AttentionParams& a = p.a;
  const bool has_gate = kRowSums && a.has_gate;
  const int K16 = kFull ? kD : p.K16, V16 = kFull ? kD : p.V16;
  const int tid = held_thread_index(), lane = tid % 32, warp = tid / 32, g = lane / 4, c = lane % 4;

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
  // len query rows against key_len keys, row i at key position i + shift: a slice pair's (AttentionParams::Tk,
  // key_shift), else the sequence's own keys (shift 0). Keys past key_len are zero-filled and masked.
  const int len = seq.len, key_len = kSlicePair ? a.key_len(len) : len, shift = kSlicePair ? a.key_shift : 0;
  const int j0 = te.tile * kBc;
  if (j0 >= key_len) return;
  // A slice pair's gate terms are anchored at the Gc of one key of this tile (anchored_gate.cuh).
  const int anchor_col = kSlicePair && has_gate && a.gc_k ? gate_anchor_key(j0, kBc, key_len) - j0 : -1;
  const int col0 = slice * kSlice;  // first dK/dV/dQ column of this slice
  const bool first_slice = slice == 0;

  // K and V tiles stay for the whole CTA.
  load_tile<T, kBc, kD, LD, kMmaThreads>(sK, a.k.row<T>(seq.batch, seq.start + j0, hk), a.k.token_stride,
                                         key_len - j0, a.K, p.K16, tid);
  load_tile<T, kBc, kD, LD, kMmaThreads>(sV, a.v.row<T>(seq.batch, seq.start + j0, hk), a.v.token_stride,
                                         key_len - j0, a.V, p.V16, tid);
  ptx::cp_async_commit();

  const int sm = warp / SN, sn = warp % SN;  // score block of this warp: rows s_m0.., columns s_n0..
  const int wn = warp / WD, wd = warp % WD;  // dK/dV block: keys kv_m0.., columns kv_n0..
  const int qm = warp / QD, qd = warp % QD;  // dQ block: rows q_m0.., columns col0 + qd*QW..
  const int s_m0 = sm * MS * 16, s_n0 = sn * NT * 8;
  const int kv_m0 = wn * MK * 16, kv_n0 = col0 + wd * NTD * 8;
  const int q_m0 = qm * MQ * 16, q_n0 = col0 + qd * QW;

  // ldmatrix addresses of the warp's operand blocks in a stage (the GEMMs add compile-time offsets): Q as A
  // rows (S; dO follows Q by kToDo bytes: dP) and as transposed B (dK; dV), K as B rows (S; V follows K by
  // kToV: dP) and as transposed B (dQ), P as transposed A (dV; dS follows P by kToDs: dK), dS as A rows (dQ).
  // Their form and when they are formed: see cta_ldsm_addresses.
  constexpr bool kCtaAddresses = cta_ldsm_addresses<kRowSums>();
  using Addr = std::conditional_t<kCtaAddresses, uint32_t, SmemBytes>;
  struct Operands {
    Addr q_rows, q_trans, k_rows, k_trans, p_trans, ds_rows;
  };
  auto operands_of = [&](int stage) {
    const T* sQ = stage_q(stage);
    return Operands{ldsm_a<Addr>(sQ, LD, s_m0, lane),         ldsm_b_trans<Addr>(sQ, LD, kv_n0, lane),
                    ldsm_b<Addr>(sK, LD, s_n0, lane),         ldsm_b_trans<Addr>(sK, LD, q_n0, lane),
                    ldsm_a_trans<Addr>(sP, LDP, kv_m0, lane), ldsm_a<Addr>(sdS, LDP, q_m0, lane)};
  };
  constexpr uint32_t kToDo = tile_offset<T>(kBr, 0, LD), kToV = tile_offset<T>(kBc, 0, LD);
  constexpr uint32_t kToDs = tile_offset<T>(kBr, 0, LDP);
  const Operands cta_operands = operands_of(0);
  // A step's addresses: the per-CTA ones plus the stage's offset, or formed afresh.
  auto operands = [&](int stage) {
    if constexpr (!kCtaAddresses) return operands_of(stage);
    Operands op = cta_operands;
    op.q_rows += stage * kStageBytes;
    op.q_trans += stage * kStageBytes;
    return op;
  };

  // The loop runs over (query head of this part, query tile) steps; Q/dO of step `it` live in stage it % stages,
  // next to the step's row terms (lse, D, Gc of its rows) and the Gc of the key columns. The terms travel
  // through shared memory with the tiles, so they cost no registers across the GEMMs (the dK/dV
  // accumulators and S/dP take nearly all of them) and no global-load latency after them.
  // Row tiles start 16-aligned (dq_acc's row groups): a shifted slice's first seeing row need not be.
  const KeySpan seeing = kSlicePair ? rows_seeing_keys(j0, j0 + kBc, len, a.window, shift, key_len)
                                    : rows_seeing_keys(j0, j0 + kBc, len, a.window);
  const KeySpan rows{kSlicePair ? seeing.begin & ~15 : seeing.begin, seeing.end};
  const int tiles_per_head = seeing.empty() ? 0 : (rows.end - rows.begin + kBr - 1) / kBr;
  const int heads_per_part = static_cast<int>(a.group / p.head_parts);
  const int64_t h_first = hk * a.group + part * heads_per_part;
  const int steps = heads_per_part * tiles_per_head;
  // Step (h, i0): query head h, rows i0 .. i0 + kBr.
  auto load_step = [&](int64_t h, int i0, int stage) {
    T* q_dst = stage_q(stage);
    if constexpr (kFull) {
      // Q and dO rows as streams: a whole tile (all but a sequence's last) costs one add and one cp.async per
      // row. (The guarded kernels keep load_tile: its fewer live values keep D64 spill-free.)
      const TileStream<T, kBr, kD, LD, kMmaThreads, true> q_rows(a.q.row<T>(seq.batch, seq.start, h),
                                                                 a.q.token_stride, a.K, p.K16, tid);
      const TileStream<T, kBr, kD, LD, kMmaThreads, true> do_rows(p.dout.row<T>(seq.batch, seq.start, h),
                                                                  p.dout.token_stride, a.V, p.V16, tid);
      q_rows.load(q_dst, i0, len - i0);
      do_rows.load(q_dst + kBr * LD, i0, len - i0);
    } else {
      load_tile<T, kBr, kD, LD, kMmaThreads>(q_dst, a.q.row<T>(seq.batch, seq.start + i0, h), a.q.token_stride,
                                             len - i0, a.K, p.K16, tid);
      load_tile<T, kBr, kD, LD, kMmaThreads>(q_dst + kBr * LD, p.dout.row<T>(seq.batch, seq.start + i0, h),
                                             p.dout.token_stride, len - i0, a.V, p.V16, tid);
    }
    // Terms: lse[kBr] | D[kBr] | Gc of the rows [kBr] | Gc of the key columns [kBc]; zero past len / key_len.
    const int64_t base = p.row_index(seq.batch, h, seq.start);
    const float* gc = has_gate ? a.gc_row(seq.batch, h) + seq.start : nullptr;
    float* t_dst = stage_terms(stage);
    for (int e = tid; e < (gc ? kStepTerms : 2 * kBr); e += kMmaThreads) {
      const int part_of = e / kBr, r = e - part_of * kBr;  // part 3 (columns) spans kBc entries
      const bool row_part = part_of < 3;
      const int pos = row_part ? i0 + r : j0 + (e - 3 * kBr);
      // A slice pair's key columns: gc_k's, Tk (key_end, a kernel parameter) of them.
      const float* src = part_of == 0               ? p.lse + base
                         : part_of == 1             ? p.D + base
                         : row_part || !kSlicePair ? gc
                                                    : a.gc_key_row(seq.batch, h) + seq.start;
      // (The key bound written with the whole-sequence rule beside it, always true here: `pos < a.key_end` alone
      // schedules the gated D128 slice-pair kernel into an 8-byte spill on sm_90a.)
      const bool ok = row_part || !kSlicePair ? pos < len : (pos < a.key_end) & ((a.Tk > 0) | (pos < len));
      ptx::cp_async_4(t_dst + e, ok ? src + pos : p.lse, ok ? 4u : 0u);
    }
    ptx::cp_async_commit();
  };
  if (stages == 2 && steps > 0) load_step(h_first, rows.begin, 0);

  float dk[MK][NTD][4], dv[MK][NTD][4];
  zero(dk);
  zero(dv);

  // Step it = head * tiles_per_head + head_tile, carried as counters (no divisions in the loop).
  int head = 0, head_tile = 0;
  for (int it = 0; it < steps; ++it) {
    const int64_t h = h_first + head;
    const int i0 = rows.begin + head_tile * kBr;
    const bool head_begins = head_tile == 0, head_ends = head_tile == tiles_per_head - 1;
    const int64_t base = p.row_index(seq.batch, h, seq.start);

    // One barrier per step with two stages: this step's tiles were issued during the previous step, and
    // after the barrier every reader of the previous step's stage and of sP, sdS is done, so the next
    // step's copies into that stage can start right away and fly during this step's GEMMs.
    const int stage = stages == 2 ? it % 2 : 0;
    if (stages == 1) {
      __syncthreads();  // the previous step's readers of the stage and of sP, sdS are done
      load_step(h, i0, 0);
    }
    ptx::cp_async_wait<0>();
    __syncthreads();
    if (stages == 2 && it + 1 < steps) load_step(head_ends ? h + 1 : h, head_ends ? rows.begin : i0 + kBr, stage ^ 1);
    const float* terms = stage_terms(stage);
    const auto op = [&] { return operands(stage); };  // at each GEMM call (see cta_ldsm_addresses)

    // dP, then S in kPasses column passes (TileConfig), each turned into P (stored) and dS at once: a pass's S
    // accumulators are all that is live next to dP's, which keeps the wide buckets within 255 registers.
    float dp[MS][NT][4];
    gemm_abt<T, MS, NT, kFull ? kD / 16 : 0, true>(dp, op().q_rows + kToDo, op().k_rows + kToV, LD, V16 / 16);
    const float anchor = anchor_col >= 0 ? terms[3 * kBr + anchor_col] : 0.f;
    const RowTerms<MS> rt =
        row_terms_of<T, MS, kBr, kSlicePair>(terms, has_gate, anchor, s_m0 + g, i0 + s_m0 + g, len);
    const bool masked = kSlicePair ? block_needs_mask(i0, i0 + kBr, j0, j0 + kBc, len, a.window, a.key_shift, a.key_end)
                                   : block_needs_mask(i0, i0 + kBr, j0, j0 + kBc, len, a.window);
    RowSums<MS> sums;
#pragma unroll
    for (int pass = 0; pass < kPasses; ++pass) {
      const int n0 = s_n0 + pass * NPS * 8;
      float s[MS][NPS][4];
      gemm_abt<T, MS, NPS, kFull ? kD / 16 : 0, C::kPeelScorePasses && !kRowSums>(s, op().q_rows, op().k_rows + tile_offset<T>(pass * NPS * 8, 0, LD),
                                                LD, K16 / 16);
      float col_terms[NPS][2];
      col_terms_of<kSlicePair>(col_terms, terms + 3 * kBr, has_gate, anchor, n0 + 2 * c);
      const int row_shift = kSlicePair ? a.key_shift : 0;
      probs<kSlicePair>(s, rt, col_terms, a.scale_log2, masked, i0 + row_shift + s_m0 + g, j0 + n0 + 2 * c,
                        len + row_shift, a.window, a.key_end);
      grads<T, kRowSums>(dp, s, pass * NPS, rt, sums);
      store_fragment<T, MS, NPS>(sP, LDP, s, s_m0, n0, lane);
    }
    if (kRowSums && with_dq && p.need_E && first_slice) {
#pragma unroll
      for (int mt = 0; mt < MS; ++mt)
#pragma unroll
        for (int hi = 0; hi < 2; ++hi) {
          const float e = quad_sum(sums.e[mt][hi]) * PScale<T>::kInv;
          const float mass = has_gate ? quad_sum(sums.mass[mt][hi]) * PScale<T>::kInv : 0.f;
          const int i = i0 + s_m0 + mt * 16 + g + 8 * hi;
          if (c == 0 && i < len) {
            atomicAdd(&p.E[base + i], e);
            if (has_gate) atomicAdd(&p.mass[base + i], mass);
          }
        }
    }
    if (has_gate && first_slice) {
      // The head's column sums of dS: this step's rows of the warp (its MS tiles, then its 8 row groups)
      // added to the warp's own slots sColsum[sm][its columns]; lane g == 0 owns them, so the order is fixed.
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int lo = 0; lo < 2; ++lo) {
          float v = 0.f;
#pragma unroll
          for (int mt = 0; mt < MS; ++mt) v += dp[mt][nt][lo] + dp[mt][nt][2 + lo];
          v += __shfl_xor_sync(0xffffffffu, v, 4);
          v += __shfl_xor_sync(0xffffffffu, v, 8);
          v += __shfl_xor_sync(0xffffffffu, v, 16);
          float& slot = sColsum[sm * kBc + s_n0 + nt * 8 + 2 * c + lo];
          if (g == 0) slot = head_begins ? v : slot + v;
        }
    }
    store_fragment<T, MS, NT>(sdS, LDP, dp, s_m0, s_n0, lane);
    __syncthreads();

    gemm_atb<T, MK, NTD, kBr, !kFull>(dv, op().p_trans, LDP, op().q_trans + kToDo, LD, kv_n0, V16);
    gemm_atb<T, MK, NTD, kBr, !kFull>(dk, op().p_trans + kToDs, LDP, op().q_trans, LD, kv_n0, K16);

    if (with_dq) {
      // dQ[i0.., slice] += dS K: QCH-column chunks (bounded registers), straight into the fp32 accumulator
      // (add_dq_fragment: a warp instruction adds 512 consecutive bytes). Last: dQ first (its atomics
      // draining under the dV/dK MMAs) was 4% slower at D128 on the H200, and between dV and dK 1-3%.
      const int64_t dq_row0 = dq_row(a, seq.batch, h, te.seq, seq.start);
#pragma unroll
      for (int ch = 0; ch < QW / QCH; ++ch) {
        const int n0 = q_n0 + ch * QCH;
        if (!kFull && n0 >= K16) break;
        float acc[MQ][QCH / 8][4];
        zero(acc);
        gemm_ab<T, MQ, QCH / 8, kBc, !kFull>(acc, op().ds_rows, LDP, op().k_trans + tile_offset<T>(0, ch * QCH, LD),
                                             LD, n0, K16);
        add_dq_fragment<MQ, QCH / 8, !kFull>(p.dq_acc, dq_row0, i0 + q_m0, n0, K16, acc, len, lane);
      }
    }

    if (has_gate && first_slice && head_ends) {
      // The head's column sums over every row that sees the keys: the SM warp-row partials in a fixed order.
      // The last step's slots were written before this step's __syncthreads above.
      for (int col = tid; col < kBc; col += kMmaThreads) {
        float v = 0.f;
        for (int w = 0; w < SM; ++w) v += sColsum[w * kBc + col];
        if (j0 + col < key_len)
          p.colsum[kSlicePair ? p.key_index(seq.batch, h, seq.start + j0 + col) : base + j0 + col] = v;
      }
      // sColsum is next written after at least one more __syncthreads (the next step's first).
    }
    if (head_ends) ++head, head_tile = 0;
    else ++head_tile;
  }
  ptx::cp_async_wait<0>();  // K/V copies are still in flight when no query row sees these keys

  // Keys that no query row sees (window 0) still get their zero column sums.
  if (has_gate && first_slice && steps == 0) {
    for (int64_t h = h_first; h < h_first + heads_per_part; ++h) {
      const int64_t base = kSlicePair ? p.key_index(seq.batch, h, seq.start) : p.row_index(seq.batch, h, seq.start);
      for (int col = tid; col < kBc; col += kMmaThreads)
        if (j0 + col < key_len) p.colsum[base + j0 + col] = 0.f;
    }
  }

  // Epilogue: this slice's dK (times scale) and dV columns of the keys j0..
  const int valid_keys = key_len - j0;
  if (p.head_parts == 1) {
    const int64_t t0 = seq.start + j0;
    store_fragment_global<T, MK, NTD>([&](int r) { return p.dk.row<T>(seq.batch, t0 + r, hk); }, dk, a.scale,
                                      kv_m0, kv_n0, valid_keys, a.K, p.dk_width, lane);
    store_fragment_global<T, MK, NTD>([&](int r) { return p.dv.row<T>(seq.batch, t0 + r, hk); }, dv, PScale<T>::kInv,
                                      kv_m0, kv_n0, valid_keys, a.V, p.dv_width, lane);
  } else {
    const int64_t krow = p.kv_row_index(part, seq.batch, hk, seq.start + j0);
    store_fragment_global<float, MK, NTD>([&](int r) { return p.dk_part + (krow + r) * p.K16; }, dk, a.scale,
                                          kv_m0, kv_n0, valid_keys, p.K16, 16, lane);
    store_fragment_global<float, MK, NTD>([&](int r) { return p.dv_part + (krow + r) * p.V16; }, dv, PScale<T>::kInv,
                                          kv_m0, kv_n0, valid_keys, p.V16, 16, lane);
  }
}

template <class T, int kD, bool kRowSums>
void launch_dkdv_mma(const BackwardParams& p, const TileSchedule& keys, int slices, int stages, cudaStream_t stream) {
  const int64_t blocks = keys.num_tiles * p.a.H * p.head_parts * slices;
  if (blocks == 0) return;
  const size_t smem = dkdv_smem_bytes<kD>(stages);
  // A slice pair (AttentionParams::Tk) takes the guarded kernel with the shift, its key bound and anchored gate
  // terms; a sequence's own keys take kernels that carry none of them.
  const auto kernel = p.a.Tk > 0                       ? dkdv_kernel<T, kD, false, kRowSums, true>
                      : p.K16 == kD && p.V16 == kD ? dkdv_kernel<T, kD, true, kRowSums, false>
                                                   : dkdv_kernel<T, kD, false, kRowSums, false>;
  FLASHGATE_CUDA_CHECK(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  kernel<<<static_cast<unsigned>(blocks), kMmaThreads, smem, stream>>>(p, keys, slices, stages, !p.deterministic);
  FLASHGATE_CHECK_LAUNCH("dkdv_kernel");
}

#define FLASHGATE_INSTANTIATE_DKDV(T, D, ROW_SUMS)                                                           \
  template void launch_dkdv_mma<T, D, ROW_SUMS>(const BackwardParams&, const TileSchedule&, int, int, cudaStream_t);

}  // namespace flashgate::cuda::bwd
