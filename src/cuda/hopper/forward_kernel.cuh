// The Hopper forward (sm_90a) for fp16/bf16 with head dims of 64 or 128: a CTA owns 128 query rows of one head.
// Warpgroup 0 produces: one elected lane loads Q once and streams K/V blocks of 128 keys through a two-stage
// ring of shared-memory buffers with TMA (full barriers carry the bytes, empty barriers the consumers' release).
// Warpgroups 1 and 2 consume, 64 query rows each: S = Q K^T by wgmma from shared memory, the online softmax in
// registers (exp2 domain, masks only on blocks that need them, the gate's terms, the sink at the end), P kept in
// registers as the A operand of O += P V (V read transposed from its TMA layout). setmaxnreg moves registers from
// the producer to the consumers.
//
// Shared memory: Q [kD/64][128 rows][64], then per stage K and V [kD/64][128 keys][64], every 64-column block
// 128-byte swizzled by TMA and 1024-byte aligned (cuda/ptx/wgmma.h has the layouts).
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "cuda/common/attention_params.h"
#include "cuda/common/online_softmax.h"
#include "cuda/common/sequence.h"
#include "cuda/common/tile_scheduler.h"
#include "cuda/common/visibility.h"
#include "cuda/hopper/forward.h"
#include "cuda/ptx/fast_math.h"
#include "cuda/ptx/mma.h"
#include "cuda/ptx/tma.h"
#include "cuda/ptx/warpgroup.h"
#include "cuda/ptx/wgmma.h"

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define FG_HOPPER_BODY 1
#else
#define FG_HOPPER_BODY 0
#endif

namespace flashgate::cuda::hopper {

#if defined(__CUDACC__)
namespace detail {

template <class T, int kD>
class Consumer {
  using Tile = ForwardTile<kD>;
  static constexpr int BN = Tile::BN;
  static constexpr int kS = BN / 2;  // score accumulators per thread (m64n128)
  static constexpr int kO = kD / 2;  // output accumulators per thread

 public:
  __device__ __forceinline__ Consumer(const ForwardParams& p, const SequenceSpan& seq, int64_t h, int m0, int wg,
                                      const T* sq)
      : p_(p.a), seq_(seq), h_(h), row0_(m0 + 64 * wg), sq_(sq + 64 * wg * 64),
        lane_(threadIdx.x % 32), warp_(ptx::warpgroup_thread() / 32),
        gc_(p.a.has_gate ? p.a.gc_row(seq.batch, h) + seq.start : nullptr),
        g_ref_(gc_ ? gc_[m0 < seq.len ? m0 : 0] : 0.f) {
#pragma unroll
    for (int r = 0; r < 2; ++r) rows_[r] = SoftmaxRow{};
#pragma unroll
    for (int i = 0; i < kO; ++i) o_[i] = 0.f;
  }

  // One key block: S = Q K^T, softmax, O += P V. `k` and `v` are the stage's tiles.
  __device__ __forceinline__ void block(const T* k, const T* v, int n0, bool masked) {
    float s[kS];
    ptx::wgmma_fence();
#pragma unroll
    for (int step = 0; step < kD / 16; ++step)
      ptx::Wgmma<T, BN, 0>::ss(s, ptx::k_major_descriptor(sq_, Tile::BM, step), ptx::k_major_descriptor(k, BN, step),
                               step > 0);
    ptx::wgmma_commit();
    ptx::wgmma_wait<0>();

    uint32_t pa[BN / 16][4];
    softmax(s, n0, masked, pa);

    ptx::wgmma_fence();
#pragma unroll
    for (int t = 0; t < BN / 16; ++t) ptx::Wgmma<T, kD, 1>::rs(o_, pa[t], ptx::mn_major_descriptor(v, BN, t), true);
    ptx::wgmma_commit();
    ptx::wgmma_wait<0>();
  }

  __device__ __forceinline__ void epilogue() {
    const float sink = p_.has_sink ? p_.sink[h_] : 0.f;
    const int g = lane_ / 4, c = lane_ % 4;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int row = row0_ + warp_ * 16 + g + 8 * half;  // local position
      float max2 = rows_[half].max2;
      if (gc_ && row < seq_.len && max2 != -INFINITY) max2 += (gc_[row] - g_ref_) * kLog2e;
      const RowResult r = finish_row(max2, quad_sum(rows_[half].sum), p_.has_sink, sink);
      if (row >= seq_.len) continue;
      if (p_.has_lse && c == 0) *p_.lse.template row<float>(seq_.batch, seq_.start + row, h_) = r.lse;
      T* dst = p_.o.template row<T>(seq_.batch, seq_.start + row, h_) + 2 * c;
#pragma unroll
      for (int j = 0; j < kD / 8; ++j)
        *reinterpret_cast<uint32_t*>(dst + 8 * j) =
            ptx::pack2<T>(o_[4 * j + 2 * half] * r.o_scale, o_[4 * j + 2 * half + 1] * r.o_scale);
    }
  }

 private:
  __device__ __forceinline__ bool prescaled() const { return gc_ != nullptr || !(p_.scale_log2 > 0.f); }

  // Scores -> P in registers (the A operand of P V), rescaling o and the row sums. Scores reach exp2 as
  // fmaf(s, exp_scale, -max); with a gate (or a non-positive scale) they move into the exp2 domain first, the
  // key part of the gate term split at g_ref (portable/forward_kernel.cuh explains the split).
  __device__ __forceinline__ void softmax(float (&s)[kS], int n0, bool masked, uint32_t (&pa)[BN / 16][4]) {
    const int g = lane_ / 4, c = lane_ % 4;
    if (prescaled()) {
#pragma unroll
      for (int j = 0; j < BN / 8; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int col = n0 + 8 * j + 2 * c + e;
          const float gk2 = gc_ ? (gc_[col < seq_.len ? col : 0] - g_ref_) * kLog2e : 0.f;
          s[4 * j + e] = fmaf(s[4 * j + e], p_.scale_log2, -gk2);
          s[4 * j + 2 + e] = fmaf(s[4 * j + 2 + e], p_.scale_log2, -gk2);
        }
    }
    if (masked) {
      const unsigned bound = distance_bound(p_.window);
      const int d0 = (row0_ + warp_ * 16 + g) - (n0 + 2 * c);
#pragma unroll
      for (int j = 0; j < BN / 8; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int d = d0 + 8 * (e / 2) - 8 * j - (e % 2);
          const int col = n0 + 8 * j + 2 * c + (e % 2);
          if (!visible_at_distance(d, bound) || col >= seq_.len) s[4 * j + e] = -INFINITY;
        }
    }
    const float exp_scale = prescaled() ? 1.f : p_.scale_log2;
    float factor[2];
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      float tile_max = -INFINITY;
#pragma unroll
      for (int j = 0; j < BN / 8; ++j) tile_max = fmaxf(tile_max, fmaxf(s[4 * j + 2 * half], s[4 * j + 2 * half + 1]));
      factor[half] = rows_[half].rescale(quad_max(tile_max) * exp_scale);
    }
#pragma unroll
    for (int j = 0; j < kD / 8; ++j) {
      o_[4 * j + 0] *= factor[0], o_[4 * j + 1] *= factor[0];
      o_[4 * j + 2] *= factor[1], o_[4 * j + 3] *= factor[1];
    }
#pragma unroll
    for (int half = 0; half < 2; ++half) {
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
    // Score columns 16t..16t+15 are P V's k-step t: the accumulator's places are the A operand's.
#pragma unroll
    for (int t = 0; t < BN / 16; ++t) {
      pa[t][0] = ptx::pack2<T>(s[8 * t + 0], s[8 * t + 1]);
      pa[t][1] = ptx::pack2<T>(s[8 * t + 2], s[8 * t + 3]);
      pa[t][2] = ptx::pack2<T>(s[8 * t + 4], s[8 * t + 5]);
      pa[t][3] = ptx::pack2<T>(s[8 * t + 6], s[8 * t + 7]);
    }
  }

  const AttentionParams& p_;
  const SequenceSpan seq_;
  const int64_t h_;
  const int row0_;  // this warpgroup's first query row (local position)
  const T* const sq_;
  const int lane_, warp_;
  const float* const gc_;
  const float g_ref_;
  SoftmaxRow rows_[2];  // rows g and g + 8 of this thread's warp
  float o_[kO];
};

}  // namespace detail

// One CTA per (query tile of 128 rows, query head), longest tiles first.
template <class T, int kD>
__global__ void __launch_bounds__(384, 1)
    forward_kernel(const __grid_constant__ ForwardParams p, const __grid_constant__ TileSchedule sched) {
#if FG_HOPPER_BODY
  using Tile = ForwardTile<kD>;
  extern __shared__ unsigned char raw[];
  __shared__ alignas(8) uint64_t q_full, full[Tile::kStages], empty[Tile::kStages];
  unsigned char* base = reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(raw) + 1023) & ~uintptr_t{1023});
  T* sq = reinterpret_cast<T*>(base);
  auto k_stage = [&](int s) { return reinterpret_cast<T*>(base + Tile::kQBytes + s * (Tile::kKBytes + Tile::kVBytes)); };
  auto v_stage = [&](int s) { return k_stage(s) + Tile::kKBytes / 2; };

  const AttentionParams& a = p.a;
  const int64_t h = blockIdx.x % a.HQ;
  const TileMapEntry t = tile_longest_first(sched, blockIdx.x / a.HQ);
  if (t.seq < 0) return;
  const SequenceSpan seq = sequence_span(a, t.seq);
  const int m0 = t.tile * Tile::BM;
  if (m0 >= seq.len) return;
  const int rows = min(Tile::BM, seq.len - m0);
  const int64_t kvh = h / a.group;
  const KeySpan keys = keys_seen_by_rows(m0, m0 + rows, seq.len, a.window);
  const int first = keys.empty() ? 0 : keys.begin / Tile::BN, last = keys.empty() ? -1 : (keys.end - 1) / Tile::BN;
  const int blocks = last - first + 1;

  if (threadIdx.x == 0) {
    ptx::barrier_init(&q_full, 1);
    for (int s = 0; s < Tile::kStages; ++s) ptx::barrier_init(&full[s], 1), ptx::barrier_init(&empty[s], 256);
    ptx::fence_barrier_init();
  }
  __syncthreads();

  const int wg = ptx::warpgroup_index();
  if (wg == 0) {
    ptx::setmaxnreg_dec<24>();
    if (threadIdx.x >= 32 || !ptx::elect_one() || blocks <= 0) return;
    const int32_t token0 = static_cast<int32_t>(seq.start), batch = static_cast<int32_t>(seq.batch);
    ptx::barrier_arrive_expect(&q_full, Tile::kQBytes);
    for (int b = 0; b < Tile::kBlocks; ++b)
      ptx::tma_load(sq + b * Tile::BM * 64, &p.q_map, {b * 64, token0 + m0, static_cast<int32_t>(h), batch}, &q_full);
    for (int it = 0; it < blocks; ++it) {
      const int n = last - it, s = it % Tile::kStages;
      if (it >= Tile::kStages) ptx::barrier_wait(&empty[s], ((it / Tile::kStages) - 1) & 1);
      ptx::barrier_arrive_expect(&full[s], Tile::kKBytes + Tile::kVBytes);
      const int32_t row = token0 + n * Tile::BN;
      for (int b = 0; b < Tile::kBlocks; ++b) {
        ptx::tma_load(k_stage(s) + b * Tile::BN * 64, &p.k_map, {b * 64, row, static_cast<int32_t>(kvh), batch},
                      &full[s]);
        ptx::tma_load(v_stage(s) + b * Tile::BN * 64, &p.v_map, {b * 64, row, static_cast<int32_t>(kvh), batch},
                      &full[s]);
      }
    }
    return;
  }

  ptx::setmaxnreg_inc<240>();
  detail::Consumer<T, kD> consumer(p, seq, h, m0, wg - 1, sq);
  if (blocks > 0) {
    ptx::barrier_wait(&q_full, 0);
    for (int it = 0; it < blocks; ++it) {
      const int n = last - it, s = it % Tile::kStages;
      ptx::barrier_wait(&full[s], (it / Tile::kStages) & 1);
      const bool masked = block_needs_mask(m0, m0 + Tile::BM, n * Tile::BN, (n + 1) * Tile::BN, seq.len, a.window);
      consumer.block(k_stage(s), v_stage(s), n * Tile::BN, masked);
      ptx::barrier_arrive(&empty[s]);
    }
  }
  consumer.epilogue();
#endif
}
#endif  // __CUDACC__

}  // namespace flashgate::cuda::hopper
