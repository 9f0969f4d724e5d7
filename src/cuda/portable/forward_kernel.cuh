// The portable forward (FlashAttention-2 style) for fp16/bf16: a block owns BM query rows of one head (and
// one V chunk); each warp owns MT 16-row m-tiles. Key tiles stream from the diagonal down to the window's
// start, loaded with cp.async. With two key/value stages tile n-1 loads while all of tile n computes (one
// barrier per tile); with one (where shared memory is short) the FA2 overlap: V(n) loads during
// S = Q K^T and the softmax of tile n, K(n-1) during O += P V(n). Scores live in the exp2 domain, every
// sum in fp32, P is rounded to the input type only as the MMA operand.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "cuda/common/attention_params.h"
#include "cuda/common/cuda_check.h"
#include "cuda/common/element.h"
#include "cuda/common/online_softmax.h"
#include "cuda/common/sequence.h"
#include "cuda/common/tile_io.h"
#include "cuda/common/tile_scheduler.h"
#include "cuda/common/visibility.h"
#include "cuda/portable/forward_config.h"
#include "cuda/portable/tile_stream.cuh"
#include "cuda/ptx/cp_async.h"
#include "cuda/ptx/fast_math.h"
#include "cuda/ptx/ldmatrix.h"
#include "cuda/ptx/mma.h"

namespace flashgate::cuda {
namespace forward_detail {

// One block's work item: query tile, head and V chunk, with everything derived from them.
struct WorkItem {
  SequenceSpan seq;
  int m0 = 0;         // first query row (local position)
  int rows = 0;       // valid rows of the tile
  int64_t h = 0, kvh = 0;
  int v0 = 0, v_width = 0;  // value dims of this chunk: [v0, v0 + v_width)
  KeySpan keys;
  int key_len = 0, shift = 0;  // the keys: key_len of them, row r at key position r + shift (see AttentionParams::Tk)
};

template <class Tile, int kStages>
class ForwardBlock {
  using T = typename Tile::T;
  static constexpr int MT = Tile::MT, BN = Tile::BN, KB = Tile::KB, VB = Tile::VB;
  static constexpr int kNT = BN / 8;   // 8-key n-tiles of a score tile
  static constexpr int kVT = VB / 8;   // 8-dim n-tiles of the output
  static constexpr int kStepsPerSkip = Tile::kSkipCols / 16;  // 16-wide MMA steps per skippable chunk

 public:
  __device__ __forceinline__ ForwardBlock(const AttentionParams& p, const WorkItem& w, unsigned char* smem)
      : p_(p), w_(w),
        sQ_(reinterpret_cast<T*>(smem)),
        sK_(sQ_ + Tile::kSmemQ),
        sV_(sK_ + Tile::kSmemK),
        sGk_(reinterpret_cast<float*>(sQ_ + Tile::kSmemQ + kStages * Tile::kStageElems)),
        k_stream_(p.k.template row<const T>(w.seq.batch, w.seq.start, w.kvh), p.k.token_stride, p.K,
                  Tile::active_cols(p.K), threadIdx.x),
        v_stream_(p.v.template row<const T>(w.seq.batch, w.seq.start, w.kvh) + w.v0, p.v.token_stride, w.v_width,
                  Tile::active_cols(w.v_width), threadIdx.x),
        gc_(p.has_gate ? p.gc_row(w.seq.batch, w.h) + w.seq.start : nullptr),
        g_ref_(gc_ ? gc_[w.m0] : 0.f),
        tid_(threadIdx.x), lane_(threadIdx.x % 32), warp_row0_((threadIdx.x / 32) * MT * 16),
        k_active_(Tile::active_cols(p.K)), v_active_(Tile::active_cols(w.v_width)) {}

  __device__ __forceinline__ void run() {
    float o[MT][kVT][4];
    // Assigned explicitly: nvcc 13.0 gives the rows past rows[0] of a default-initialised 2-D array of
    // SoftmaxRow a zero max2 instead of its -inf member initializer (seen in the PTX). A row max stuck at 0
    // scales P by exp(-max) and fp16 flushes it once the scores sit below about -16.
    SoftmaxRow rows[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      rows[mt][0] = rows[mt][1] = SoftmaxRow{};
#pragma unroll
      for (int j = 0; j < kVT; ++j) o[mt][j][0] = o[mt][j][1] = o[mt][j][2] = o[mt][j][3] = 0.f;
    }

    if (!w_.keys.empty()) {
      const int first = w_.keys.begin / BN, last = (w_.keys.end - 1) / BN;
      load_q();
      load_k(last);
      if (kStages == 2) load_v(last);
      ptx::cp_async_commit();
      for (int n = last; n >= first; --n) {
        float s[MT][kNT][4];
        uint32_t pa[MT][BN / 16][4];
        ptx::cp_async_wait<0>();
        if (kStages == 2) {
          __syncthreads();  // tile n visible to all; every warp is done with tile n+1, whose stage takes n-1
          if (n > first) load_k(n - 1), load_v(n - 1);
          ptx::cp_async_commit();
          scores(s, n);
          softmax(s, n, rows, o, pa);
        } else {
          __syncthreads();  // K(n) visible to all; every warp is done with V(n+1)
          load_v(n);
          ptx::cp_async_commit();
          scores(s, n);
          softmax(s, n, rows, o, pa);
          ptx::cp_async_wait<0>();
          __syncthreads();  // V(n) visible to all; every warp is done with K(n)
          if (n > first) load_k(n - 1);
          ptx::cp_async_commit();
        }
        accumulate_pv(pa, o, n);
      }
    }
    epilogue(rows, o);
  }

 private:
  // ---- loads ------------------------------------------------------------------------------------------
  __device__ __forceinline__ void load_q() {
    const T* src = p_.q.template row<const T>(w_.seq.batch, w_.seq.start + w_.m0, w_.h);
    load_tile<T, Tile::BM, KB, Tile::kQStride, Tile::kThreads>(sQ_, src, p_.q.token_stride, w_.rows, p_.K,
                                                               k_active_, tid_);
  }

  // Key tile n lives in stage n % kStages (n >= 0).
  static __device__ __forceinline__ int stage_of(int n) { return kStages == 1 ? 0 : n % kStages; }
  __device__ __forceinline__ T* k_tile(int n) const { return sK_ + stage_of(n) * Tile::kStageElems; }
  __device__ __forceinline__ T* v_tile(int n) const { return sV_ + stage_of(n) * Tile::kStageElems; }
  __device__ __forceinline__ float* gk_tile(int n) const { return sGk_ + stage_of(n) * BN; }

  // Key rows count from the sequence's first key (64-bit pointer steps: tensors may exceed 2^31 elements).
  __device__ __forceinline__ void load_k(int n) {
    const int n0 = n * BN;
    k_stream_.load(k_tile(n), n0, w_.key_len - n0);
    if (gc_ && tid_ < BN) {
      const bool valid = n0 + tid_ < w_.key_len;
      ptx::cp_async_4(gk_tile(n) + tid_, gc_keys() + (valid ? n0 + tid_ : 0), valid ? 4 : 0);
    }
  }

  // The cumulative gate at the keys (gc_ but for a slice pair), derived per load: no register through the loop.
  __device__ __forceinline__ const float* gc_keys() const {
    return p_.gc_key_row(w_.seq.batch, w_.h) + w_.seq.start;
  }

  __device__ __forceinline__ void load_v(int n) { v_stream_.load(v_tile(n), n * BN, w_.key_len - n * BN); }

  // ---- S = Q K^T ----------------------------------------------------------------------------------------
  __device__ __forceinline__ void scores(float (&s)[MT][kNT][4], int n) const {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int j = 0; j < kNT; ++j) s[mt][j][0] = s[mt][j][1] = s[mt][j][2] = s[mt][j][3] = 0.f;
    // ldmatrix row addresses: A (Q) rows lane%16, column half lane/16; B (K) keys of matrix lane/8.
    const T* q_base = sQ_ + (warp_row0_ + lane_ % 16) * Tile::kQStride + (lane_ / 16) * 8;
    const T* k_base = k_tile(n) + ((lane_ / 16) * 8 + lane_ % 8) * Tile::kKStride + ((lane_ / 8) % 2) * 8;
#pragma unroll
    for (int kc = 0; kc < KB / Tile::kSkipCols; ++kc) {
      if (kc > 0 && kc * Tile::kSkipCols >= k_active_) continue;  // uniform; must stay unrolled (no break)
#pragma unroll
      for (int ks = kc * kStepsPerSkip; ks < (kc + 1) * kStepsPerSkip; ++ks) {
        uint32_t a[MT][4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) ptx::ldmatrix_x4(a[mt], q_base + mt * 16 * Tile::kQStride + ks * 16);
#pragma unroll
        for (int np = 0; np < BN / 16; ++np) {
          uint32_t b[4];
          ptx::ldmatrix_x4(b, k_base + np * 16 * Tile::kKStride + ks * 16);
          const uint32_t b_lo[2] = {b[0], b[1]}, b_hi[2] = {b[2], b[3]};
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) {
            ptx::mma_16816<T>(s[mt][2 * np], a[mt], b_lo);
            ptx::mma_16816<T>(s[mt][2 * np + 1], a[mt], b_hi);
          }
        }
      }
    }
  }

  // ---- online softmax: scores -> P (as MMA A operands), rescaling o ------------------------------------------
  // Scores reach exp2 as fmaf(s, exp_scale(), -row max). Without a gate and with a positive scale (the usual
  // case) s stays the raw dot product: the row max commutes with the scale, so the scale costs nothing
  // beyond that FMA. Otherwise a pre-pass moves s into the exp2 domain first and exp_scale() is 1.
  __device__ __forceinline__ void softmax(float (&s)[MT][kNT][4], int n,
                                          SoftmaxRow (&rows)[MT][2], float (&o)[MT][kVT][4],
                                          uint32_t (&pa)[MT][BN / 16][4]) const {
    const int n0 = n * BN;
    if (prescaled()) to_log2_scores(s, gk_tile(n));
    // Per-element masking only where the tile needs it: diagonal, window edge, sequence end (uniform test).
    if (block_needs_mask(w_.m0, w_.m0 + Tile::BM, n0, n0 + BN, w_.seq.len, p_.window, w_.shift, w_.key_len))
      mask_hidden(s, n0);
    const float exp_scale = prescaled() ? 1.f : p_.scale_log2;
    // The maxima of all the thread's rows first, then one warp vote for the o rescale: past the first tiles
    // the row max rarely moves, so the multiplies are skipped, and with no branch between them the 2 * MT
    // max -> shuffle -> exp2 chains interleave (a vote per row half ran them one after the other).
    float factor[MT][2];
    bool moved = false;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        float tile_max = -INFINITY;
#pragma unroll
        for (int j = 0; j < kNT; ++j) tile_max = fmaxf(tile_max, fmaxf(s[mt][j][2 * half], s[mt][j][2 * half + 1]));
        factor[mt][half] = rows[mt][half].rescale(quad_max(tile_max) * exp_scale);
        moved |= factor[mt][half] != 1.f;
      }
    if (__any_sync(0xffffffffu, moved)) {
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int j = 0; j < kVT; ++j) {
          o[mt][j][0] *= factor[mt][0];
          o[mt][j][1] *= factor[mt][0];
          o[mt][j][2] *= factor[mt][1];
          o[mt][j][3] *= factor[mt][1];
        }
    }
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const float off = rows[mt][half].exp_offset();
#pragma unroll
        for (int j = 0; j < kNT; ++j) {
          float& x0 = s[mt][j][2 * half];
          float& x1 = s[mt][j][2 * half + 1];
          x0 = ptx::exp2_ftz(fmaf(x0, exp_scale, -off));
          x1 = ptx::exp2_ftz(fmaf(x1, exp_scale, -off));
          rows[mt][half].sum += x0 + x1;  // pairs first: a dependent chain of kNT adds, not 2 * kNT
        }
      }
      // Score n-tiles 2k and 2k+1 form the A operand of P V's k-step k (PTX m16n8k16 fragment layout).
#pragma unroll
      for (int k = 0; k < BN / 16; ++k) {
        pa[mt][k][0] = ptx::pack2<T>(s[mt][2 * k][0], s[mt][2 * k][1]);
        pa[mt][k][1] = ptx::pack2<T>(s[mt][2 * k][2], s[mt][2 * k][3]);
        pa[mt][k][2] = ptx::pack2<T>(s[mt][2 * k + 1][0], s[mt][2 * k + 1][1]);
        pa[mt][k][3] = ptx::pack2<T>(s[mt][2 * k + 1][2], s[mt][2 * k + 1][3]);
      }
    }
  }

  // Whether scores are moved into the exp2 domain before the row max (see softmax).
  __device__ __forceinline__ bool prescaled() const { return gc_ != nullptr || !(p_.scale_log2 > 0.f); }

  // Raw dot products -> exp2-domain scores: times scale * log2(e), plus the key side of the gate term.
  // The gate term Gc[i] - Gc[j] is split at g_ref = Gc[m0]: the key part -(Gc[j] - g_ref) goes in here, the
  // row part Gc[i] - g_ref is a per-row constant that cancels in P and is added to the row max only at the
  // end (epilogue). Both parts stay small where P matters, so fp32 keeps their precision, and the loop
  // holds no per-row gate registers.
  __device__ __forceinline__ void to_log2_scores(float (&s)[MT][kNT][4], const float* gk) const {
#pragma unroll
    for (int j = 0; j < kNT; ++j)
#pragma unroll
      for (int e2 = 0; e2 < 2; ++e2) {
        const int col = j * 8 + (lane_ % 4) * 2 + e2;
        const float gk2 = gc_ ? (gk[col] - g_ref_) * kLog2e : 0.f;
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
          for (int half = 0; half < 2; ++half) {
            float& x = s[mt][j][2 * half + e2];
            x = fmaf(x, p_.scale_log2, -gk2);
          }
      }
  }

  // -inf where query row i does not see key column j, as a compare of the distance i - j: the thread's
  // distances differ by constants, so a score costs an add, a compare and a select (visible() per score
  // cost about seven instructions: a masked tile ran ~1.5x a plain one, and window and packed rows mask
  // 20-25% of their tiles). Rows past the sequence's end are never stored and stay unmasked. Keys past the
  // end hide behind the diagonal, but for a slice pair's rows that sit past its keys: there by column.
  __device__ __forceinline__ void mask_hidden(float (&s)[MT][kNT][4], int n0) const {
    const int d0 = (w_.m0 + warp_row0_ + lane_ / 4 + w_.shift) - (n0 + (lane_ % 4) * 2);  // of s[0][0][0]
    const unsigned bound = distance_bound(p_.window);
    if (n0 + BN > w_.key_len) {
      const int col0 = n0 + (lane_ % 4) * 2;
#pragma unroll
      for (int j = 0; j < kNT; ++j)
#pragma unroll
        for (int e2 = 0; e2 < 2; ++e2)
          if (col0 + j * 8 + e2 >= w_.key_len)
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) s[mt][j][e2] = s[mt][j][2 + e2] = -INFINITY;
    }
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int half = 0; half < 2; ++half)
#pragma unroll
        for (int j = 0; j < kNT; ++j)
#pragma unroll
          for (int e2 = 0; e2 < 2; ++e2) {
            const int d = d0 + mt * 16 + half * 8 - j * 8 - e2;
            if (!visible_at_distance(d, bound)) s[mt][j][2 * half + e2] = -INFINITY;
          }
  }

  // ---- O += P V ---------------------------------------------------------------------------------------------
  __device__ __forceinline__ void accumulate_pv(const uint32_t (&pa)[MT][BN / 16][4], float (&o)[MT][kVT][4],
                                                int n) const {
    const T* v_base = v_tile(n) + (lane_ % 16) * Tile::kVStride + (lane_ / 16) * 8;
#pragma unroll
    for (int vc = 0; vc < VB / Tile::kSkipCols; ++vc) {
      if (vc > 0 && vc * Tile::kSkipCols >= v_active_) continue;
#pragma unroll
      for (int k = 0; k < BN / 16; ++k)
#pragma unroll
        for (int vp = vc * kStepsPerSkip; vp < (vc + 1) * kStepsPerSkip; ++vp) {
          uint32_t b[4];
          ptx::ldmatrix_x4_trans(b, v_base + k * 16 * Tile::kVStride + vp * 16);
          const uint32_t b_lo[2] = {b[0], b[1]}, b_hi[2] = {b[2], b[3]};
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) {
            ptx::mma_16816<T>(o[mt][2 * vp], pa[mt][k], b_lo);
            ptx::mma_16816<T>(o[mt][2 * vp + 1], pa[mt][k], b_hi);
          }
        }
    }
  }

  // ---- o and lse ----------------------------------------------------------------------------------------------
  // Each warp stages its own rows of o in its own rows of sQ (no other warp reads them), then stores them.
  __device__ __forceinline__ void epilogue(const SoftmaxRow (&rows)[MT][2], float (&o)[MT][kVT][4]) {
    const float sink = p_.has_sink ? p_.sink[w_.h] : 0.f;
    __syncwarp();
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int row = warp_row0_ + mt * 16 + lane_ / 4 + half * 8;
        float max2 = rows[mt][half].max2;
        if (gc_ && row < w_.rows && max2 != -INFINITY) max2 += (gc_[w_.m0 + row] - g_ref_) * kLog2e;
        const RowResult r = finish_row(max2, quad_sum(rows[mt][half].sum), p_.has_sink, sink);
        if (p_.has_lse && w_.v0 == 0 && lane_ % 4 == 0 && row < w_.rows)
          *p_.lse.template row<float>(w_.seq.batch, w_.seq.start + w_.m0 + row, w_.h) = r.lse;
        T* dst = sQ_ + row * Tile::kQStride + (lane_ % 4) * 2;
#pragma unroll
        for (int j = 0; j < kVT; ++j)
          *reinterpret_cast<uint32_t*>(dst + j * 8) =
              ptx::pack2<T>(o[mt][j][2 * half] * r.o_scale, o[mt][j][2 * half + 1] * r.o_scale);
        if (p_.o_residual.data && row < w_.rows) store_residual_row(row, o[mt], half, r.o_scale);
      }
    __syncwarp();
    const int rows_here = min(MT * 16, w_.rows - warp_row0_);
    if (rows_here <= 0) return;
    T* dst = p_.o.template row<T>(w_.seq.batch, w_.seq.start + w_.m0 + warp_row0_, w_.h) + w_.v0;
    store_rows(dst, p_.o.token_stride, sQ_ + warp_row0_ * Tile::kQStride, Tile::kQStride, rows_here, w_.v_width,
               p_.o_width, lane_, 32);
  }

  // The rounding residual of this thread's columns of `row` (tile row) from its accumulators (SPEC §7's D).
  __device__ __forceinline__ void store_residual_row(int row, const float (&o)[kVT][4], int half, float scale) {
    const int col = (lane_ % 4) * 2;
    int8_t* res = p_.o_residual.template row<int8_t>(w_.seq.batch, w_.seq.start + w_.m0 + row, w_.h) + w_.v0 + col;
    const bool pairs = p_.o_residual_width >= 2;
#pragma unroll
    for (int j = 0; j < kVT; ++j) {
      const int n = min(2, w_.v_width - (col + j * 8));  // columns of this chunk left in V
      if (n <= 0) continue;
      const float2 x = {o[j][2 * half] * scale, o[j][2 * half + 1] * scale};
      store_residual_pair<T>(res + j * 8, x, ptx::pack2<T>(x.x, x.y), pairs, n);
    }
  }

  const AttentionParams& p_;
  const WorkItem& w_;
  T* const sQ_;
  T* const sK_;       // stage 0's K tile (stage s at + s * kStageElems)
  T* const sV_;       // stage 0's V tile
  float* const sGk_;  // stage 0's Gc of the key tile's keys (with a gate; stage s at + s * BN)
  const TileStream<T, BN, KB, Tile::kKStride, Tile::kThreads> k_stream_;
  const TileStream<T, BN, VB, Tile::kVStride, Tile::kThreads> v_stream_;
  const float* const gc_;  // the cumulative gate at the rows (local positions; the keys': gc_keys)
  const float g_ref_;  // Gc at the tile's first row (see to_log2_scores)
  const int tid_, lane_, warp_row0_;
  const int k_active_, v_active_;
};

// One block per work item (query tile x head x V chunk), heaviest first: the last query tiles of every
// sequence, heads innermost (GQA neighbours share K/V in L2). The host keeps the item count within the
// grid's x limit (2^31 - 1).
template <class Tile, int kStages>
__global__ void __launch_bounds__(Tile::kThreads)
    forward_kernel(const __grid_constant__ AttentionParams p, const __grid_constant__ TileSchedule sched,
                   const int num_vchunks) {
  extern __shared__ __align__(16) unsigned char smem[];
  // The item lives in shared memory: the epilogue reads it back instead of holding it in registers through
  // the main loop (the D128 tile needs every register there).
  __shared__ WorkItem item;
  WorkItem w;
  w.h = blockIdx.x % p.HQ;
  const int64_t rest = blockIdx.x / p.HQ;
  const int vchunk = static_cast<int>(rest % num_vchunks);
  const TileMapEntry t = tile_longest_first(sched, rest / num_vchunks);
  if (t.seq < 0) return;
  w.seq = sequence_span(p, t.seq);
  w.m0 = t.tile * Tile::BM;
  if (w.m0 >= w.seq.len) return;
  w.rows = min(Tile::BM, w.seq.len - w.m0);
  w.kvh = w.h / p.group;
  w.v0 = vchunk * Tile::VB;
  w.v_width = min(Tile::VB, p.V - w.v0);
  w.key_len = p.Tk > 0 ? static_cast<int>(p.Tk) : w.seq.len;
  w.shift = p.key_shift;
  w.keys = keys_seen_by_rows(w.m0, w.m0 + w.rows, w.seq.len, p.window, w.shift, w.key_len);
  if (threadIdx.x == 0) item = w;
  __syncthreads();
  ForwardBlock<Tile, kStages>(p, item, smem).run();
}

}  // namespace forward_detail

namespace forward_detail {

// Two key/value stages when they fit in a block and keep as many blocks per SM as one stage (on the H200
// D64 and D128 stay at their register-bound 2 blocks; the A100's 164 KB per SM would halve D128's).
inline bool two_stages_pay(const void* one, size_t smem_one, const void* two, size_t smem_two, int threads) {
  int device = 0, max_block = 0;
  FLASHGATE_CUDA_CHECK(cudaGetDevice(&device));
  FLASHGATE_CUDA_CHECK(cudaDeviceGetAttribute(&max_block, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  if (smem_two + kForwardStaticSmem > static_cast<size_t>(max_block)) return false;
  FLASHGATE_CUDA_CHECK(
      cudaFuncSetAttribute(two, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem_two)));
  int blocks_one = 0, blocks_two = 0;
  FLASHGATE_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks_one, one, threads, smem_one));
  FLASHGATE_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks_two, two, threads, smem_two));
  return blocks_two >= blocks_one;
}

}  // namespace forward_detail

template <class T, int D>
void launch_forward_bucket(const AttentionParams& p, const TileSchedule& sched, int num_vchunks, CUstream_st* stream) {
  using Tile = typename ForwardBucket<T, D>::Tile;
  const int64_t items = forward_grid_items(p, sched, num_vchunks);
  if (items == 0) return;
  const auto one = forward_detail::forward_kernel<Tile, 1>;
  FLASHGATE_CUDA_CHECK(cudaFuncSetAttribute(one, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            static_cast<int>(Tile::smem_bytes(1))));
  if constexpr (Tile::kMaxStages == 2) {
    const auto two = forward_detail::forward_kernel<Tile, 2>;
    if (forward_detail::two_stages_pay(reinterpret_cast<const void*>(one), Tile::smem_bytes(1),
                                       reinterpret_cast<const void*>(two), Tile::smem_bytes(2), Tile::kThreads)) {
      two<<<static_cast<unsigned>(items), Tile::kThreads, Tile::smem_bytes(2), stream>>>(p, sched, num_vchunks);
      FLASHGATE_CHECK_LAUNCH("forward_kernel");
      return;
    }
  }
  one<<<static_cast<unsigned>(items), Tile::kThreads, Tile::smem_bytes(1), stream>>>(p, sched, num_vchunks);
  FLASHGATE_CHECK_LAUNCH("forward_kernel");
}

}  // namespace flashgate::cuda
