// The Hopper forward's consumer warpgroups: their turns at the tensor cores and the per-block verbs (issue the
// scores, issue P V, the online softmax, rescale, the epilogue) that forward_kernel.cuh's main loop strings together.
#pragma once

#include <cmath>
#include <cstdint>

#include "cuda/common/attention_params.h"
#include "cuda/common/element.h"
#include "cuda/common/online_softmax.h"
#include "cuda/common/visibility.h"
#include "cuda/hopper/forward.h"
#include "cuda/hopper/forward_work.cuh"
#include "cuda/ptx/fast_math.h"
#include "cuda/ptx/ldmatrix.h"
#include "cuda/ptx/mma.h"
#include "cuda/ptx/tma.h"
#include "cuda/ptx/warpgroup.h"
#include "cuda/ptx/wgmma.h"

namespace flashgate::cuda::hopper {

#if defined(__CUDACC__)
namespace detail {

// Two consumer warpgroups take turns at the tensor cores (ping-pong; named barrier 1 + i is consumer i's turn):
// each issues its GEMMs in its turn and passes the turn on, so one's softmax runs under the other's GEMMs.
// Consumer 0 goes first; at the end it takes one more turn, the pass of consumer 1's last, so that every barrier
// ends complete. Three consumers interleave well enough on their own (measured: turns cost them 1-3%).
template <int kConsumers>
class Turns {
 public:
  __device__ __forceinline__ explicit Turns(int me) : me_(me) {
    if (kOn && me_ == 1) ptx::named_barrier_arrive(kFirst, 256);
  }
  __device__ __forceinline__ void take() const {
    if (kOn) ptx::named_barrier_sync(kFirst + me_, 256);
  }
  __device__ __forceinline__ void pass() const {
    if (kOn) ptx::named_barrier_arrive(kFirst + (1 - me_), 256);
  }
  __device__ __forceinline__ void finish() const {
    if (me_ == 0) take();
  }

 private:
  static constexpr bool kOn = kConsumers == 2;
  static constexpr int kFirst = 1;
  const int me_;
};

// What of the output rows leaves through the staging rows (ForwardTile::kStageO, kStageCodes): o where its rows
// take 16-byte chunks, the residual codes where asked and their rows take 8-byte chunks.
struct OutputPlan {
  bool o = false, codes = false;
  __device__ __forceinline__ bool any() const { return o || codes; }
};
template <class Tile>
__device__ __forceinline__ OutputPlan output_plan(const AttentionParams& a) {
  return {Tile::kStageO && a.o_width >= 16, Tile::kStageCodes && a.o_residual.data && a.o_residual_width >= 8};
}

// A consumer warpgroup's verbs. kCol0: the first output column it accumulates (split V: consumer 1 takes the upper
// half; it only issues P V from shared memory and stores, consumer 0 does the rest).
template <class T, int kK, int kV, int kCol0 = 0>
class Consumer {
  using Tile = ForwardTile<kK, kV>;
  static constexpr int BN = Tile::BN;
  static constexpr int kOCols = Tile::kOutCols;
  static constexpr int kO = kOCols / 2;  // output accumulators per thread
  // The lazy rescale (SoftmaxRow::rescale_lazily) pays where the output accumulators outnumber the scores (256 /
  // 256 and split V: 128 against 40 / 32); at 64, 128 and 192 / 128 the warp's vote and branch cost more than the
  // multiplies.
  static constexpr bool kLazy = kO > BN / 2;
  // Staged o rows go by stmatrix (stage_rows) with two consumers; D64's three keep one 4-byte store a pair of values
  // (stmatrix there: B2 H32 T8192 458 -> 417 TFLOP/s, the 128 / 128 rows +0.5-3%; docs/perf-notes.md).
  static constexpr bool kStageByMatrix = Tile::kConsumers == 2;

 public:
  static constexpr int kS = BN / 2;  // score accumulators per thread (m64nBN)
  using Probs = uint32_t[BN / 16][4];

  __device__ __forceinline__ Consumer(const AttentionParams& a, const Work& w, int wg, const T* sq)
      : p_(a), batch_(static_cast<int>(w.seq.batch)), start_(static_cast<int>(w.seq.start)), len_(w.seq.len),
        h_(w.h), row0_(w.m0 + 64 * (Tile::kSplitV ? 0 : wg)), sq_(sq + 64 * (Tile::kSplitV ? 0 : wg) * 64),
        lane_(threadIdx.x % 32), warp_(ptx::warpgroup_thread() / 32),
        gc_(a.has_gate ? a.gc_row(w.seq.batch, w.h) + w.seq.start : nullptr),
        g_ref_(gc_ ? gc_[w.m0] : 0.f) {
#pragma unroll
    for (int r = 0; r < 2; ++r) rows_[r] = SoftmaxRow{};
  }

  // The output accumulators start with the first P V (issue_pv's `accumulate` false); an item without key blocks
  // zeroes them instead.
  __device__ __forceinline__ void zero_output() {
#pragma unroll
    for (int i = 0; i < kO; ++i) o_[i] = 0.f;
  }

  __device__ __forceinline__ bool gated() const { return gc_ != nullptr; }

  // Issues S = Q K^T for the key tile `k` as one wgmma group, each k-step's descriptors from the two bases by an add.
  // Split V's 32 steps would have them hoisted out of the block loop (128 registers): there the bases are made
  // opaque per call.
  __device__ __forceinline__ void issue_scores(float (&s)[kS], const T* k) const {
    uint64_t q0 = ptx::k_major_descriptor(sq_, Tile::BM, 0), k0 = ptx::k_major_descriptor(k, BN, 0);
    if constexpr (Tile::kSplitV) q0 = ptx::opaque(q0), k0 = ptx::opaque(k0);
#pragma unroll
    for (int step = 0; step < kK / 16; ++step)
      ptx::Wgmma<T, BN, 0>::ss(s, ptx::descriptor_step(q0, Tile::BM, step), ptx::descriptor_step(k0, BN, step),
                               step > 0);
    ptx::wgmma_commit();
  }

  // Issues O += P V for the value tile `v` as one wgmma group (V read transposed from its TMA layout; this
  // consumer's columns from kCol0); O = P V where not `accumulate` (the item's first block).
  __device__ __forceinline__ void issue_pv(const Probs& pa, const T* v, bool accumulate) {
    const uint64_t v0 = ptx::mn_major_descriptor(my_columns(v), BN, 0);
#pragma unroll
    for (int t = 0; t < BN / 16; ++t)
      ptx::Wgmma<T, kOCols, 1>::rs(o_, pa[t], ptx::mn_major_step(v0, t), accumulate || t > 0);
    ptx::wgmma_commit();
  }

  // Split V, consumer 1: the same with P from the shared buffer `p` (store_probs' layout).
  __device__ __forceinline__ void issue_pv_shared(const T* p, const T* v, bool accumulate) {
    const uint64_t p0 = ptx::k_major_descriptor(p, Tile::BM, 0), v0 = ptx::mn_major_descriptor(my_columns(v), BN, 0);
#pragma unroll
    for (int t = 0; t < BN / 16; ++t)
      ptx::Wgmma<T, kOCols, 1>::ss(o_, ptx::descriptor_step(p0, Tile::BM, t), ptx::mn_major_step(v0, t),
                                   accumulate || t > 0);
    ptx::wgmma_commit();
  }

  // Split V, consumer 0: P (the operand registers) into the shared buffer `tile`, K-major in one 128-byte swizzled
  // block, where consumer 1's wgmmas read it (the fence orders the stores before them).
  __device__ __forceinline__ void store_probs(const Probs& pa, T* tile) const {
    unsigned char* bytes = reinterpret_cast<unsigned char*>(tile);
    const int g = lane_ / 4, c = lane_ % 4;
#pragma unroll
    for (int t = 0; t < BN / 16; ++t)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int row = warp_ * 16 + g + 8 * (e & 1), chunk = 2 * t + (e >> 1);
        *reinterpret_cast<uint32_t*>(bytes + ptx::swizzled_chunk(row, chunk) + 4 * c) = pa[t][e];
      }
    ptx::fence_async_shared();
  }

  // This thread's first row in the tile (its second is 8 below), where split V's per-row values are handed over.
  __device__ __forceinline__ int tile_row() const { return warp_ * 16 + lane_ / 4; }

  // After a wait: the accumulators are final from here on.
  __device__ __forceinline__ void hold_output() { ptx::wgmma_hold(o_); }

  // Scores of key block n0.. -> unnormalised probabilities in place (fp32), the row sums updated. Returns, per
  // row half, the factor the output accumulated so far must be scaled by (rescale_output, once P V is done).
  // Scores reach exp2 as fmaf(s, exp_scale, -max); with a gate (`gate`: the block's staged key terms) or a
  // non-positive scale they move into the exp2 domain first (portable/forward_kernel.cuh explains the split of
  // the gate term at g_ref).
  __device__ __forceinline__ float2 softmax(float (&s)[kS], int n0, bool masked, const float* gate) {
    const int g = lane_ / 4, c = lane_ % 4;
    if (prescaled()) {
#pragma unroll
      for (int j = 0; j < BN / 8; ++j) {
        const float2 gk2 = gate ? *reinterpret_cast<const float2*>(gate + 8 * j + 2 * c) : make_float2(0.f, 0.f);
        s[4 * j + 0] = fmaf(s[4 * j + 0], p_.scale_log2, -gk2.x);
        s[4 * j + 1] = fmaf(s[4 * j + 1], p_.scale_log2, -gk2.y);
        s[4 * j + 2] = fmaf(s[4 * j + 2], p_.scale_log2, -gk2.x);
        s[4 * j + 3] = fmaf(s[4 * j + 3], p_.scale_log2, -gk2.y);
      }
    }
    // Rows sit key_shift after their keys (a slice pair; 0 otherwise). Keys past key_end end a slice pair's keys; a
    // sequence's keys past its own end meet only its rows past the end (causal), which are not stored.
    if (masked) {
      const unsigned bound = distance_bound(p_.window);
      const int d0 = (row0_ + warp_ * 16 + g + p_.key_shift) - (n0 + 2 * c);
#pragma unroll
      for (int j = 0; j < BN / 8; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int d = d0 + 8 * (e / 2) - 8 * j - (e % 2);
          const int col = n0 + 8 * j + 2 * c + (e % 2);
          if (!visible_at_distance(d, bound) || col >= p_.key_end) s[4 * j + e] = -INFINITY;
        }
    }
    const float exp_scale = prescaled() ? 1.f : p_.scale_log2;
    float factor[2];
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      float tile_max = -INFINITY;
#pragma unroll
      for (int j = 0; j < BN / 8; ++j) tile_max = fmaxf(tile_max, fmaxf(s[4 * j + 2 * half], s[4 * j + 2 * half + 1]));
      const float tile_max2 = quad_max(tile_max) * exp_scale;
      factor[half] = kLazy ? rows_[half].rescale_lazily(tile_max2) : rows_[half].rescale(tile_max2);
      const float off = rows_[half].exp_offset();
#pragma unroll
      for (int j = 0; j < BN / 8; ++j) {
        float& x0 = s[4 * j + 2 * half];
        float& x1 = s[4 * j + 2 * half + 1];
        x0 = ptx::exp2_ftz(fmaf(x0, exp_scale, -off));
        x1 = ptx::exp2_ftz(fmaf(x1, exp_scale, -off));
        rows_[half].sum += x0 + x1;
      }
    }
    return make_float2(factor[0], factor[1]);
  }

  // Lazily (kLazy), a warp whose rows all kept their max (factor 1) skips the multiplies.
  __device__ __forceinline__ void rescale_output(float2 factor) {
    if constexpr (kLazy)
      if (!__any_sync(0xffffffffu, factor.x != 1.f || factor.y != 1.f)) return;
#pragma unroll
    for (int j = 0; j < kOCols / 8; ++j) {
      o_[4 * j + 0] *= factor.x, o_[4 * j + 1] *= factor.x;
      o_[4 * j + 2] *= factor.y, o_[4 * j + 3] *= factor.y;
    }
  }

  // Score columns 16t..16t+15 are P V's k-step t.
  __device__ __forceinline__ static void to_operand(const float (&s)[kS], Probs& pa) {
    ptx::accumulator_to_operand<T>(s, pa);
  }

  // Normalises the output rows and stores them (and their residual codes) and lse. Split V: consumer 0 also hands
  // each row's output scale to consumer 1 (`o_scale`, by tile row), which stores its columns with them
  // (epilogue_with).
  __device__ __forceinline__ void epilogue(float* o_scale = nullptr) {
    finish_rows([&](int half, int row, float scale) { write_row<false, false>(half, row, scale, nullptr); },
                o_scale);
  }

  // The same with what `plan` stages written to this consumer's staging rows `stage`, for the storer warps. Each
  // combination is its own code, so that every store is a plain shared or global one.
  __device__ __forceinline__ void epilogue(OutputPlan plan, unsigned char* stage) {
    if constexpr (Tile::kStageO && kStageByMatrix) {
      if (plan.o && plan.codes) return stage_rows<CodesTo::stage>(stage);
      if (plan.o && !p_.o_residual.data) return stage_rows<CodesTo::none>(stage);
      if (plan.o) return stage_rows<CodesTo::global>(stage);
    } else if constexpr (Tile::kStageO) {
      if (plan.o && plan.codes)
        return finish_rows([&](int half, int row, float s) { write_row<true, true>(half, row, s, stage); });
      if (plan.o) return finish_rows([&](int half, int row, float s) { write_row<true, false>(half, row, s, stage); });
    }
    if constexpr (Tile::kStageCodes)
      if (plan.codes)
        return finish_rows([&](int half, int row, float s) { write_row<false, true>(half, row, s, stage); });
    epilogue();
  }

  __device__ __forceinline__ void epilogue_with(const float* o_scale) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int row = row0_ + tile_row() + 8 * half;
      if (row < len_) write_row<false, false>(half, row, o_scale[tile_row() + 8 * half], nullptr);
    }
  }

 private:
  // This consumer's first value column block of the V tile `v` ([kV/64][BN][64]).
  __device__ __forceinline__ static const T* my_columns(const T* v) { return v + kCol0 / 64 * BN * 64; }

  // Each row's end (online_softmax.h) and its lse; `out(half, row, scale)` writes the rows in the sequence.
  template <class Out>
  __device__ __forceinline__ void finish_rows(Out&& out, float* o_scale = nullptr) {
    const float sink = p_.has_sink ? p_.sink[h_] : 0.f;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int row = row0_ + tile_row() + 8 * half;  // local position
      float max2 = rows_[half].max2;
      if (gc_ && row < len_ && max2 != -INFINITY) max2 += (gc_[row] - g_ref_) * kLog2e;
      const RowResult r = finish_row(max2, quad_sum(rows_[half].sum), p_.has_sink, sink);
      if (o_scale && lane_ % 4 == 0) o_scale[tile_row() + 8 * half] = r.o_scale;
      if (row >= len_) continue;
      if (p_.has_lse && lane_ % 4 == 0) *p_.lse.template row<float>(batch_, start_ + row, h_) = r.lse;
      out(half, row, r.o_scale);
    }
  }

  // Where stage_rows puts the residual codes: nowhere (none asked), into the staging rows, or to global memory.
  enum class CodesTo { none, stage, global };

  // Both of this thread's rows, scaled, into the staging rows `stage` (o by stmatrix: a warp's two row halves of two
  // 8-column blocks an instruction) and their residual codes (kCodes). Rows past the sequence stage zeros, which the
  // storers skip.
  template <CodesTo kCodes>
  __device__ __forceinline__ void stage_rows(unsigned char* stage) {
    float scale[2] = {0.f, 0.f};
    finish_rows([&](int half, int, float s) { scale[half] = s; });
    static_assert(kOCols % 16 == 0, "stmatrix stores two 8-column blocks");
    const int m = lane_ / 8;  // the matrix whose row this lane addresses: row half m % 2, block m / 2 of a pair
    unsigned char* const rows = stage + (warp_ * 16 + lane_ % 8 + 8 * (m % 2)) * Tile::kOutPitch + 16 * (m / 2);
    const int col = kCol0 + 2 * (lane_ % 4);
    int8_t* res[2] = {nullptr, nullptr};
    if constexpr (kCodes == CodesTo::global)
      for (int half = 0; half < 2; ++half) {
        const int row = row0_ + tile_row() + 8 * half;
        if (p_.o_residual.data && row < len_)
          res[half] = p_.o_residual.template row<int8_t>(batch_, start_ + row, h_) + col;
      }
    const bool pairs = p_.o_residual_width >= 2;
#pragma unroll
    for (int j = 0; j < kOCols / 8; j += 2) {
      uint32_t packed[4];  // matrices (half 0, j), (half 1, j), (half 0, j + 1), (half 1, j + 1)
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const int jj = j + q / 2, half = q % 2;
        const float2 x = {o_[4 * jj + 2 * half] * scale[half], o_[4 * jj + 2 * half + 1] * scale[half]};
        packed[q] = ptx::pack2<T>(x.x, x.y);
        if constexpr (kCodes == CodesTo::stage)
          store_residual_pair<T>(reinterpret_cast<int8_t*>(stage + Tile::codes_at(tile_row() + 8 * half, col + 8 * jj)),
                                 x, packed[q], true);
        else if (kCodes == CodesTo::global && res[half] && kCol0 + 8 * jj < p_.V)
          store_residual_pair<T>(res[half] + 8 * jj, x, packed[q], pairs);
      }
      ptx::stmatrix_x4(rows + 16 * j, packed);
    }
  }

  // Output row `row` (local position; this thread's half `half`), scaled, into its columns from kCol0, and its
  // residual codes where asked: o into the staging rows `stage` (kO) or to global memory, the codes likewise
  // (kCodes; Tile::codes_at says where in the staging rows).
  template <bool kO, bool kCodes>
  __device__ __forceinline__ void write_row(int half, int row, float scale, unsigned char* stage) {
    const int col = kCol0 + 2 * (lane_ % 4), r = tile_row() + 8 * half;
    T* dst = p_.o.template row<T>(batch_, start_ + row, h_) + col;
    int8_t* res = p_.o_residual.data ? p_.o_residual.template row<int8_t>(batch_, start_ + row, h_) + col : nullptr;
    const bool pairs = p_.o_residual_width >= 2;
#pragma unroll
    for (int j = 0; j < kOCols / 8; ++j)
      if (kCol0 + 8 * j < p_.V) {  // columns past V are the bucket's padding
        const float2 x = {o_[4 * j + 2 * half] * scale, o_[4 * j + 2 * half + 1] * scale};
        const uint32_t packed = ptx::pack2<T>(x.x, x.y);
        if constexpr (kO) *reinterpret_cast<uint32_t*>(stage + r * Tile::kOutPitch + 2 * (col + 8 * j)) = packed;
        else *reinterpret_cast<uint32_t*>(dst + 8 * j) = packed;
        if constexpr (kCodes)
          store_residual_pair<T>(reinterpret_cast<int8_t*>(stage + Tile::codes_at(r, col + 8 * j)), x,
                                 packed, true);
        else if (res)
          store_residual_pair<T>(res + 8 * j, x, packed, pairs);
      }
  }

  __device__ __forceinline__ bool prescaled() const { return gc_ != nullptr || !(p_.scale_log2 > 0.f); }

  const AttentionParams& p_;
  const int batch_, start_, len_;  // the sequence (32-bit: the host refuses T of 2^31 and more)
  const int h_;
  const int row0_;  // this warpgroup's first query row (local position)
  const T* const sq_;
  const int lane_, warp_;
  const float* const gc_;
  const float g_ref_;
  SoftmaxRow rows_[2];  // rows g and g + 8 of this thread's warp
  float o_[kO];
};

}  // namespace detail
#endif  // __CUDACC__

}  // namespace flashgate::cuda::hopper
