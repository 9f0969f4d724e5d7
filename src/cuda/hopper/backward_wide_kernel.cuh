// The Hopper backward's wide buckets (sm_90a): dK, dV of one key tile (BN keys) and one kv head for K and V up to
// 256 or 512 (a pair of CTAs, each with half of the head dims), or K up to 192 with V up to 128; fp16/bf16, both
// modes; dQ added into the fp32 accumulator; with kRowSums (a gate or a sink) also the row sums E (and, with a gate,
// the mass) and the gate's column sums of dS. Its shape is backward.h's DkdvWideTile: the two consumers split the
// keys for S and dP and the head dims for dV, dK and dQ.
//
// Warpgroup 0 produces exactly as in the narrow kernel (backward_roles.cuh: bwd_detail::produce, stage_terms); where
// the bucket stages dQ (DkdvWideTile::kStagedDq) its warp 3 adds the consumers' staged dQ (bwd_detail::write_dq).
// A consumer's step: S and dP of its BN / 2 keys (queries as rows, P made while dP runs), dS; once the other consumer
// is done with the last step's P and dS, P and dS into shared memory; once both consumers' halves are in, dV^T +=
// dO^T P and dK^T += Q^T dS for its 64-dim blocks and dQ = dS K for its 64-column blocks, staged for the writer warp
// or added by the consumer; dK and dV leave through shared memory at the end. Each consumer owns a range of blocks of
// each kind so that both make as many: 256 / 256 halves every kind; 192 / 128 gives consumer 0 the dK blocks and dQ
// block 0, consumer 1 the dV blocks and dQ blocks 1-2. A pair (512 / 512) is two 256 / 256 CTAs on the two halves of
// the head dims that swap their partial S and dP each step (Exchange) and make the same P and dS from the sums.
//
// Shared memory (kK, kV: the CTA's head dims, a pair's half): K [kK/64][BN keys][64], V [kV/64][BN keys][64]; per
// stage Q [kK/64][64 rows][64], dO [kV/64][64 rows][64]; P, dS [BN/64 key blocks][64 rows][64] (per P / dS buffer);
// a pair's exchange slots [2][consumer][S | dP][4 float4][128 threads]; the terms [stage][lse | D][64]; the row sums'
// partials [2][consumer][E | mass][64] and the column sums' [consumer][warp][32], the gate's key terms [64]; with
// kStagedDq the staged dQ tile [16-row group][chunk][lane] float4 (dq_staging.cuh). Every
// 64-column block 128-byte swizzled and 1024-byte aligned (cuda/ptx/wgmma.h has the layouts): P and dS serve as MN-
// major B operands of dV^T and dK^T (rows: the K dimension, the queries) and dS as the K-major A operand of dQ
// (rows: M, the queries).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/backward_params.h"
#include "cuda/common/cuda_check.h"
#include "cuda/common/element.h"
#include "cuda/common/online_softmax.h"
#include "cuda/common/visibility.h"
#include "cuda/hopper/backward.h"
#include "cuda/hopper/backward_roles.cuh"
#include "cuda/hopper/dq_staging.cuh"
#include "cuda/hopper/ring.h"
#include "cuda/ptx/cluster.h"
#include "cuda/ptx/fast_math.h"
#include "cuda/ptx/tma.h"
#include "cuda/ptx/warpgroup.h"
#include "cuda/ptx/wgmma.h"

namespace flashgate::cuda::hopper {

#if defined(__CUDACC__)
namespace bwd_wide {

using bwd_detail::KeyWork;
using bwd_detail::Step;

// The CTA's buffers and barriers: the narrow kernel's interface (the producer's and the term warp's code is shared)
// with P, dS and the sums' partials in place of dS^T.
template <int kK, int kV>
struct Buffers : Ring<DkdvWideTile<kK, kV>::kStages>, bwd_detail::StepBarriers<DkdvWideTile<kK, kV>::kStages> {
  using Tile = DkdvWideTile<kK, kV>;
  using Ring<Tile::kStages>::kS;
  static constexpr int kReleasers = 8;  // one lane per consumer warp

  using KvRing = Ring<1>;  // one item a CTA: the producer's first wait_free passes at once

  // Deterministic mode, per step: turn_ready when the turn warp saw every earlier add to the step's dQ rows counted,
  // turn_done when the warps that add (the writer warp where dQ is staged, else every consumer warp) made their adds
  // there (bwd_detail::take_turns).
  using TurnRing = Ring<2>;
  // Tile::kStagedDq: the step's staged dQ tile (dq_staging.cuh), dq_full when both consumers' 256 threads wrote it,
  // dq_empty when the writer's copy engine read it.
  using DqRing = Ring<1>;

  // then met; a pair: do_full, do_empty, xch_full[2][2][2], xch_empty[2][2]; then turn_ready[2], turn_done[2],
  // dq_full, dq_empty
  using Bars = bwd_detail::StepBarriers<kS>;
  unsigned char* base;
  static constexpr bool kMeets = kK != kV;  // the consumers run copies of their code of their own (Consumer's kMe)
  static constexpr bool kPaired = Tile::kPair == 2;
  // A single stage loads dO and Q on barriers of their own (q_full / q_empty then hold Q alone): dO is free once dV^T
  // is made, before Q.
  static constexpr bool kDoApart = Tile::kStages == 1;
  static constexpr int kTurnBarriers = Bars::kCount + (kMeets ? 1 : 0) + (kDoApart ? 2 : 0) + (kPaired ? 12 : 0);
  static constexpr int kBarriers = kTurnBarriers + 2 * 2 + 2;
  // One consumer's exchange slot: its S and dP partials, [S | dP][kKeys / 8 float4 a thread][128 threads].
  static constexpr uint32_t kSlotBytes = Tile::kExchangeBytes / 4;
  using ExchangeRing = Ring<2>;

  template <class T>
  __device__ __forceinline__ T* k() const { return reinterpret_cast<T*>(base); }
  template <class T>
  __device__ __forceinline__ T* v() const { return reinterpret_cast<T*>(base + Tile::kKBytes); }
  static constexpr uint32_t kStageBytes = Tile::kQBytes + Tile::kDoBytes;
  template <class T>
  __device__ __forceinline__ T* q(int s) const {
    return reinterpret_cast<T*>(base + Tile::kKBytes + Tile::kVBytes + s * kStageBytes);
  }
  template <class T>
  __device__ __forceinline__ T* dout(int s) const { return q<T>(s) + Tile::kQBytes / 2; }
  // P (which 0) or dS (which 1) of P / dS buffer `buffer`.
  template <class T>
  __device__ __forceinline__ T* pds(int which, int buffer) const {
    return reinterpret_cast<T*>(base + Tile::kKBytes + Tile::kVBytes + kS * kStageBytes +
                                (2 * buffer + which) * Tile::kPBytes);
  }
  // A pair: consumer c's exchange slot `slot`, where the other CTA's consumer c puts its partial S and dP.
  __device__ __forceinline__ float4* exchange(int slot, int c) const {
    return reinterpret_cast<float4*>(base + Tile::kKBytes + Tile::kVBytes + kS * kStageBytes +
                                     Tile::kPdsBuffers * 2 * Tile::kPBytes + (2 * slot + c) * kSlotBytes);
  }
  // The row offsets r[BM] then D[BM] of stage s.
  __device__ __forceinline__ float* terms(int s) const {
    return reinterpret_cast<float*>(base + Tile::kKBytes + Tile::kVBytes + kS * kStageBytes +
                                    Tile::kPdsBuffers * 2 * Tile::kPBytes + Tile::kExchangeBytes) +
           s * 2 * Tile::BM;
  }
  // The consumers' partial E and mass of step b's rows (two buffers by step parity), [consumer][E | mass][BM].
  __device__ __forceinline__ float* sums(int b) const { return terms(kS) + b * 2 * 2 * Tile::BM; }
  // The consumer warps' partial column sums of dS, [consumer][warp][32 keys].
  __device__ __forceinline__ float* colsums() const { return sums(2); }
  // The gate's key terms Gc_key log2 e of the tile's keys for the current query head, [BN].
  __device__ __forceinline__ float* key_terms() const { return colsums() + 2 * 4 * 32; }
  // Tile::kStagedDq: the step's staged dQ tile (16-byte aligned for the copy engine).
  __device__ __forceinline__ unsigned char* dq_slot() const {
    return reinterpret_cast<unsigned char*>(key_terms() + Tile::BN);
  }
  using Bars::kv_full, Bars::kv_empty, Bars::q_full, Bars::q_empty, Bars::t_full, Bars::t_empty;
  // Where each consumer has its own copy of the code (192 / 128): both consumers' threads at one point, the n-th
  // time.
  __device__ __forceinline__ uint64_t* met() const { return this->bars + Bars::kCount; }
  __device__ __forceinline__ void meet(uint32_t n) const {
    ptx::barrier_arrive(met());
    ptx::barrier_wait(met(), n & 1);
  }
  // kDoApart: the dO stage's barriers; a pair: consumer c's exchange slot's (full: the other CTA's partial S (which 0)
  // or dP (which 1) landed; empty: the other CTA read what this one put into its slot).
  __device__ __forceinline__ uint64_t* do_full() const { return this->bars + Bars::kCount + (kMeets ? 1 : 0); }
  __device__ __forceinline__ uint64_t* do_empty() const { return do_full() + 1; }
  __device__ __forceinline__ uint64_t* xch_full(int slot, int c, int which) const {
    return do_full() + 2 + 2 * (2 * slot + c) + which;
  }
  __device__ __forceinline__ uint64_t* xch_empty(int slot, int c) const { return do_full() + 10 + 2 * slot + c; }
  __device__ __forceinline__ uint64_t* turn_ready(int t) const { return this->bars + kTurnBarriers + t; }
  __device__ __forceinline__ uint64_t* turn_done(int t) const { return this->bars + kTurnBarriers + 2 + t; }
  __device__ __forceinline__ uint64_t* dq_full() const { return this->bars + kTurnBarriers + 4; }
  __device__ __forceinline__ uint64_t* dq_empty() const { return this->bars + kTurnBarriers + 5; }

  // row_sums: with a staged dQ the consumers still add the row sums themselves, in deterministic mode in the turns.
  __device__ __forceinline__ void init(bool row_sums) const {
    ptx::barrier_init(kv_full(), 1), ptx::barrier_init(kv_empty(), kReleasers);
    for (int s = 0; s < kS; ++s) {
      ptx::barrier_init(q_full(s), 1), ptx::barrier_init(q_empty(s), kReleasers);
      ptx::barrier_init(t_full(s), 32), ptx::barrier_init(t_empty(s), 128 * 2);
    }
    if (kMeets) ptx::barrier_init(met(), 256);
    for (int t = 0; t < 2; ++t)
      ptx::barrier_init(turn_ready(t), 1),
          ptx::barrier_init(turn_done(t), Tile::kStagedDq ? 1 + (row_sums ? kReleasers : 0) : kReleasers);
    ptx::barrier_init(dq_full(), 2 * 128), ptx::barrier_init(dq_empty(), 1);
    if (kDoApart) ptx::barrier_init(do_full(), 1), ptx::barrier_init(do_empty(), kReleasers);
    if (kPaired) {
      for (int slot = 0; slot < 2; ++slot)
        for (int c = 0; c < 2; ++c) {
          ptx::barrier_init(xch_full(slot, c, 0), 1), ptx::barrier_init(xch_full(slot, c, 1), 1);
          ptx::barrier_init(xch_empty(slot, c), 4);
        }
    }
    ptx::fence_barrier_init();
  }
  __device__ __forceinline__ void release_q(int s) const { this->release(q_empty(s)); }
  __device__ __forceinline__ void release_do() const { this->release(do_empty()); }
};

// A pair's consumer me swaps its partial S and dP (this CTA's half of the head dims) for the other CTA's, so that
// both CTAs hold the whole S and dP, the same bits (a + b either way round): open_slot, then send each partial as
// soon as its wgmmas are done and add the other's (receive) as late as it is needed, then free_slot. The partials go
// into the other CTA's slot it % 2 by stores that complete on its barriers; what went there two steps ago is read.
template <int kK, int kV>
struct Exchange {
  using Buf = Buffers<kK, kV>;
  const Buf& buf;
  const int slot, me, t;
  const uint32_t other;  // the other CTA's rank
  const int it;

  __device__ __forceinline__ Exchange(const Buf& b, int step, int consumer, uint32_t rank)
      : buf(b), slot(Buf::ExchangeRing::stage(step)), me(consumer), t(ptx::warpgroup_thread()), other(rank ^ 1u),
        it(step) {}

  // This step's receipts expected, and the other CTA done with what this one sent into the slot two steps ago.
  __device__ __forceinline__ void open_slot() const {
    if (t == 0)
      for (int which = 0; which < 2; ++which) ptx::barrier_arrive_expect(buf.xch_full(slot, me, which), kPartBytes);
    Buf::ExchangeRing::wait_free(buf.xch_empty(slot, me), it);
  }
  // Partial `which` (0: S, 1: dP) into the other CTA's slot.
  template <int kS>
  __device__ __forceinline__ void send(const float (&x)[kS], int which) const {
    static_assert(2 * kS * 4 * 128 == Buf::kSlotBytes, "a slot holds a consumer's S and dP");
    float* const theirs = ptx::peer_shared(reinterpret_cast<float*>(buf.exchange(slot, me)), other);
    uint64_t* const theirs_full = ptx::peer_shared(buf.xch_full(slot, me, which), other);
#pragma unroll
    for (int i = 0; i < kS / 4; ++i) {
      const float v[4] = {x[4 * i], x[4 * i + 1], x[4 * i + 2], x[4 * i + 3]};
      ptx::store_to_peer(theirs + 4 * ((which * kS / 4 + i) * 128 + t), v, theirs_full);
    }
  }
  // The other CTA's partial `which` added to x.
  template <int kS>
  __device__ __forceinline__ void receive(float (&x)[kS], int which) const {
    ptx::barrier_wait(buf.xch_full(slot, me, which), Buf::ExchangeRing::parity(it));
    const float4* const mine = buf.exchange(slot, me);
#pragma unroll
    for (int i = 0; i < kS / 4; ++i) {
      const float4 a = mine[(which * kS / 4 + i) * 128 + t];
      x[4 * i] += a.x, x[4 * i + 1] += a.y, x[4 * i + 2] += a.z, x[4 * i + 3] += a.w;
    }
  }
  __device__ __forceinline__ void free_slot() const {
    __syncwarp();  // every lane's reads are done before its warp frees the slot
    if (threadIdx.x % 32 == 0) ptx::arrive_on_peer(ptx::peer_shared(buf.xch_empty(slot, me), other));
  }

 private:
  static constexpr uint32_t kPartBytes = Buf::kSlotBytes / 2;
};

// Where both consumers own as many blocks of each kind (256 / 256), one copy of the consumer's code serves both (its
// index only offsets the blocks); else each has its own (kMe; two copies of the code in the kernel).
constexpr int kEitherConsumer = -1;

// Consumer warpgroup me: keys BN / 2 me.. of the tile for S and dP; for dK^T and dV^T (head dims as rows) and dQ
// (head dims as columns) its blocks (kDkCount from dk_first(), kDvCount from dv_first(), kDqCount from dq_first()).
// kMe: me at compile time, or kEitherConsumer.
template <class T, int kK, int kV, bool kRowSums, int kMe>
class Consumer {
  using Tile = DkdvWideTile<kK, kV>;
  using Buf = Buffers<kK, kV>;
  static constexpr int BM = Tile::BM, BN = Tile::BN;
  static constexpr int kKeys = BN / 2;  // S, dP columns of this consumer
  static constexpr int kS = kKeys / 2;  // S, dP accumulators per thread (m64 n kKeys)
  static constexpr bool kSquare = kK == kV;  // 256 / 256 or 512 / 512, else 192 / 128
  static constexpr int kCtaK = Tile::kCtaK, kCtaV = Tile::kCtaV;  // this CTA's head dims (a pair's half)
  static_assert(kSquare || kMe == 0 || kMe == 1, "192 / 128 gives the consumers different blocks");
  using Scale = PScale<T, kRowSums>;  // P's factor (element.h) where a sink can come: with the row sums
  // Counts of this consumer's blocks: dK^T rows, dV^T rows and dQ columns. 256 / 256 halves every kind; 192 / 128
  // gives consumer 0 the three dK^T blocks and dQ's first, consumer 1 the two dV^T blocks and dQ's other two.
  static constexpr int kDkCount = kSquare ? 2 : kMe == 0 ? 3 : 0, kDvCount = kSquare ? 2 : kMe == 0 ? 0 : 2;
  static constexpr int kDqCount = kSquare ? 2 : kMe == 0 ? 1 : 2;
  static_assert(kDkCount + kDvCount + kDqCount == (2 * Tile::kKBlocks + Tile::kVBlocks) / 2,
                "both consumers make as many blocks");

 public:
  static constexpr int kDqAcc = kDqCount * 32;  // accumulators per thread of dQ (m64, n 64 kDqCount)

  // rank: the CTA's place in its pair (0 alone), whose half of the head dims it makes.
  __device__ __forceinline__ Consumer(const bwd::BackwardParams& p, const KeyWork& w, int me, int rank)
      : p_(p), w_(w), me_(me), rank_(rank), lane_(threadIdx.x % 32), warp_(ptx::warpgroup_thread() / 32) {
#pragma unroll
    for (int t = 0; t < kDkCount; ++t)
#pragma unroll
      for (int i = 0; i < BN / 2; ++i) dk_[t][i] = 0.f;
#pragma unroll
    for (int t = 0; t < kDvCount; ++t)
#pragma unroll
      for (int i = 0; i < BN / 2; ++i) dv_[t][i] = 0.f;
  }

  // The first of this consumer's blocks of each kind.
  __device__ __forceinline__ int dk_first() const { return kSquare ? 2 * me_ : 0; }
  __device__ __forceinline__ int dv_first() const { return kSquare ? 2 * me_ : 0; }
  __device__ __forceinline__ int dq_first() const { return kSquare ? 2 * me_ : me_; }

  // kRowSums: this consumer's keys' terms Gc_key log2 e for query head h (0 without a gate; a slice pair's relative
  // to its anchor, gate_anchor) into `terms` (shared, [BN]); every thread of the consumer calls it, after the last
  // step that read the previous head's.
  __device__ __forceinline__ void load_key_terms(int64_t h, float* terms) const {
    if constexpr (kRowSums) {
      const int t = ptx::warpgroup_thread(), kk = w_.j0 + kKeys * me_ + t;
      if (t < kKeys) {
        const float* gc = p_.a.has_gate ? p_.a.gc_key_row(w_.seq.batch, h) + w_.seq.start : nullptr;
        const float anchor = gc ? bwd_detail::gate_anchor<BN>(p_.a, w_, h) : 0.f;
        terms[kKeys * me_ + t] = gc && kk < p_.a.key_len(w_.seq.len) ? (gc[kk] - anchor) * kLog2e : 0.f;
      }
      ptx::named_barrier_sync(2 + me_, 128);
    }
  }

  // S = Q K^T and dP = dO V^T for this consumer's keys, as two wgmma groups (P is made while dP runs).
  __device__ __forceinline__ void issue_scores(float (&s)[kS], float (&dp)[kS], const Buf& buf, int stage) const {
    const T* k = buf.template k<T>() + kKeys * me_ * 64;  // rows kKeys me.. of every 64-column block
    const T* v = buf.template v<T>() + kKeys * me_ * 64;
    const uint64_t q0 = ptx::k_major_descriptor(buf.template q<T>(stage), BM, 0), k0 = ptx::k_major_descriptor(k, BN, 0);
#pragma unroll
    for (int step = 0; step < kCtaK / 16; ++step)
      ptx::Wgmma<T, kKeys, 0>::ss(s, ptx::descriptor_step(q0, BM, step), ptx::descriptor_step(k0, BN, step), step > 0);
    ptx::wgmma_commit();
    const uint64_t do0 = ptx::k_major_descriptor(buf.template dout<T>(stage), BM, 0),
                   v0 = ptx::k_major_descriptor(v, BN, 0);
#pragma unroll
    for (int step = 0; step < kCtaV / 16; ++step)
      ptx::Wgmma<T, kKeys, 0>::ss(dp, ptx::descriptor_step(do0, BM, step), ptx::descriptor_step(v0, BN, step),
                                  step > 0);
    ptx::wgmma_commit();
  }

  // This thread's query rows in the step (accumulator rows g and g + 8 of its warp's 16) and keys in the tile.
  __device__ __forceinline__ int row(int half) const { return 16 * warp_ + lane_ / 4 + 8 * half; }
  __device__ __forceinline__ int key(int j, int odd) const { return kKeys * me_ + 8 * j + 2 * (lane_ % 4) + odd; }

  // P = exp2(S scale log2 e - row offset) in place in s, the step's queries at key positions from pos0 (i0 +
  // key_shift); kMasked: the step's block crosses the causal diagonal, the window's edge or the keys' end (a slice
  // pair's key_end: a sequence's keys past its end meet only rows past it, whose P is 0 through their terms).
  template <bool kMasked>
  __device__ __forceinline__ void probabilities(float (&s)[kS], const float* terms, const float* key_terms,
                                                int pos0) const {
    const AttentionParams& a = p_.a;
    const unsigned bound = distance_bound(a.window);
    const float r[2] = {terms[row(0)], terms[row(1)]};
#pragma unroll
    for (int j = 0; j < kKeys / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int half = e >> 1, q = pos0 + row(half), kk = w_.j0 + key(j, e & 1);
        const float offset = r[half] + (kRowSums ? key_terms[key(j, e & 1)] : 0.f);
        float pr = ptx::exp2_ftz(fmaf(s[4 * j + e], a.scale_log2, -offset));
        if (kMasked && (!visible_at_distance(q - kk, bound) || kk >= a.key_end)) pr = 0.f;
        s[4 * j + e] = pr;
      }
  }

  // dS = P (dP - D) in place in dp (P carries Scale's factor, the staged D its inverse: stage_terms). kRowSums: this
  // consumer's parts of E (sum_keys P dP) and the mass (sum_keys P) of the thread's two rows, summed over the quad's
  // keys, into `sums` ([consumer][E | mass][BM]; add_sums adds the two consumers' once both are in), and the rows' dS
  // added to the keys' column sums.
  __device__ __forceinline__ void gradients(const float (&s)[kS], float (&dp)[kS], const float* terms, float* sums) {
    const float d[2] = {terms[BM + row(0)], terms[BM + row(1)]};
    float e_part[2] = {0.f, 0.f}, mass_part[2] = {0.f, 0.f};
#pragma unroll
    for (int j = 0; j < kKeys / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float pr = s[4 * j + e], dpv = dp[4 * j + e];
        dp[4 * j + e] = pr * Scale::dp_minus_d(dpv, d[e >> 1]);
        if constexpr (kRowSums) {
          e_part[e >> 1] += pr * dpv;
          mass_part[e >> 1] += pr;
          colsum_[2 * j + (e & 1)] += dp[4 * j + e];
        }
      }
    if constexpr (kRowSums) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const float e_sum = quad_sum(e_part[half]) * Scale::kInv;
        const float mass_sum = quad_sum(mass_part[half]) * Scale::kInv;
        if (lane_ % 4 == 0) sums[(2 * me_) * BM + row(half)] = e_sum, sums[(2 * me_ + 1) * BM + row(half)] = mass_sum;
      }
    }
  }
  __device__ __forceinline__ void add_sums(const float* sums, int64_t h, int i0) const {
    if constexpr (kRowSums) {
      const int t = ptx::warpgroup_thread();  // consumer 0's threads 0..63, one row each
      if (me_ != 0 || rank_ != 0 || t >= BM || i0 + t >= w_.seq.len) return;  // a pair: both hold the same sums
      const int64_t at = p_.row_index(w_.seq.batch, h, w_.seq.start) + i0 + t;
      atomicAdd(p_.E + at, sums[t] + sums[2 * BM + t]);
      if (p_.a.has_gate) atomicAdd(p_.mass + at, sums[BM + t] + sums[3 * BM + t]);
    }
  }

  // kRowSums with a gate: at the end of query head h's steps, the keys' sums of dS over its queries (the quads' rows
  // by shuffles, the consumer's 4 warps through `colsums`). Every thread of the consumer calls it.
  __device__ __forceinline__ void store_colsum(int64_t h, float* colsums) {
    if constexpr (kRowSums) {
      float* mine = colsums + me_ * 4 * 32;
#pragma unroll
      for (int i = 0; i < kKeys / 4; ++i) {
        float v = colsum_[i];
        v += __shfl_xor_sync(0xffffffffu, v, 4);
        v += __shfl_xor_sync(0xffffffffu, v, 8);
        v += __shfl_xor_sync(0xffffffffu, v, 16);
        colsum_[i] = 0.f;
        if (lane_ < 4) mine[warp_ * 32 + key(i / 2, i % 2) - kKeys * me_] = v;
      }
      ptx::named_barrier_sync(2 + me_, 128);
      const int t = ptx::warpgroup_thread();
      if (t < kKeys && p_.a.has_gate && rank_ == 0) {
        const int kk = w_.j0 + kKeys * me_ + t;
        if (kk < p_.a.key_len(w_.seq.len))
          p_.colsum[p_.key_index(w_.seq.batch, h, w_.seq.start) + kk] =
              mine[t] + mine[32 + t] + mine[64 + t] + mine[96 + t];
      }
      ptx::named_barrier_sync(2 + me_, 128);  // read before the next head's partials land
    }
  }

  // This consumer's columns of x into a [64-key block][64 rows][64] swizzled tile, then a fence so that the tensor
  // cores see them.
  __device__ __forceinline__ void store_tile(const float (&x)[kS], T* tile) const {
    unsigned char* bytes = reinterpret_cast<unsigned char*>(tile);
#pragma unroll
    for (int j = 0; j < kKeys / 8; ++j)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int r = row(half), chunk = key(j, 0) / 8;
        // One 64-key block where BN is 64 (written apart: with the consumer index known only at run time, the
        // block arithmetic cost the 512 pair's row-sum consumer 12 more bytes of spills).
        const int at = BN > 64 ? chunk / 8 * ptx::swizzle_block_bytes(BM) + ptx::swizzled_chunk(r, chunk % 8)
                               : ptx::swizzled_chunk(r, chunk);
        *reinterpret_cast<uint32_t*>(bytes + at + 4 * (lane_ % 4)) =
            ptx::pack2<T>(x[4 * j + 2 * half], x[4 * j + 2 * half + 1]);
      }
    ptx::fence_async_shared();
  }

  // dV^T += dO^T P and dK^T += Q^T dS for this consumer's blocks of head dims (dO and Q read transposed: M is their
  // contiguous dimension), then dQ = dS K for its blocks of columns (K read transposed); two wgmma groups (one Q / dO
  // stage: three, dV^T's first, so that dO is released before the rest is done).
  // Per-step descriptors here: from bases by adds (as the other groups take theirs) measured no better beyond the
  // run-to-run spread at D256, K192 V128 and K512 V512.
  __device__ __forceinline__ void issue_kv(const Buf& buf, int stage, const T* p, const T* ds) {
#pragma unroll
    for (int t = 0; t < kDvCount; ++t)
#pragma unroll
      for (int s = 0; s < BM / 16; ++s)
        ptx::Wgmma<T, BN, 1>::template ss<1>(
            dv_[t], ptx::mn_major_descriptor(buf.template dout<T>(stage) + (dv_first() + t) * BM * 64, BM, s),
            ptx::mn_major_descriptor(p, BM, s), true);
    if constexpr (Buf::kDoApart) ptx::wgmma_commit();
#pragma unroll
    for (int t = 0; t < kDkCount; ++t)
#pragma unroll
      for (int s = 0; s < BM / 16; ++s)
        ptx::Wgmma<T, BN, 1>::template ss<1>(
            dk_[t], ptx::mn_major_descriptor(buf.template q<T>(stage) + (dk_first() + t) * BM * 64, BM, s),
            ptx::mn_major_descriptor(ds, BM, s), true);
    ptx::wgmma_commit();
  }
  __device__ __forceinline__ void issue_dq(float (&dq)[kDqAcc], const Buf& buf, const T* ds) const {
    const T* k = buf.template k<T>() + dq_first() * BN * 64;  // 64-column blocks dq_first().. of K
    const uint64_t ds0 = ptx::k_major_descriptor(ds, BM, 0), k0 = ptx::mn_major_descriptor(k, BN, 0);
#pragma unroll
    for (int s = 0; s < BN / 16; ++s)
      ptx::Wgmma<T, 64 * kDqCount, 1>::ss(dq, ptx::descriptor_step(ds0, BM, s), ptx::mn_major_step(k0, s), s > 0);
    ptx::wgmma_commit();
  }

  // Adds dQ (rows as the accumulator's warp rows, this consumer's columns) into dq_acc's fragment order.
  __device__ __forceinline__ void add_dq(const float (&dq)[kDqAcc], int64_t h, int i0) const {
    const AttentionParams& a = p_.a;
    const int i_first = i0 + 16 * warp_, col0 = kCtaK * rank_ + 64 * dq_first();
    if (i_first >= w_.seq.len) return;
    const int64_t row0 = bwd::dq_row(a, w_.seq.batch, h, w_.seq_index, w_.seq.start);
    float* at = p_.dq_acc + bwd::dq_acc_offset(row0, i_first, col0, p_.K16) + 4 * lane_;
#pragma unroll
    for (int j = 0; j < 8 * kDqCount; ++j) {
      if (col0 + 8 * j >= p_.K16) break;
#if FG_HOPPER_BWD_BODY
      ptx::red_add_v4_f32(at + j * 128, make_float4(dq[4 * j], dq[4 * j + 1], dq[4 * j + 2], dq[4 * j + 3]));
#endif
    }
  }

  // Tile::kStagedDq: step `it`'s dQ (this consumer's columns) into the staged tile, once the writer has read step
  // it - 1's; then this thread's arrival on dq_full.
  __device__ __forceinline__ void stage_dq(const float (&dq)[kDqAcc], const Buf& buf, int it) const {
    Buf::DqRing::wait_free(buf.dq_empty(), it);
    dq_staging::write_group(dq, buf.dq_slot(), warp_, 8 * dq_first(), p_.K16 / 8);
    ptx::barrier_arrive(buf.dq_full());
  }

  __device__ __forceinline__ void hold_kv() {
#pragma unroll
    for (int t = 0; t < kDkCount; ++t) ptx::wgmma_hold(dk_[t]);
#pragma unroll
    for (int t = 0; t < kDvCount; ++t) ptx::wgmma_hold(dv_[t]);
  }

  // dK^T (times scale) and dV^T into row-major [BN keys][kK] and [BN keys][kV] tiles of T in shared memory (dk_tile,
  // dv_tile), this consumer's blocks; the caller copies them out once both consumers wrote theirs.
  __device__ __forceinline__ void stage_out(T* dk_tile, T* dv_tile) const {
#pragma unroll
    for (int t = 0; t < kDkCount; ++t) stage_block<kCtaK>(dk_[t], dk_first() + t, p_.a.scale, dk_tile);
#pragma unroll
    for (int t = 0; t < kDvCount; ++t) stage_block<kCtaV>(dv_[t], dv_first() + t, Scale::kInv, dv_tile);
  }

 private:
  // One m64n64 block of dK^T or dV^T (head dims 64 block.. as rows, keys as columns), times `factor`, into its
  // columns of a row-major [BN keys][kDim] tile.
  template <int kDim>
  __device__ __forceinline__ void stage_block(const float (&x)[BN / 2], int block, float factor, T* tile) const {
    const int g = lane_ / 4, c = lane_ % 4;
    uint16_t* out = reinterpret_cast<uint16_t*>(tile);
#pragma unroll
    for (int j = 0; j < BN / 8; ++j)
#pragma unroll
      for (int half = 0; half < 2; ++half) {  // keys 8j + 2c and the next of head dim `dim`
        const int dim = 64 * block + 16 * warp_ + g + 8 * half, at = (8 * j + 2 * c) * kDim + dim;
        const int i = 4 * j + 2 * half;
        const uint32_t packed = ptx::pack2<T>(x[i] * factor, x[i + 1] * factor);
        out[at] = static_cast<uint16_t>(packed), out[at + kDim] = static_cast<uint16_t>(packed >> 16);
      }
  }

  const bwd::BackwardParams& p_;
  const KeyWork w_;
  const int me_, rank_, lane_, warp_;
  // dK^T, dV^T: m64nBN tiles, head dims as rows (one unused tile where a consumer has none of a kind).
  float dk_[kDkCount > 0 ? kDkCount : 1][BN / 2], dv_[kDvCount > 0 ? kDvCount : 1][BN / 2];
  // kRowSums: the thread's keys' dS column sums (key(j, odd) at 2j + odd).
  float colsum_[kRowSums ? kKeys / 4 : 1] = {};
};

// The staged dK and dV tiles ([BN keys][kCtaK] and [BN keys][kCtaV]) to dk and dv by 16-byte pieces, all 256
// consumer threads; a pair's CTA `rank` has columns kCtaK rank.. (kCtaV rank.. of dv).
template <class T, int kK, int kV>
__device__ __forceinline__ void copy_out(const bwd::BackwardParams& p, const KeyWork& w, int rank, const T* dk_tile,
                                         const T* dv_tile) {
  using Tile = DkdvWideTile<kK, kV>;
  constexpr int kCtaK = Tile::kCtaK, kCtaV = Tile::kCtaV;
  constexpr int kChunks = (kCtaK > kCtaV ? kCtaK : kCtaV) * 2 / 16;  // 16-byte pieces of the wider row
  const int t = threadIdx.x - 128;
  for (int i = t; i < Tile::BN * kChunks; i += 256) {
    const int key = i / kChunks, chunk = i % kChunks, col = chunk * 8;
    if (w.j0 + key >= p.a.key_len(w.seq.len)) continue;
    const int64_t token = w.seq.start + w.j0 + key;
    if (col < kCtaK && kCtaK * rank + col < p.a.K)
      *reinterpret_cast<uint4*>(p.dk.template row<T>(w.seq.batch, token, w.hk) + kCtaK * rank + col) =
          *reinterpret_cast<const uint4*>(dk_tile + key * kCtaK + col);
    if (col < kCtaV && kCtaV * rank + col < p.a.V)
      *reinterpret_cast<uint4*>(p.dv.template row<T>(w.seq.batch, token, w.hk) + kCtaV * rank + col) =
          *reinterpret_cast<const uint4*>(dv_tile + key * kCtaV + col);
  }
}

// Consumer me's walk over the item's steps, then its part of dK and dV out (kMe: Consumer's; rank: the CTA's place in
// its pair, 0 alone).
template <class T, int kK, int kV, bool kRowSums, int kMe>
__device__ __forceinline__ void consume(const DkdvParams& p, const KeyWork& w, const Buffers<kK, kV>& buf, int me,
                                        int rank) {
  using Tile = DkdvWideTile<kK, kV>;
  using Consumer = bwd_wide::Consumer<T, kK, kV, kRowSums, kMe>;
  using TurnRing = typename Buffers<kK, kV>::TurnRing;
  constexpr bool kPaired = Tile::kPair == 2;
  Consumer c(p.b, w, me, rank);
  // Named barriers of both consumers: 1 when both halves of P and dS are in, 4 (one P / dS buffer) when both are done
  // with the last step's P and dS (2 + me: one consumer's column sums). With a copy of this code per consumer, the
  // warps would reach a named barrier from different instructions, which bar.sync (.aligned) does not allow: there
  // the consumers meet on an mbarrier instead.
  uint32_t meetings = 0;
  const auto both_consumers = [&](int id) {
    if constexpr (kMe == kEitherConsumer) ptx::named_barrier_sync(id, 256);
    else buf.meet(meetings++);
  };
  if (w.steps > 0) ptx::barrier_wait(buf.kv_full(), 0);
  if (w.steps > 0) c.load_key_terms(w.hk * p.b.a.group, buf.key_terms());
  bwd_detail::StepWalk<Tile::BM> walk(p.b, w);
  for (int it = 0; it < w.steps; ++it, walk.next()) {
    const bwd_detail::Step st = *walk;
    const int s = buf.stage(it);
    ptx::barrier_wait(buf.q_full(s), buf.parity(it));
    if constexpr (Buffers<kK, kV>::kDoApart) ptx::barrier_wait(buf.do_full(), buf.parity(it));
    ptx::barrier_wait(buf.t_full(s), buf.parity(it));  // not between issue and wait: a loop there serialises wgmma
    float sc[Tile::BN / 4], dp[Tile::BN / 4];
    ptx::wgmma_fence();
    c.issue_scores(sc, dp, buf, s);
    ptx::wgmma_wait<1>();
    ptx::wgmma_hold(sc);
    // A pair: P needs the whole S, dS the whole dP. Each partial leaves once made, the other's comes in when needed.
    const Exchange<kK, kV> swap(buf, it, me, static_cast<uint32_t>(rank));
    if constexpr (kPaired) {
      swap.open_slot();
      swap.send(sc, 0);
      ptx::wgmma_wait<0>();
      ptx::wgmma_hold(dp);
      swap.send(dp, 1);
      swap.receive(sc, 0);
    }
    const int pos0 = st.i0 + p.b.a.key_shift;  // the step's first row's key position (a slice pair's rows shifted)
    if (block_needs_mask(st.i0, st.i0 + Tile::BM, w.j0, w.j0 + Tile::BN, w.seq.len, p.b.a.window, p.b.a.key_shift,
                         p.b.a.key_end))
      c.template probabilities<true>(sc, buf.terms(s), buf.key_terms(), pos0);
    else
      c.template probabilities<false>(sc, buf.terms(s), buf.key_terms(), pos0);
    if constexpr (kPaired) {
      swap.receive(dp, 1);
      swap.free_slot();
    } else {
      ptx::wgmma_wait<0>();
      ptx::wgmma_hold(dp);
    }
    // Sums buffer it % 2 was last read two steps ago, before its reader passed the barriers of the step between.
    c.gradients(sc, dp, buf.terms(s), buf.sums(it % 2));
    ptx::barrier_arrive(buf.t_empty(s));
    const int pb = it % Tile::kPdsBuffers;
    T* const pt = buf.template pds<T>(0, pb);
    T* const dst = buf.template pds<T>(1, pb);
    if (Tile::kPdsBuffers == 1) both_consumers(4);  // both consumers' wgmmas of the last step are done
    c.store_tile(sc, pt);
    c.store_tile(dp, dst);
    both_consumers(1);  // both consumers' keys of P and dS (and their row sums) are in
    float dq[Consumer::kDqAcc];
    ptx::wgmma_fence();
    c.issue_kv(buf, s, pt, dst);
    c.issue_dq(dq, buf, dst);
    if constexpr (Buffers<kK, kV>::kDoApart) {  // dO, then Q, reload under the later groups
      ptx::wgmma_wait<2>();
      buf.release_do();
      ptx::wgmma_wait<1>();
      buf.release_q(s);
      ptx::wgmma_wait<0>();
    } else {
      ptx::wgmma_wait<0>();
    }
    c.hold_kv();
    ptx::wgmma_hold(dq);
    if constexpr (!Buffers<kK, kV>::kDoApart) buf.release_q(s);
    // Staged, dQ goes first: the writer's turn needs it staged, the consumers' turn does not.
    if constexpr (Tile::kStagedDq) c.stage_dq(dq, buf, it);
    if constexpr (kRowSums || !Tile::kStagedDq) {  // the consumers' adds; deterministic mode: in the turn
      const int t = TurnRing::stage(it);
      if (p.b.dq_order) ptx::barrier_wait(buf.turn_ready(t), TurnRing::parity(it));
      c.add_sums(buf.sums(it % 2), st.h, st.i0);
      if constexpr (!Tile::kStagedDq) c.add_dq(dq, st.h, st.i0);
      if (p.b.dq_order) TurnRing::release(buf.turn_done(t));
    }
    if (kRowSums && walk.ends_head()) {
      c.store_colsum(st.h, buf.colsums());
      if (it + 1 < w.steps) c.load_key_terms(st.h + 1, buf.key_terms());
    }
  }
  // Keys no query row sees (window 0) still get their zero column sums.
  if (kRowSums && w.steps == 0)
    for (int64_t h = w.hk * p.b.a.group; h < (w.hk + 1) * p.b.a.group; ++h) c.store_colsum(h, buf.colsums());
  // dK and dV through the Q and dO stages: every step's reads of them are done once both consumers are here.
  T* const dk_tile = buf.template q<T>(0);
  T* const dv_tile = dk_tile + Tile::BN * Tile::kCtaK;
  both_consumers(1);
  c.stage_out(dk_tile, dv_tile);
  both_consumers(1);
  bwd_wide::copy_out<T, kK, kV>(p.b, w, rank, dk_tile, dv_tile);
}

}  // namespace bwd_wide

// One CTA per (key tile, kv head), the tiles most query rows see first (deterministic mode: lightest first, or
// heaviest first where it adds dQ in ascending order, BackwardParams::dq_ascending); a
// cluster of two per item where the bucket pairs CTAs.
template <class T, int kK, int kV, bool kRowSums>
__global__ void __launch_bounds__(DkdvWideTile<kK, kV>::kThreads, 1)
    dkdv_wide_kernel(const __grid_constant__ DkdvParams p, const __grid_constant__ TileSchedule keys) {
#if FG_HOPPER_BWD_BODY
  using Tile = DkdvWideTile<kK, kV>;
  using Buffers = bwd_wide::Buffers<kK, kV>;
  constexpr bool kPaired = Tile::kPair == 2;
  extern __shared__ unsigned char raw[];
  __shared__ alignas(8) uint64_t bars[Buffers::kBarriers];
  const Buffers buf{{}, {bars}, ptx::swizzle_aligned(raw)};
  const int64_t item = blockIdx.x / Tile::kPair;  // both CTAs of a pair take the same item (or both return)
  if (!bwd_detail::key_work<Tile::BN, Tile::BM, !kRowSums>(p.b, keys, item).valid) return;

  if (threadIdx.x == 0) buf.init(kRowSums);
  // A pair: the other CTA's barriers are initialised before anything arrives on them.
  if constexpr (kPaired) ptx::cluster_sync();
  else __syncthreads();

  // A pair's threads all leave through a cluster barrier, which keeps each CTA's shared memory alive while the other
  // may still write into it.
  const auto leave = [] {
    if constexpr (kPaired) ptx::cluster_sync();
  };

  // Nothing stays live across setmaxnreg (ptxas would spill it): each role derives its work afterwards.
  if (threadIdx.x < 128) {
    ptx::setmaxnreg_dec<Tile::kProducerRegs>();
    const bwd_detail::KeyWork w = bwd_detail::key_work<Tile::BN, Tile::BM, !kRowSums>(p.b, keys, item);
    const int warp = threadIdx.x / 32;
    if (w.steps == 0) return leave();  // nobody would wait for its copies
    const int col0 = kPaired ? Tile::kCtaK * static_cast<int>(ptx::cluster_rank()) : 0;
    if (warp == 0 && ptx::elect_one()) bwd_detail::produce<T>(p, buf, w, 0, 0, col0);
    else if (warp == 1) bwd_detail::stage_terms<PScale<T, kRowSums>>(p.b, buf, w, 0);  // Consumer::Scale
    else if (warp == 2 && p.b.dq_order) bwd_detail::take_turns<true>(p.b, buf, w, 0, Buffers::kReleasers * Tile::kPair);
    else if (warp == 3 && Tile::kStagedDq) bwd_detail::write_dq(p.b, buf, w, 0);
    return leave();
  }

  ptx::setmaxnreg_inc<Tile::kConsumerRegs>();
  const bwd_detail::KeyWork w = bwd_detail::key_work<Tile::BN, Tile::BM, !kRowSums>(p.b, keys, item);
  const int me = ptx::warpgroup_index() - 1;
  const int rank = kPaired ? static_cast<int>(ptx::cluster_rank()) : 0;
  if constexpr (kK == kV) bwd_wide::consume<T, kK, kV, kRowSums, bwd_wide::kEitherConsumer>(p, w, buf, me, rank);
  else if (me == 0) bwd_wide::consume<T, kK, kV, kRowSums, 0>(p, w, buf, 0, rank);
  else bwd_wide::consume<T, kK, kV, kRowSums, 1>(p, w, buf, 1, rank);
  leave();
#endif
}

template <class T, int kK, int kV>
void launch_dkdv_wide(const DkdvParams& p, const TileSchedule& keys, CUstream_st* stream) {
  using Tile = DkdvWideTile<kK, kV>;
  const int64_t ctas = keys.num_tiles * p.b.a.H;
  if (ctas == 0) return;
  auto kernel = dkdv_wide_kernel<T, kK, kV, false>;
  if constexpr (Tile::kServesRowSums) {
    if (p.b.needs_row_sums()) kernel = dkdv_wide_kernel<T, kK, kV, true>;
  }
  FLASHGATE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            static_cast<int>(Tile::smem_bytes())));
  if constexpr (Tile::kPair == 2) {  // clusters of the pair's two CTAs
    cudaLaunchAttribute cluster[1] = {};
    cluster[0].id = cudaLaunchAttributeClusterDimension;
    cluster[0].val.clusterDim.x = 2, cluster[0].val.clusterDim.y = 1, cluster[0].val.clusterDim.z = 1;
    cudaLaunchConfig_t config = {};
    config.gridDim = dim3(static_cast<unsigned>(ctas * 2)), config.blockDim = dim3(Tile::kThreads);
    config.dynamicSmemBytes = Tile::smem_bytes(), config.stream = stream;
    config.attrs = cluster, config.numAttrs = 1;
    FLASHGATE_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, p, keys));
  } else {
    kernel<<<static_cast<unsigned>(ctas), Tile::kThreads, Tile::smem_bytes(), stream>>>(p, keys);
  }
  FLASHGATE_CHECK_LAUNCH("hopper dkdv_wide_kernel");
}
#endif  // __CUDACC__

}  // namespace flashgate::cuda::hopper
