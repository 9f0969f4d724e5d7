// The Hopper forward (sm_90a) for fp16/bf16: a CTA owns 128 query rows of one head.
//
// Warpgroup 0 produces: one elected lane loads Q once and streams key blocks through two-stage rings of K and of
// V tiles with TMA, in the order the consumers read them (K of block i, then V of block i - 1); full barriers
// carry the bytes, empty barriers the consumers' release.
// Warpgroups 1 and 2 consume, 64 query rows each. Per key block i a consumer issues S_i = Q K_i^T and
// O += P_{i-1} V_{i-1} together, runs the online softmax of S_i while P V is still on the tensor cores, then
// rescales O and turns S_i into P_i (registers, the A operand of the next P V). The two consumers take turns at
// the tensor cores (named barriers: one issues while the other runs its softmax). Masks apply only to blocks
// that need them; the gate's terms enter the scores, the sink the row sum at the end. setmaxnreg moves registers
// from the producer to the consumers.
//
// Shared memory: Q [kK/64][128 rows][64], then per stage K [kK/64][BN keys][64] and V [kV/64][BN keys][64],
// every 64-column block 128-byte swizzled by TMA and 1024-byte aligned (cuda/ptx/wgmma.h has the layouts).
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "cuda/common/attention_params.h"
#include "cuda/common/cuda_check.h"
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

// The shared-memory buffers of one CTA and the barriers that hand them between producer and consumers.
template <int kK, int kV>
struct Stages {
  using Tile = ForwardTile<kK, kV>;
  static constexpr int kReleasers = 8;  // one lane per consumer warp releases a stage

  unsigned char* base;
  uint64_t* bars;  // q_full, k_full[S], k_empty[S], v_full[S], v_empty[S]

  template <class T>
  __device__ __forceinline__ T* q() const { return reinterpret_cast<T*>(base); }
  template <class T>
  __device__ __forceinline__ T* k(int s) const {
    return reinterpret_cast<T*>(base + Tile::kQBytes + s * (Tile::kKBytes + Tile::kVBytes));
  }
  template <class T>
  __device__ __forceinline__ T* v(int s) const {
    return reinterpret_cast<T*>(base + Tile::kQBytes + s * (Tile::kKBytes + Tile::kVBytes) + Tile::kKBytes);
  }
  __device__ __forceinline__ uint64_t* q_full() const { return bars; }
  __device__ __forceinline__ uint64_t* k_full(int s) const { return bars + 1 + s; }
  __device__ __forceinline__ uint64_t* k_empty(int s) const { return bars + 1 + Tile::kStages + s; }
  __device__ __forceinline__ uint64_t* v_full(int s) const { return bars + 1 + 2 * Tile::kStages + s; }
  __device__ __forceinline__ uint64_t* v_empty(int s) const { return bars + 1 + 3 * Tile::kStages + s; }
  static constexpr int kBarriers = 1 + 4 * Tile::kStages;

  __device__ __forceinline__ void init() const {
    ptx::barrier_init(q_full(), 1);
    for (int s = 0; s < Tile::kStages; ++s) {
      ptx::barrier_init(k_full(s), 1), ptx::barrier_init(v_full(s), 1);
      ptx::barrier_init(k_empty(s), kReleasers), ptx::barrier_init(v_empty(s), kReleasers);
    }
    ptx::fence_barrier_init();
  }

  // The ring position of the i-th block: its stage and the parity of that stage's i / kStages-th phase.
  __device__ __forceinline__ static int stage(int i) { return i % Tile::kStages; }
  __device__ __forceinline__ static uint32_t parity(int i) { return (i / Tile::kStages) & 1; }
  // A consumer warp is done reading a stage.
  __device__ __forceinline__ static void release(uint64_t* bar) {
    if (threadIdx.x % 32 == 0) ptx::barrier_arrive(bar);
  }
};

// The producer's lane: Q, then K_0, then (K_i, V_{i-1}) for i = 1.., then the last V; block i is key block
// last - i (longest-first order inside a tile: the diagonal block comes first).
template <class T, int kK, int kV>
__device__ __forceinline__ void produce(const ForwardParams& p, const Stages<kK, kV>& st, int32_t token0, int32_t batch,
                                        int32_t h, int32_t kvh, int m0, int last, int blocks) {
  using Tile = ForwardTile<kK, kV>;
  ptx::barrier_arrive_expect(st.q_full(), Tile::kQBytes);
  for (int b = 0; b < Tile::kKBlocks; ++b)
    ptx::tma_load(st.template q<T>() + b * Tile::BM * 64, &p.q_map, {b * 64, token0 + m0, h, batch}, st.q_full());
  const auto load_k = [&](int i) {
    const int s = st.stage(i);
    if (i >= Tile::kStages) ptx::barrier_wait(st.k_empty(s), st.parity(i) ^ 1);
    ptx::barrier_arrive_expect(st.k_full(s), Tile::kKBytes);
    const int32_t row = token0 + (last - i) * Tile::BN;
    for (int b = 0; b < Tile::kKBlocks; ++b)
      ptx::tma_load(st.template k<T>(s) + b * Tile::BN * 64, &p.k_map, {b * 64, row, kvh, batch}, st.k_full(s));
  };
  const auto load_v = [&](int i) {
    const int s = st.stage(i);
    if (i >= Tile::kStages) ptx::barrier_wait(st.v_empty(s), st.parity(i) ^ 1);
    ptx::barrier_arrive_expect(st.v_full(s), Tile::kVBytes);
    const int32_t row = token0 + (last - i) * Tile::BN;
    for (int b = 0; b < Tile::kVBlocks; ++b)
      ptx::tma_load(st.template v<T>(s) + b * Tile::BN * 64, &p.v_map, {b * 64, row, kvh, batch}, st.v_full(s));
  };
  load_k(0);
  for (int i = 1; i < blocks; ++i) load_k(i), load_v(i - 1);
  load_v(blocks - 1);
}

// The two consumer warpgroups' turns at the tensor cores (named barriers 1 and 2). Consumer 0 goes first; each
// issues its GEMMs in its turn and passes the turn on. Every consumer takes the same number of turns, and the
// last pass of consumer 1 is dropped so that every barrier ends complete.
class Turns {
 public:
  __device__ __forceinline__ explicit Turns(int me) : me_(me) {
    if (me_ == 1) ptx::named_barrier_arrive(kFirst, 256);
  }
  __device__ __forceinline__ void take() const { ptx::named_barrier_sync(kFirst + me_, 256); }
  __device__ __forceinline__ void pass(bool last_turn) const {
    if (!(last_turn && me_ == 1)) ptx::named_barrier_arrive(kFirst + (1 - me_), 256);
  }

 private:
  static constexpr int kFirst = 1;
  const int me_;
};

template <class T, int kK, int kV>
class Consumer {
  using Tile = ForwardTile<kK, kV>;
  static constexpr int BN = Tile::BN;
  static constexpr int kO = kV / 2;  // output accumulators per thread

 public:
  static constexpr int kS = BN / 2;  // score accumulators per thread (m64nBN)
  using Probs = uint32_t[BN / 16][4];

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

  // Issues S = Q K^T for the key tile `k` as one wgmma group.
  __device__ __forceinline__ void issue_scores(float (&s)[kS], const T* k) const {
#pragma unroll
    for (int step = 0; step < kK / 16; ++step)
      ptx::Wgmma<T, BN, 0>::ss(s, ptx::k_major_descriptor(sq_, Tile::BM, step), ptx::k_major_descriptor(k, BN, step),
                               step > 0);
    ptx::wgmma_commit();
  }

  // Issues O += P V for the value tile `v` as one wgmma group (V read transposed from its TMA layout).
  __device__ __forceinline__ void issue_pv(const Probs& pa, const T* v) {
#pragma unroll
    for (int t = 0; t < BN / 16; ++t) ptx::Wgmma<T, kV, 1>::rs(o_, pa[t], ptx::mn_major_descriptor(v, BN, t), true);
    ptx::wgmma_commit();
  }

  // After a wait: the accumulators are final from here on.
  __device__ __forceinline__ void hold_output() { ptx::wgmma_hold(o_); }

  // Scores of key block n0.. -> unnormalised probabilities in place (fp32), the row sums updated. Returns, per
  // row half, the factor the output accumulated so far must be scaled by (rescale_output, once P V is done).
  // Scores reach exp2 as fmaf(s, exp_scale, -max); with a gate (or a non-positive scale) they move into the
  // exp2 domain first, the key part of the gate term split at g_ref (portable/forward_kernel.cuh explains it).
  __device__ __forceinline__ float2 softmax(float (&s)[kS], int n0, bool masked) {
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

  __device__ __forceinline__ void rescale_output(float2 factor) {
#pragma unroll
    for (int j = 0; j < kV / 8; ++j) {
      o_[4 * j + 0] *= factor.x, o_[4 * j + 1] *= factor.x;
      o_[4 * j + 2] *= factor.y, o_[4 * j + 3] *= factor.y;
    }
  }

  // Score columns 16t..16t+15 are P V's k-step t: the accumulator's places are the A operand's.
  __device__ __forceinline__ static void to_operand(const float (&s)[kS], Probs& pa) {
#pragma unroll
    for (int t = 0; t < BN / 16; ++t) {
      pa[t][0] = ptx::pack2<T>(s[8 * t + 0], s[8 * t + 1]);
      pa[t][1] = ptx::pack2<T>(s[8 * t + 2], s[8 * t + 3]);
      pa[t][2] = ptx::pack2<T>(s[8 * t + 4], s[8 * t + 5]);
      pa[t][3] = ptx::pack2<T>(s[8 * t + 6], s[8 * t + 7]);
    }
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
      for (int j = 0; j < kV / 8; ++j)
        if (8 * j < p_.V)  // columns past V are the bucket's padding
          *reinterpret_cast<uint32_t*>(dst + 8 * j) =
              ptx::pack2<T>(o_[4 * j + 2 * half] * r.o_scale, o_[4 * j + 2 * half + 1] * r.o_scale);
    }
  }

 private:
  __device__ __forceinline__ bool prescaled() const { return gc_ != nullptr || !(p_.scale_log2 > 0.f); }

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

// A consumer's main loop over the tile's `blocks` key blocks (block i is key block last - i).
template <class T, int kK, int kV>
__device__ __forceinline__ void consume(Consumer<T, kK, kV>& c, const Stages<kK, kV>& st, const Turns& turns,
                                        int m0, int last, int blocks, int len, int window) {
  using Tile = ForwardTile<kK, kV>;
  using C = Consumer<T, kK, kV>;
  const auto needs_mask = [&](int i) {
    const int n = last - i;
    return block_needs_mask(m0, m0 + Tile::BM, n * Tile::BN, (n + 1) * Tile::BN, len, window);
  };
  float s[C::kS];
  typename C::Probs pa;

  ptx::barrier_wait(st.q_full(), 0);
  ptx::barrier_wait(st.k_full(0), 0);
  turns.take();
  ptx::wgmma_fence();
  c.issue_scores(s, st.template k<T>(0));
  turns.pass(false);
  ptx::wgmma_wait<0>();
  ptx::wgmma_hold(s);
  st.release(st.k_empty(0));
  c.softmax(s, last * Tile::BN, needs_mask(0));  // nothing accumulated yet: no factor to apply
  C::to_operand(s, pa);

  for (int i = 1; i < blocks; ++i) {
    const int k_stage = st.stage(i), v_stage = st.stage(i - 1);
    ptx::barrier_wait(st.k_full(k_stage), st.parity(i));
    ptx::barrier_wait(st.v_full(v_stage), st.parity(i - 1));
    turns.take();
    ptx::wgmma_fence();
    c.issue_scores(s, st.template k<T>(k_stage));
    c.issue_pv(pa, st.template v<T>(v_stage));
    turns.pass(false);
    ptx::wgmma_wait<1>();
    ptx::wgmma_hold(s);
    st.release(st.k_empty(k_stage));
    const float2 factor = c.softmax(s, (last - i) * Tile::BN, needs_mask(i));
    ptx::wgmma_wait<0>();
    c.hold_output();
    st.release(st.v_empty(v_stage));
    c.rescale_output(factor);
    C::to_operand(s, pa);
  }

  const int v_stage = st.stage(blocks - 1);
  ptx::barrier_wait(st.v_full(v_stage), st.parity(blocks - 1));
  turns.take();
  ptx::wgmma_fence();
  c.issue_pv(pa, st.template v<T>(v_stage));
  turns.pass(true);
  ptx::wgmma_wait<0>();
  c.hold_output();
  st.release(st.v_empty(v_stage));
}

}  // namespace detail

// One CTA per (query tile of 128 rows, query head), longest tiles first.
template <class T, int kK, int kV>
__global__ void __launch_bounds__(384, 1)
    forward_kernel(const __grid_constant__ ForwardParams p, const __grid_constant__ TileSchedule sched) {
#if FG_HOPPER_BODY
  using Tile = ForwardTile<kK, kV>;
  using Stages = detail::Stages<kK, kV>;
  extern __shared__ unsigned char raw[];
  __shared__ alignas(8) uint64_t bars[Stages::kBarriers];
  const Stages st{reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(raw) + 1023) & ~uintptr_t{1023}), bars};

  const AttentionParams& a = p.a;
  const int64_t h = blockIdx.x % a.HQ;
  const TileMapEntry t = tile_longest_first(sched, blockIdx.x / a.HQ);
  if (t.seq < 0) return;
  const SequenceSpan seq = sequence_span(a, t.seq);
  const int m0 = t.tile * Tile::BM;
  if (m0 >= seq.len) return;
  const int rows = min(Tile::BM, seq.len - m0);
  const KeySpan keys = keys_seen_by_rows(m0, m0 + rows, seq.len, a.window);
  const int first = keys.empty() ? 0 : keys.begin / Tile::BN, last = keys.empty() ? -1 : (keys.end - 1) / Tile::BN;
  const int blocks = last - first + 1;

  if (threadIdx.x == 0) st.init();
  __syncthreads();

  const int wg = ptx::warpgroup_index();
  if (wg == 0) {
    ptx::setmaxnreg_dec<24>();
    if (threadIdx.x < 32 && ptx::elect_one() && blocks > 0)
      detail::produce<T>(p, st, static_cast<int32_t>(seq.start), static_cast<int32_t>(seq.batch),
                         static_cast<int32_t>(h), static_cast<int32_t>(h / a.group), m0, last, blocks);
    return;
  }

  ptx::setmaxnreg_inc<240>();
  detail::Consumer<T, kK, kV> consumer(p, seq, h, m0, wg - 1, st.template q<T>());
  if (blocks > 0) {
    const detail::Turns turns(wg - 1);
    detail::consume(consumer, st, turns, m0, last, blocks, seq.len, a.window);
  }
  consumer.epilogue();
#endif
}

template <class T, int kK, int kV>
void launch_forward(const ForwardParams& p, const TileSchedule& sched, CUstream_st* stream) {
  using Tile = ForwardTile<kK, kV>;
  const int64_t items = sched.num_tiles * p.a.HQ;
  if (items == 0) return;
  const auto kernel = forward_kernel<T, kK, kV>;
  FLASHGATE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            static_cast<int>(Tile::smem_bytes())));
  kernel<<<static_cast<unsigned>(items), Tile::kThreads, Tile::smem_bytes(), stream>>>(p, sched);
  FLASHGATE_CHECK_LAUNCH("hopper forward_kernel");
}
#endif  // __CUDACC__

}  // namespace flashgate::cuda::hopper
