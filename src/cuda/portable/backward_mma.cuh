// Building blocks of the backward's MMA kernels (mma.sync m16n8k16, fp32 accumulation): operand fragments
// from shared memory, the per-warp score / gradient step shared by the key-major and the query-major
// kernel, and fragment stores. Fragment layout: see cuda/ptx/mma.h (g = lane / 4, c = lane % 4).
//
// Shared tiles are row-major with rows padded by 8 elements (16 bytes), which keeps every ldmatrix
// phase (8 rows x 16 bytes) on distinct banks for the row lengths used here.
#pragma once

#include <cstdint>
#include <type_traits>

#include "cuda/common/anchored_gate.cuh"
#include "cuda/common/element.h"
#include "cuda/common/online_softmax.h"
#include "cuda/common/tile_scheduler.h"
#include "cuda/common/visibility.h"
#include "cuda/portable/backward_tiles.h"
#include "cuda/ptx/fast_math.h"
#include "cuda/ptx/ldmatrix.h"
#include "cuda/ptx/mma.h"
#include "cuda/ptx/red.h"

namespace flashgate::cuda::bwd {

// ---- operand fragments ----------------------------------------------------------------------------------
// A thread's ldmatrix row address for a warp's block of a row-major tile (ldsm_*); every m16/n16 tile and
// k-step of the block is a compile-time byte offset from it (tile_offset). Addr is its form: a 32-bit shared
// byte address (uint32_t: ptxas folds the offsets into the LDSM immediates, so a kernel may form it once per
// CTA and keep it) or a generic byte pointer (SmemBytes: converted at each ldmatrix, cheap to re-form from a
// tile pointer where registers are too tight to keep addresses).
using SmemBytes = const unsigned char*;

// Byte offset of element (row, col) of a row-major tile of `stride` elements per row.
template <class T>
__device__ __forceinline__ constexpr uint32_t tile_offset(int row, int col, int stride) {
  return static_cast<uint32_t>((row * stride + col) * static_cast<int>(sizeof(T)));
}

// `tile` + `offset` bytes as an Addr.
template <class Addr>
__device__ __forceinline__ Addr smem_at(const void* tile, uint32_t offset) {
  if constexpr (std::is_same_v<Addr, SmemBytes>) return static_cast<SmemBytes>(tile) + offset;
  else return ptx::smem_addr(tile) + offset;
}

// A (16 x 16) fragments at rows m0.. of a row-major [m][k] tile (ldmatrix_x4).
template <class Addr, class T>
__device__ __forceinline__ Addr ldsm_a(const T* tile, int stride, int m0, int lane) {
  return smem_at<Addr>(tile, tile_offset<T>(m0 + lane % 16, (lane / 16) * 8, stride));
}
// A (16 x 16) fragments = the transpose of a row-major [k][m] tile, at m0.. (ldmatrix_x4_trans).
template <class Addr, class T>
__device__ __forceinline__ Addr ldsm_a_trans(const T* tile, int stride, int m0, int lane) {
  return smem_at<Addr>(tile, tile_offset<T>(lane % 8 + (lane / 16) * 8, m0 + ((lane / 8) % 2) * 8, stride));
}
// B of n8 tile pairs from n0.. of a row-major [n][k] tile (ldmatrix_x4: b[0..1] for n0, b[2..3] for n0+8;
// ldmatrix_x2 of one n8 tile reads lanes 0..15 of the same addresses).
template <class Addr, class T>
__device__ __forceinline__ Addr ldsm_b(const T* tile, int stride, int n0, int lane) {
  return smem_at<Addr>(tile, tile_offset<T>(n0 + lane % 8 + (lane / 16) * 8, ((lane / 8) % 2) * 8, stride));
}
// B of n8 tile pairs from n0.. of a row-major [k][n] tile (ldmatrix_x4_trans).
template <class Addr, class T>
__device__ __forceinline__ Addr ldsm_b_trans(const T* tile, int stride, int n0, int lane) {
  return smem_at<Addr>(tile, tile_offset<T>(lane % 8 + ((lane / 8) % 2) * 8, n0 + (lane / 16) * 8, stride));
}

template <class T>
__device__ __forceinline__ void mma_pair(float (&d0)[4], float (&d1)[4], const uint32_t (&a)[4], const uint32_t (&b)[4]) {
  const uint32_t b0[2] = {b[0], b[1]}, b1[2] = {b[2], b[3]};
  ptx::mma_16816<T>(d0, a, b0);
  ptx::mma_16816<T>(d1, a, b1);
}

template <int N>
__device__ __forceinline__ void zero(float (&x)[N][4]) {
#pragma unroll
  for (int i = 0; i < N; ++i) x[i][0] = x[i][1] = x[i][2] = x[i][3] = 0.f;
}
template <int M, int N>
__device__ __forceinline__ void zero(float (&x)[M][N][4]) {
#pragma unroll
  for (int m = 0; m < M; ++m) zero(x[m]);
}

// ---- warp GEMMs -----------------------------------------------------------------------------------------
// A warp computes MT x NT fragments (MT m16 tiles, NT n8 tiles) from the ldsm_* addresses of its block. Per
// k-step it fetches the MT A fragments once and each B pair once, then issues MT * 2 independent MMAs per B
// pair, so consecutive MMAs never wait on each other and every fetched fragment feeds several MMAs. Loops
// over k unrolled by two advance one register per operand every two k-steps; the rest are immediates. (A
// whole unroll with first-step writes instead of zeroing spills even at D128 without row sums.)

// acc (MT*16 x NT*8) = A * B^T over k_steps * 16 columns: A row-major [m][k] at `a` (ldsm_a), B row-major
// [n][k] at `b` (ldsm_b) (S = Q K^T, dP = dO V^T). kSteps > 0: k_steps is that compile-time count, unrolled
// by two; 0: a run-time loop, one k-step at a time.
template <class T, int MT, int NT, int kSteps, bool kPeelFirst = false, class Addr>
__device__ __forceinline__ void gemm_abt(float (&acc)[MT][NT][4], Addr a, Addr b, int stride, int k_steps) {
  auto k_step = [&](int kk) {
    uint32_t af[MT][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) ptx::ldmatrix_x4(af[mt], a + tile_offset<T>(mt * 16, kk * 16, stride));
#pragma unroll
    for (int np = 0; np < NT / 2; ++np) {
      uint32_t bf[4];
      ptx::ldmatrix_x4(bf, b + tile_offset<T>(np * 16, kk * 16, stride));
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) mma_pair<T>(acc[mt][2 * np], acc[mt][2 * np + 1], af[mt], bf);
    }
    if constexpr (NT % 2 == 1) {
      uint32_t bf[2];
      ptx::ldmatrix_x2(bf, b + tile_offset<T>((NT - 1) * 8, kk * 16, stride));
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) ptx::mma_16816<T>(acc[mt][NT - 1], af[mt], bf);
    }
  };
  zero(acc);
  if constexpr (kSteps > 0) {
    // kPeelFirst: the first k-step outside the loop, so that its MMAs take a zero C operand instead of
    // registers zeroed first (CS2R); it costs registers (TileConfig::kPeelScorePasses says where it fits).
    if constexpr (kPeelFirst) k_step(0);
#pragma unroll 2
    for (int kk = kPeelFirst ? 1 : 0; kk < kSteps; ++kk) k_step(kk);
  } else {
#pragma unroll 1
    for (int kk = 0; kk < k_steps; ++kk) k_step(kk);
  }
}

// acc (MT*16 x NT*8) += A^T * B over K_ROWS rows of k: A row-major [k][m] at `a` (ldsm_a_trans; P, dS
// stored by query row), B row-major [k][n] at `b` (ldsm_b_trans; dO, Q) whose first column is n0. kGuard:
// column pairs at or past `n_limit` are skipped (beyond a head dim narrower than the bucket); without it the
// loop is straight-line code, so the compiler can issue the next fragments' ldmatrix while the MMAs run.
template <class T, int MT, int NT, int K_ROWS, bool kGuard, class Addr>
__device__ __forceinline__ void gemm_atb(float (&acc)[MT][NT][4], Addr a, int a_stride, Addr b, int b_stride,
                                         int n0, int n_limit) {
  static_assert(NT % 2 == 0, "column pairs");
#pragma unroll
  for (int kk = 0; kk < K_ROWS / 16; ++kk) {
    uint32_t af[MT][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) ptx::ldmatrix_x4_trans(af[mt], a + tile_offset<T>(kk * 16, mt * 16, a_stride));
#pragma unroll
    for (int np = 0; np < NT / 2; ++np) {
      if (kGuard && n0 + np * 16 >= n_limit) break;
      uint32_t bf[4];
      ptx::ldmatrix_x4_trans(bf, b + tile_offset<T>(kk * 16, np * 16, b_stride));
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) mma_pair<T>(acc[mt][2 * np], acc[mt][2 * np + 1], af[mt], bf);
    }
  }
}

// acc (MT*16 x NT*8) += A * B over K_ROWS: A row-major [m][k] at `a` (ldsm_a; dS), B row-major [k][n] at
// `b` (ldsm_b_trans; K) whose first column is n0; kGuard as in gemm_atb.
template <class T, int MT, int NT, int K_ROWS, bool kGuard, class Addr>
__device__ __forceinline__ void gemm_ab(float (&acc)[MT][NT][4], Addr a, int a_stride, Addr b, int b_stride,
                                        int n0, int n_limit) {
  static_assert(NT % 2 == 0, "column pairs");
#pragma unroll 2
  for (int kk = 0; kk < K_ROWS / 16; ++kk) {
    uint32_t af[MT][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) ptx::ldmatrix_x4(af[mt], a + tile_offset<T>(mt * 16, kk * 16, a_stride));
#pragma unroll
    for (int np = 0; np < NT / 2; ++np) {
      if (kGuard && n0 + np * 16 >= n_limit) break;
      uint32_t bf[4];
      ptx::ldmatrix_x4_trans(bf, b + tile_offset<T>(kk * 16, np * 16, b_stride));
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) mma_pair<T>(acc[mt][2 * np], acc[mt][2 * np + 1], af[mt], bf);
    }
  }
}

// ---- the score / gradient step --------------------------------------------------------------------------

// What a thread needs about its rows of a score block: rows g and g+8 of each of the warp's MT m16 tiles.
// P carries PScale<T>'s factor (element.h), folded into the term; D carries its inverse, so that dS = P (dP - D)
// comes out unscaled, and the row sums E and mass are scaled back where they are stored.
template <int MT>
struct RowTerms {
  float term[MT][2];  // (Gc_i - lse_i) log2 e + log2 factor; -inf past the sequence or without a visible key
  float d[MT][2];     // D_i / factor, D_i = o_i·do_i (0 past the sequence)
};

// Rows i_first + 16*mt + {0, 8} (local positions) of query head h; `base` = row_index(b, h, seq.start).
template <class T, int MT, class P>
__device__ __forceinline__ RowTerms<MT> load_row_terms(const P& p, int64_t base, const float* gc, int i_first,
                                                       int len) {
  RowTerms<MT> r;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int hi = 0; hi < 2; ++hi) {
      const int i = i_first + 16 * mt + 8 * hi;
      r.term[mt][hi] = -INFINITY;
      r.d[mt][hi] = 0.f;
      if (i < len) {
        const float lse = p.lse[base + i];
        if (lse != -INFINITY) r.term[mt][hi] = PScale<T>::plus_log2(((gc ? gc[i] : 0.f) - lse) * kLog2e);
        r.d[mt][hi] = p.D[base + i] * PScale<T>::kInv;
      }
    }
  return r;
}

// Gate terms Gc_j * log2 e of a thread's columns j_first + nt*8 + {0, 1} (0 without a gate or past len).
template <int NT>
__device__ __forceinline__ void load_col_terms(float (&col)[NT][2], const float* gc, int j_first, int len) {
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int lo = 0; lo < 2; ++lo) {
      const int j = j_first + nt * 8 + lo;
      col[nt][lo] = (gc && j < len) ? gc[j] * kLog2e : 0.f;
    }
}

// This thread's parts of the row sums E_i = sum_j P dP and mass_i = sum_j P (rows of RowTerms), times the factor.
template <int MT>
struct RowSums {
  float e[MT][2] = {};
  float mass[MT][2] = {};
};

// Turns S (scaled scores before the gate) into P = exp(s - lse) in place, for a thread's fragments whose
// rows start at key position pos_first and columns at j_first. `masked`: apply the visibility rule per
// element (blocks on the diagonal, the window edge or the sequence end); one branch for the whole block,
// selects inside it, so the exponentials stay one straight-line run. exp2_ftz as in the forward (the lse
// came from it; probabilities below 2^-126 are zero in bf16/fp16 anyway). A sequence's own keys: positions are the
// rows' (pos_first = i_first, pos_len = len), key_end has no bound. A slice pair (visible()'s slice form): rows at
// i + shift (pos_len = len + shift), and the keys end at key_end (Tk): a separate pass zeroes the columns past it,
// taken only in a slice's last key tile (folding that compare into the per-element rule spilled the D64 kernel).
template <bool kKeyEnd, int MT, int NT>
__device__ __forceinline__ void probs(float (&s)[MT][NT][4], const RowTerms<MT>& rows, const float (&col)[NT][2],
                                      float scale_log2, bool masked, int pos_first, int j_first, int pos_len,
                                      int window, int key_end) {
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int r = 0; r < 4; ++r)
        s[mt][nt][r] = ptx::exp2_ftz(fmaf(s[mt][nt][r], scale_log2, rows.term[mt][r / 2] - col[nt][r % 2]));
  if (!masked) return;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int r = 0; r < 4; ++r)
        if (!visible(pos_first + 16 * mt + 8 * (r / 2), j_first + nt * 8 + r % 2, pos_len, window))
          s[mt][nt][r] = 0.f;
  if constexpr (kKeyEnd) {
    if (j_first + NT * 8 <= key_end) return;  // (a slice pair's last key tile)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int r = 0; r < 4; ++r)
        if (j_first + nt * 8 + r % 2 >= key_end)
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) s[mt][nt][r] = 0.f;
  }
}

// Turns dP into dS = P (dP - D) in place for the NP n8 tiles of dp from n_first (P's tiles, the whole dp
// or a column pass of it), and with kSums adds this thread's parts of E and the mass to `sums`.
template <class T, bool kSums = true, int MT, int NT, int NP>
__device__ __forceinline__ void grads(float (&dp)[MT][NT][4], const float (&p)[MT][NP][4], int n_first,
                                      const RowTerms<MT>& rows, RowSums<MT>& sums) {
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < NP; ++nt)
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const int hi = r / 2;
        const float pr = p[mt][nt][r];
        float& x = dp[mt][n_first + nt][r];
        if (kSums) {
          sums.e[mt][hi] += pr * x;
          sums.mass[mt][hi] += pr;
        }
        x = pr * PScale<T>::dp_minus_d(x, rows.d[mt][hi]);
      }
}

// Stores a thread's fragments (rows m0 + 16*mt + g, +8; columns n0 + nt*8 + 2c, +1) into a row-major shared
// tile as T (16-bit pairs, or fp32 pairs where T is float).
template <class T, int MT, int NT>
__device__ __forceinline__ void store_fragment(T* tile, int stride, const float (&x)[MT][NT][4], int m0, int n0,
                                               int lane) {
  const int g = lane / 4, c = lane % 4;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      T* at = tile + (m0 + mt * 16 + g) * stride + n0 + nt * 8 + 2 * c;
      if constexpr (std::is_same_v<T, float>) {
        *reinterpret_cast<float2*>(at) = make_float2(x[mt][nt][0], x[mt][nt][1]);
        *reinterpret_cast<float2*>(at + 8 * stride) = make_float2(x[mt][nt][2], x[mt][nt][3]);
      } else {
        *reinterpret_cast<uint32_t*>(at) = ptx::pack2<T>(x[mt][nt][0], x[mt][nt][1]);
        *reinterpret_cast<uint32_t*>(at + 8 * stride) = ptx::pack2<T>(x[mt][nt][2], x[mt][nt][3]);
      }
    }
}

// Writes a thread's fragments of a [rows][cols] result to global rows (`row_ptr(r)` gives row r's start),
// multiplied by `scale`, for rows < valid_rows and columns < valid_cols. Pairs go out as one 4-byte store
// where the row start allows (`width` = its byte alignment).
template <class T, int MT, int NT, class RowPtr>
__device__ __forceinline__ void store_fragment_global(RowPtr row_ptr, const float (&x)[MT][NT][4], float scale,
                                                      int m0, int n0, int valid_rows, int valid_cols, int width,
                                                      int lane) {
  const int g = lane / 4, c = lane % 4;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int hi = 0; hi < 2; ++hi) {
      const int r = m0 + mt * 16 + g + 8 * hi;
      if (r >= valid_rows) continue;
      T* row = row_ptr(r);
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        const int col = n0 + nt * 8 + 2 * c;
        const float v0 = scale * x[mt][nt][2 * hi], v1 = scale * x[mt][nt][2 * hi + 1];
        if constexpr (sizeof(T) == 2) {
          if (col + 1 < valid_cols && width >= 4) {
            *reinterpret_cast<uint32_t*>(row + col) = ptx::pack2<T>(v0, v1);
            continue;
          }
        }
        if (col < valid_cols) row[col] = from_float<T>(v0);
        if (col + 1 < valid_cols) row[col + 1] = from_float<T>(v1);
      }
    }
}

// dq_acc += a warp's MT x NT fp32 accumulator fragments of dQ / scale: local rows i_first.. (16-aligned) of
// the sequence whose row 0 is row0 (dq_row) and which has len rows, columns col.. (8-aligned) of rows K16
// floats long, n8 tiles at or past K16 skipped when kGuardCols. Unordered atomics in dq_acc_offset's
// layout: one 16-byte reduction per lane and n8 tile (sm_90; four 4-byte atomics on sm_80) adds 512
// consecutive bytes; m16 tiles past len are skipped (their rows are another sequence's).
template <int MT, int NT, bool kGuardCols>
__device__ __forceinline__ void add_dq_fragment(float* dq_acc, int64_t row0, int i_first, int col, int K16,
                                                const float (&x)[MT][NT][4], int len, int lane) {
  float* at = dq_acc + dq_acc_offset(row0, i_first, col, K16) + 4 * lane;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    if (i_first + mt * 16 >= len) break;
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      if (kGuardCols && col + nt * 8 >= K16) break;
      float* to = at + mt * 16 * K16 + nt * 128;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
      ptx::red_add_v4_f32(to, make_float4(x[mt][nt][0], x[mt][nt][1], x[mt][nt][2], x[mt][nt][3]));
#else
#pragma unroll
      for (int e = 0; e < 4; ++e) atomicAdd(to + e, x[mt][nt][e]);
#endif
    }
  }
}

}  // namespace flashgate::cuda::bwd
