// The Hopper forward (sm_90a) for fp16/bf16: a persistent CTA runs query tiles of BM rows of one head after
// another.
//
// Warpgroup 0 produces: one elected lane loads Q and streams key blocks through two-stage rings of K and of V
// tiles with TMA, in the order the consumers read them (K of block i, then V of block i - 1); full barriers carry
// the bytes, empty barriers the consumers' release. With a gate, a second warp stages the gate's key terms.
// The other warpgroups consume, 64 query rows each. Per key block i a consumer issues S_i = Q K_i^T and
// O += P_{i-1} V_{i-1} together, runs the online softmax of S_i while P V is still on the tensor cores, then
// rescales O and turns S_i into P_i (registers, the A operand of the next P V). Two consumers take turns at the
// tensor cores (named barriers: one issues while the other runs its softmax). Masks apply only to blocks that
// need them; the gate's terms enter the scores, the sink the row sum at the end. setmaxnreg moves registers from
// the producer to the consumers.
//
// Shared memory: Q [kK/64][BM rows][64], then per stage K [kK/64][BN keys][64] and V [kV/64][BN keys][64],
// every 64-column block 128-byte swizzled by TMA and 1024-byte aligned (cuda/ptx/wgmma.h has the layouts), then
// the gate's terms [stage][BN]. The work order is forward_work.cuh, the consumers' verbs forward_consumer.cuh.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/attention_params.h"
#include "cuda/common/cuda_check.h"
#include "cuda/common/online_softmax.h"
#include "cuda/common/tile_scheduler.h"
#include "cuda/common/visibility.h"
#include "cuda/hopper/forward.h"
#include "cuda/hopper/forward_consumer.cuh"
#include "cuda/hopper/forward_work.cuh"
#include "cuda/hopper/ring.h"
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

// The shared-memory buffers of one CTA and the barriers that hand them between producer and consumers. The rings
// count blocks over all of the CTA's items (ring.h).
template <int kK, int kV>
struct Stages : Ring<ForwardTile<kK, kV>::kStages> {
  using Tile = ForwardTile<kK, kV>;
  using Ring<Tile::kStages>::kS;
  using Handoff = Ring<2>;  // split V: the P buffers from consumer 0 to consumer 1
  static constexpr int kReleasers = 4 * Tile::kConsumers;  // one lane per consumer warp releases a buffer
  // Split V: only consumer 0 reads Q, K and the gate's terms.
  static constexpr int kScoreReleasers = Tile::kSplitV ? 4 : kReleasers;
  static constexpr int kGateReaders = 128 * (Tile::kSplitV ? 1 : Tile::kConsumers);
  // Split V: the consumers hand each other buffers their threads wrote or read (P's rescale factors, the output
  // scales), so every thread arrives for itself.
  static constexpr int kHandoffArrivals = 128;

  unsigned char* base;
  uint64_t* bars;  // q_full, q_empty, then per stage k_full, k_empty, v_full, v_empty, g_full, g_empty; split V:
                   // per P buffer p_full, p_empty, then scales_full, scales_empty; staged output: per consumer
                   // out_full, then per consumer out_empty
  static constexpr int kBarriers =
      2 + 6 * kS + (Tile::kSplitV ? 6 : 0) + (Tile::kStageCodes ? 2 * Tile::kConsumers : 0);
  static constexpr int kStorers = 64;  // producer warps 2 and 3

  template <class T>
  __device__ __forceinline__ T* q() const { return reinterpret_cast<T*>(base); }
  template <class T>
  __device__ __forceinline__ T* k(int s) const {
    return reinterpret_cast<T*>(base + Tile::kQBytes + s * (Tile::kKBytes + Tile::kVBytes));
  }
  template <class T>
  __device__ __forceinline__ T* v(int s) const { return k<T>(s) + Tile::kKBytes / 2; }
  // The gate's key terms of a block (exp2 domain, relative to the tile's reference), behind the K and V stages.
  __device__ __forceinline__ float* gate(int s) const {
    return reinterpret_cast<float*>(base + Tile::kQBytes + kS * (Tile::kKBytes + Tile::kVBytes)) + s * Tile::BN;
  }
  // Consumer c's output staging rows (Tile::kStageO, kStageCodes): written by the consumer, stored by the storer
  // warps.
  __device__ __forceinline__ unsigned char* out_stage(int c) const {
    return base + Tile::kOutStageAt + c * Tile::kOutStageBytes;
  }
  __device__ __forceinline__ uint64_t* out_full(int c) const { return bars + 2 + 6 * kS + c; }
  __device__ __forceinline__ uint64_t* out_empty(int c) const { return bars + 2 + 6 * kS + Tile::kConsumers + c; }
  __device__ __forceinline__ uint64_t* q_full() const { return bars; }
  __device__ __forceinline__ uint64_t* q_empty() const { return bars + 1; }
  __device__ __forceinline__ uint64_t* k_full(int s) const { return bars + 2 + s; }
  __device__ __forceinline__ uint64_t* k_empty(int s) const { return bars + 2 + kS + s; }
  __device__ __forceinline__ uint64_t* v_full(int s) const { return bars + 2 + 2 * kS + s; }
  __device__ __forceinline__ uint64_t* v_empty(int s) const { return bars + 2 + 3 * kS + s; }
  __device__ __forceinline__ uint64_t* g_full(int s) const { return bars + 2 + 4 * kS + s; }
  __device__ __forceinline__ uint64_t* g_empty(int s) const { return bars + 2 + 5 * kS + s; }

  // Split V: P buffer b (probabilities, then the rows' rescale factors) and the rows' output scales, behind the
  // stages.
  __device__ __forceinline__ unsigned char* handoff() const { return base + Tile::kHandoffAt; }
  template <class T>
  __device__ __forceinline__ T* probs(int b) const {
    return reinterpret_cast<T*>(handoff() + b * Tile::kPBytes);
  }
  __device__ __forceinline__ float* factors(int b) const {
    return reinterpret_cast<float*>(handoff() + 2 * Tile::kPBytes + b * Tile::kPScaleBytes);
  }
  __device__ __forceinline__ float* out_scales() const {
    return reinterpret_cast<float*>(handoff() + 2 * (Tile::kPBytes + Tile::kPScaleBytes));
  }
  __device__ __forceinline__ uint64_t* p_full(int b) const { return bars + 2 + 6 * kS + b; }
  __device__ __forceinline__ uint64_t* p_empty(int b) const { return bars + 4 + 6 * kS + b; }
  __device__ __forceinline__ uint64_t* scales_full() const { return bars + 6 + 6 * kS; }
  __device__ __forceinline__ uint64_t* scales_empty() const { return bars + 7 + 6 * kS; }

  __device__ __forceinline__ void init() const {
    ptx::barrier_init(q_full(), 1), ptx::barrier_init(q_empty(), kScoreReleasers);
    for (int s = 0; s < kS; ++s) {
      ptx::barrier_init(k_full(s), 1), ptx::barrier_init(v_full(s), 1), ptx::barrier_init(g_full(s), 32);
      ptx::barrier_init(k_empty(s), kScoreReleasers), ptx::barrier_init(v_empty(s), kReleasers);
      ptx::barrier_init(g_empty(s), kGateReaders);
    }
    if (Tile::kSplitV) {
      for (int b = 0; b < 2; ++b)
        ptx::barrier_init(p_full(b), kHandoffArrivals), ptx::barrier_init(p_empty(b), kHandoffArrivals);
      ptx::barrier_init(scales_full(), kHandoffArrivals), ptx::barrier_init(scales_empty(), kHandoffArrivals);
    }
    if (Tile::kStageCodes)
      for (int c = 0; c < Tile::kConsumers; ++c)
        ptx::barrier_init(out_full(c), 128), ptx::barrier_init(out_empty(c), kStorers);
    ptx::fence_barrier_init();
  }
};

// The producer's lane, per item: Q (once the consumers are done with the previous item's), then K_0, then
// (K_i, V_{i-1}) for i = 1.., then the last V: the order in which the consumers read them. `ring` counts the
// blocks of earlier items, `tiles` their Q loads.
template <class T, int kK, int kV>
__device__ __forceinline__ void produce(const ForwardParams& p, const Stages<kK, kV>& st, const Work& w, uint32_t ring,
                                        uint32_t tiles) {
  using Tile = ForwardTile<kK, kV>;
  const int32_t token0 = static_cast<int32_t>(w.seq.start), batch = static_cast<int32_t>(w.seq.batch);
  const int32_t h = static_cast<int32_t>(w.h), kvh = static_cast<int32_t>(w.h / p.a.group);
  ptx::barrier_wait(st.q_empty(), (tiles & 1) ^ 1);  // the previous item's Q is read
  ptx::barrier_arrive_expect(st.q_full(), Tile::kQBytes);
  for (int b = 0; b < Tile::kKBlocks; ++b)
    ptx::tma_load(st.template q<T>() + b * Tile::BM * 64, &p.q_map, {b * 64, token0 + w.m0, h, batch}, st.q_full());
  // Key block i's K (value false) or V tile into its stage of that ring.
  const auto load = [&](int i, bool value) {
    const uint32_t b = ring + i;
    const int s = st.stage(b);
    uint64_t* const full = value ? st.v_full(s) : st.k_full(s);
    st.wait_free(value ? st.v_empty(s) : st.k_empty(s), b);
    ptx::barrier_arrive_expect(full, value ? Tile::kVBytes : Tile::kKBytes);
    T* const dst = value ? st.template v<T>(s) : st.template k<T>(s);
    const CUtensorMap* const map = value ? &p.v_map : &p.k_map;
    const int32_t row = token0 + (w.last - i) * Tile::BN;
    for (int c = 0; c < (value ? Tile::kVBlocks : Tile::kKBlocks); ++c)
      ptx::tma_load(dst + c * Tile::BN * 64, map, {c * 64, row, kvh, batch}, full);
  };
  load(0, false);
  for (int i = 1; i < w.blocks; ++i) load(i, false), load(i - 1, true);
  load(w.blocks - 1, true);
}

// A producer warp stages the gate's key terms of every block, (G_j - G_ref) log2 e with G_ref the cumulative
// gate at the tile's first row, so the consumers read them from shared memory instead of the prefix sums.
template <int kK, int kV>
__device__ __forceinline__ void stage_gate(const AttentionParams& a, const Stages<kK, kV>& st, const Work& w,
                                           uint32_t ring) {
  using Tile = ForwardTile<kK, kV>;
  const float* gc = a.gc_key_row(w.seq.batch, w.h) + w.seq.start;
  const float g_ref = a.gc_row(w.seq.batch, w.h)[w.seq.start + w.m0];
  const int keys = a.key_len(w.seq.len);
  for (int i = 0; i < w.blocks; ++i) {
    const uint32_t b = ring + i;
    const int s = st.stage(b);
    st.wait_free(st.g_empty(s), b);
    float* dst = st.gate(s);
    const int n0 = (w.last - i) * Tile::BN;
    for (int j = threadIdx.x % 32; j < Tile::BN; j += 32) {
      const int col = n0 + j;
      dst[j] = col < keys ? (gc[col] - g_ref) * kLog2e : 0.f;
    }
    ptx::barrier_arrive(st.g_full(s));
  }
}

// The storer warps (64 threads), per item: each consumer's staged rows that lie in the sequence to o (16-byte
// chunks) and o_residual (8-byte chunks), as `plan` staged them. A thread keeps one chunk column and steps down the
// rows, so that its loop holds one pointer and one stride (these warps have 32-40 registers). `items`: the CTA's
// earlier items.
template <class T, int kK, int kV>
__device__ __forceinline__ void store_outputs(const AttentionParams& a, const Stages<kK, kV>& st, const Work& w,
                                              OutputPlan plan, uint32_t items) {
  using Tile = ForwardTile<kK, kV>;
  constexpr int kStorers = Stages<kK, kV>::kStorers;
  constexpr int kChunks = kV / 8;  // 16-byte chunks of an o row, 8-byte ones of a code row (past V: padding)
  constexpr int kRowStep = kStorers / kChunks;
  static_assert(kStorers % kChunks == 0, "a storer keeps its chunk column");
  const int t = static_cast<int>(threadIdx.x) - 64, ch = t % kChunks, first = t / kChunks;
  const bool column = ch < a.V / 8;
#pragma unroll 1
  for (int c = 0; c < Tile::kConsumers; ++c) {
    const unsigned char* stage = st.out_stage(c);
    const int row0 = w.m0 + 64 * c, rows = min(64, w.seq.len - row0);
    ptx::barrier_wait(st.out_full(c), items & 1);
    if (column && plan.o) {
      unsigned char* o = reinterpret_cast<unsigned char*>(a.o.template row<T>(w.seq.batch, w.seq.start + row0 + first,
                                                                              w.h)) + 16 * ch;
      const int64_t step = a.o.token_stride * static_cast<int64_t>(sizeof(T)) * kRowStep;
#pragma unroll 1
      for (int r = first; r < rows; r += kRowStep, o += step)
        *reinterpret_cast<uint4*>(o) = *reinterpret_cast<const uint4*>(stage + r * Tile::kOutPitch + 16 * ch);
    }
    if (column && plan.codes) {
      int8_t* codes = a.o_residual.template row<int8_t>(w.seq.batch, w.seq.start + row0 + first, w.h) + 8 * ch;
      const int64_t step = a.o_residual.token_stride * kRowStep;
#pragma unroll 1
      for (int r = first; r < rows; r += kRowStep, codes += step)
        *reinterpret_cast<uint2*>(codes) = *reinterpret_cast<const uint2*>(stage + Tile::codes_at(r, 8 * ch));
    }
    ptx::barrier_arrive(st.out_empty(c));
  }
}

// A consumer's main loop over one item's key blocks (`ring`: blocks of earlier items, `tiles`: their Q loads).
// Q is released once the last scores are done, so the producer loads the next item's Q under the last P V and
// the epilogue. `hand(b, P, factors)` gets each block's P once it is made (split V: to consumer 1).
template <class T, int kK, int kV, class TurnsT, class Hand>
__device__ __forceinline__ void consume(Consumer<T, kK, kV>& c, const Stages<kK, kV>& st, const TurnsT& turns,
                                        const Work& w, uint32_t ring, uint32_t tiles, const AttentionParams& a,
                                        Hand&& hand) {
  using Tile = ForwardTile<kK, kV>;
  using C = Consumer<T, kK, kV>;
  const auto needs_mask = [&](int i) {
    const int n = w.last - i;
    return block_needs_mask(w.m0, w.m0 + Tile::BM, n * Tile::BN, (n + 1) * Tile::BN, w.seq.len, a.window,
                            a.key_shift, a.key_len(w.seq.len));
  };
  // The gate's staged terms of block number b (nullptr without a gate), and their release after the softmax.
  const auto gate_of = [&](uint32_t b) -> const float* {
    if (!c.gated()) return nullptr;
    ptx::barrier_wait(st.g_full(st.stage(b)), st.parity(b));
    return st.gate(st.stage(b));
  };
  const auto gate_done = [&](uint32_t b) {
    if (c.gated()) ptx::barrier_arrive(st.g_empty(st.stage(b)));  // every consumer thread read the terms
  };
  float s[C::kS];
  typename C::Probs pa;

  ptx::barrier_wait(st.q_full(), tiles & 1);
  ptx::barrier_wait(st.k_full(st.stage(ring)), st.parity(ring));
  turns.take();
  ptx::wgmma_fence();
  c.issue_scores(s, st.template k<T>(st.stage(ring)));
  turns.pass();
  ptx::wgmma_wait<0>();
  ptx::wgmma_hold(s);
  st.release(st.k_empty(st.stage(ring)));
  if (w.blocks == 1) st.release(st.q_empty());
  c.softmax(s, w.last * Tile::BN, needs_mask(0), gate_of(ring));  // nothing accumulated yet: no factor to apply
  gate_done(ring);
  C::to_operand(s, pa);
  hand(ring, pa, make_float2(1.f, 1.f));

  for (int i = 1; i < w.blocks; ++i) {
    const uint32_t kb = ring + i, vb = kb - 1;
    ptx::barrier_wait(st.k_full(st.stage(kb)), st.parity(kb));
    if constexpr (!Tile::kSplitV) ptx::barrier_wait(st.v_full(st.stage(vb)), st.parity(vb));
    turns.take();
    ptx::wgmma_fence();
    c.issue_scores(s, st.template k<T>(st.stage(kb)));
    // Split V has one V stage, whose next block loads only once both consumers' P V are done: Q K^T runs while it
    // lands.
    if constexpr (Tile::kSplitV) {
      ptx::barrier_wait(st.v_full(st.stage(vb)), st.parity(vb));
      ptx::wgmma_fence();  // P's registers again after the wait loop
    }
    c.issue_pv(pa, st.template v<T>(st.stage(vb)), i > 1);
    turns.pass();
    ptx::wgmma_wait<1>();
    ptx::wgmma_hold(s);
    st.release(st.k_empty(st.stage(kb)));
    if (i == w.blocks - 1) st.release(st.q_empty());
    const float2 factor = c.softmax(s, (w.last - i) * Tile::BN, needs_mask(i), gate_of(kb));
    gate_done(kb);
    ptx::wgmma_wait<0>();
    c.hold_output();
    st.release(st.v_empty(st.stage(vb)));
    c.rescale_output(factor);
    C::to_operand(s, pa);
    hand(kb, pa, factor);
  }

  const uint32_t vb = ring + w.blocks - 1;
  ptx::barrier_wait(st.v_full(st.stage(vb)), st.parity(vb));
  turns.take();
  ptx::wgmma_fence();
  c.issue_pv(pa, st.template v<T>(st.stage(vb)), w.blocks > 1);
  turns.pass();
  ptx::wgmma_wait<0>();
  c.hold_output();
  st.release(st.v_empty(st.stage(vb)));
}

// Split V, consumer 0, one item: consume()'s loop (no turns: the consumers do different work) handing each block's P
// and rescale factors to consumer 1, then the epilogue of the lower output columns, handing the rows' output scales
// over too. `items`: the CTA's earlier items.
template <class T, int kK, int kV>
__device__ __forceinline__ void score_half(const ForwardParams& p, const Stages<kK, kV>& st, const Work& w,
                                           uint32_t ring, uint32_t tiles, uint32_t items) {
  using H = typename Stages<kK, kV>::Handoff;
  Consumer<T, kK, kV> c(p.a, w, 0, st.template q<T>());
  if (w.blocks > 0) {
    const auto hand = [&](uint32_t b, const typename Consumer<T, kK, kV>::Probs& pa, float2 factor) {
      const int hb = H::stage(b);
      H::wait_free(st.p_empty(hb), b);
      c.store_probs(pa, st.template probs<T>(hb));
      if (threadIdx.x % 4 == 0) {
        float* f = st.factors(hb);
        f[c.tile_row()] = factor.x, f[c.tile_row() + 8] = factor.y;
      }
      ptx::barrier_arrive(st.p_full(hb));
    };
    consume(c, st, Turns<1>(0), w, ring, tiles, p.a, hand);
  } else {
    c.zero_output();
  }
  Ring<1>::wait_free(st.scales_empty(), items);
  c.epilogue(st.out_scales());
  ptx::barrier_arrive(st.scales_full());
}

// Split V, consumer 1, one item: per key block, P from consumer 0 (after rescaling what it holds by the block's
// factors) times its half of V's columns, then the epilogue of the upper output columns with consumer 0's scales.
template <class T, int kK, int kV>
__device__ __forceinline__ void value_half(const ForwardParams& p, const Stages<kK, kV>& st, const Work& w,
                                           uint32_t ring, uint32_t items) {
  using H = typename Stages<kK, kV>::Handoff;
  Consumer<T, kK, kV, kV / 2> c(p.a, w, 1, st.template q<T>());
  if (w.blocks == 0) c.zero_output();
  for (int i = 0; i < w.blocks; ++i) {
    const uint32_t b = ring + i;
    const int hb = H::stage(b);
    ptx::barrier_wait(st.p_full(hb), H::parity(b));
    if (i > 0) {
      const float* f = st.factors(hb);
      c.rescale_output(make_float2(f[c.tile_row()], f[c.tile_row() + 8]));
    }
    ptx::barrier_wait(st.v_full(st.stage(b)), st.parity(b));
    ptx::wgmma_fence();
    c.issue_pv_shared(st.template probs<T>(hb), st.template v<T>(st.stage(b)), i > 0);
    ptx::wgmma_wait<0>();
    c.hold_output();
    st.release(st.v_empty(st.stage(b)));
    ptx::barrier_arrive(st.p_empty(hb));
  }
  ptx::barrier_wait(st.scales_full(), Ring<1>::parity(items));
  c.epilogue_with(st.out_scales());
  ptx::barrier_arrive(st.scales_empty());
}

}  // namespace detail

// A persistent grid (one CTA per SM) over the (query tile of BM rows, query head) items, longest first.
template <class T, int kK, int kV>
__global__ void __launch_bounds__(ForwardTile<kK, kV>::kThreads, 1)
    forward_kernel(const __grid_constant__ ForwardParams p, const __grid_constant__ TileSchedule sched) {
#if FG_HOPPER_BODY
  using Tile = ForwardTile<kK, kV>;
  using Stages = detail::Stages<kK, kV>;
  extern __shared__ unsigned char raw[];
  __shared__ alignas(8) uint64_t bars[Stages::kBarriers];
  const Stages st{{}, ptx::swizzle_aligned(raw), bars};
  if (threadIdx.x == 0) st.init();
  __syncthreads();

  // Nothing stays live across setmaxnreg (ptxas would spill it): each role derives what it needs afterwards.
  if (threadIdx.x < 128) {
    ptx::setmaxnreg_dec<Tile::kProducerRegs>();
    const int warp = threadIdx.x / 32;
    if (warp == 0 && ptx::elect_one()) {
      uint32_t ring = 0, tiles = 0;
      detail::for_each_work<Tile::BM, Tile::BN>(p, sched, [&](const detail::Work& w) {
        if (w.blocks <= 0) return;
        detail::produce<T>(p, st, w, ring, tiles);
        ring += w.blocks, ++tiles;
      });
    } else if (warp == 1 && p.a.has_gate) {
      uint32_t ring = 0;
      detail::for_each_work<Tile::BM, Tile::BN>(p, sched, [&](const detail::Work& w) {
        if (w.blocks <= 0) return;
        detail::stage_gate(p.a, st, w, ring);
        ring += w.blocks;
      });
    } else if (warp >= 2 && detail::output_plan<Tile>(p.a).any()) {
      const detail::OutputPlan plan = detail::output_plan<Tile>(p.a);
      uint32_t items = 0;
      detail::for_each_work<Tile::BM, Tile::BN>(p, sched, [&](const detail::Work& w) {
        if (!w.valid) return;
        detail::store_outputs<T>(p.a, st, w, plan, items++);
      });
    }
    return;
  }

  ptx::setmaxnreg_inc<Tile::kConsumerRegs>();
  if constexpr (Tile::kSplitV) {
    const bool scores = ptx::warpgroup_index() == 1;
    uint32_t ring = 0, tiles = 0, items = 0;
    detail::for_each_work<Tile::BM, Tile::BN>(p, sched, [&](const detail::Work& w) {
      if (!w.valid) return;
      if (scores) detail::score_half<T>(p, st, w, ring, tiles, items);
      else detail::value_half<T>(p, st, w, ring, items);
      if (w.blocks > 0) ring += w.blocks, ++tiles;
      ++items;
    });
  } else {
    const detail::Turns<Tile::kConsumers> turns(ptx::warpgroup_index() - 1);
    const detail::OutputPlan plan = detail::output_plan<Tile>(p.a);
    uint32_t ring = 0, tiles = 0, items = 0;
    detail::for_each_work<Tile::BM, Tile::BN>(p, sched, [&](const detail::Work& w) {
      if (!w.valid) return;
      const int me = ptx::warpgroup_index() - 1;
      detail::Consumer<T, kK, kV> consumer(p.a, w, me, st.template q<T>());
      if (w.blocks > 0) {
        detail::consume(consumer, st, turns, w, ring, tiles, p.a, [](uint32_t, const auto&, float2) {});
        ring += w.blocks, ++tiles;
      } else {
        consumer.zero_output();
      }
      if (plan.any()) {
        Ring<1>::wait_free(st.out_empty(me), items);  // the storers have the previous item's rows out
        consumer.epilogue(plan, st.out_stage(me));
        ptx::barrier_arrive(st.out_full(me));
      } else {
        consumer.epilogue();
      }
      ++items;
    });
    turns.finish();
  }
#endif
}

template <class T, int kK, int kV>
void launch_forward(const ForwardParams& p, const TileSchedule& sched, int sm_count, CUstream_st* stream) {
  using Tile = ForwardTile<kK, kV>;
  const int64_t items = sched.num_tiles * p.a.HQ;
  if (items == 0) return;
  const auto kernel = forward_kernel<T, kK, kV>;
  FLASHGATE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            static_cast<int>(Tile::smem_bytes())));
  const unsigned ctas = static_cast<unsigned>(items < sm_count ? items : sm_count);
  kernel<<<ctas, Tile::kThreads, Tile::smem_bytes(), stream>>>(p, sched);
  FLASHGATE_CHECK_LAUNCH("hopper forward_kernel");
}
#endif  // __CUDACC__

}  // namespace flashgate::cuda::hopper
