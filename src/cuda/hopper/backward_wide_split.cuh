// The wide Hopper backward's split consumers (sm_90a; backward.h's DkdvWideTile with kSplit: 256 / 256 and each CTA
// of a 512 / 512 pair). The two consumer warpgroups split a step's products by kind, with the tile's 64 keys as rows
// (backward_keys_as_rows.cuh):
//
//   consumer 0 (scores):    S^T = K Q^T  ->  P^T  ->  P^T (fp32) to consumer 1  ->  dV += P^T dO   ->  dQ, columns 0..
//   consumer 1 (gradients): dP^T = V dO^T  ->  dS^T = P^T (dP^T - D)  ->  dS^T tile  ->  dK += dS^T Q  ->  dQ, the rest
//
// dV and dK are m64n256 wgmmas with P^T and dS^T as register operands; dQ = dS K reads the dS^T tile transposed. Two
// named barriers order a step: pt_ready (consumer 0 arrives once P^T is in, consumer 1 waits before it reads it)
// and ds_ready (both: consumer 1's dS^T tile and row-sum partials are in, and consumer 0 has issued dV). Consumer 0
// writes the next P^T only after ds_ready, when consumer 1 is done reading it; consumer 1 writes the next dS^T only
// after the next pt_ready, which consumer 0 reaches once its dQ is done.
//
// A pair (512 / 512): each consumer's product is partial, over the CTA's half of the head dims; it goes to the same
// consumer of the other CTA and the other's comes back (Exchange) before P^T or dS^T are made.
//
// A key pair (256 / 256 without the row sums): consumer 1's dS^T tile goes to the other CTA, whose tile comes back
// (DsSwap), and each consumer makes dQ for 64 of the CTA's 128 columns over both tiles' keys.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/backward_params.h"
#include "cuda/common/element.h"
#include "cuda/common/online_softmax.h"
#include "cuda/common/visibility.h"
#include "cuda/hopper/backward.h"
#include "cuda/hopper/backward_keys_as_rows.cuh"
#include "cuda/hopper/backward_roles.cuh"
#include "cuda/hopper/backward_wide_buffers.cuh"
#include "cuda/hopper/dq_staging.cuh"
#include "cuda/ptx/red.h"
#include "cuda/ptx/tma.h"
#include "cuda/ptx/warpgroup.h"
#include "cuda/ptx/wgmma.h"

namespace flashgate::cuda::hopper {

#if defined(__CUDACC__)
namespace bwd_wide {

// The split consumers' named barriers (0 is __syncthreads). They reach them from code of their own: the .aligned-free
// forms (ptx::named_barrier_*_any).
enum SplitBarrier : int { kPtReady = 1, kDsReady = 2, kOutStaged = 3 };

// What both split consumers have: the keys-as-rows places, their m64n256 accumulator (dV or dK), dQ over half of the
// columns and the way out. me: 0 scores, 1 gradients.
template <class T, int kK, int kV, bool kRowSums>
class SplitConsumer {
 protected:
  using Tile = DkdvWideTile<kK, kV, kRowSums>;
  using Buf = Buffers<kK, kV, kRowSums>;
  static constexpr int BM = Tile::BM, BN = Tile::BN, kCta = Tile::kCtaK;
  static constexpr int kDqN = Tile::kDqColumns / 2;  // a consumer's dQ columns
  static constexpr int kS = BM / 2;      // S^T, dP^T accumulators per thread (m64nBM)
  static constexpr int kAcc = kCta / 2;  // dV or dK accumulators per thread (m64 n kCta)
  static_assert(Tile::kSplit && Tile::kCtaK == Tile::kCtaV && BN == 64, "the split consumers' shape");

 public:
  using Operand = uint32_t[BM / 16][4];
  using Scale = PScale<T, kRowSums>;      // P's factor (element.h) where a sink can come: with the row sums
  static constexpr int kDqAcc = kDqN / 2;  // dQ accumulators per thread (m64 n kDqN)

  // rank: a pair's head-dim half; key_rank: a key pair's key tile (0 elsewhere).
  __device__ __forceinline__ SplitConsumer(const bwd::BackwardParams& p, const bwd_detail::KeyWork& w, int me, int rank,
                                           int key_rank)
      : p_(p), w_(w), me_(me), rank_(rank), key_rank_(key_rank), lane_(threadIdx.x % 32),
        warp_(ptx::warpgroup_thread() / 32) {
#pragma unroll
    for (int i = 0; i < kAcc; ++i) acc_[i] = 0.f;
  }

  // This thread's two keys (rows g and g + 8 of its warp's 16).
  __device__ __forceinline__ int key(int half) const { return w_.j0 + 16 * warp_ + lane_ / 4 + 8 * half; }

  // x = keys (K or V, [kCta/64][BN][64]) times queries (Q or dO, [kCta/64][BM][64])^T over k-steps from..to - 1 of
  // the head dims (S^T or dP^T, both K-major); the caller commits.
  __device__ __forceinline__ void issue_keys_by_queries(float (&x)[kS], const T* keys, const T* queries, int from,
                                                        int to) const {
    const uint64_t a0 = ptx::k_major_descriptor(keys, BN, 0), b0 = ptx::k_major_descriptor(queries, BM, 0);
#pragma unroll
    for (int step = from; step < to; ++step)
      ptx::Wgmma<T, BM, 0>::ss(x, ptx::descriptor_step(a0, BN, step), ptx::descriptor_step(b0, BM, step), step > 0);
  }

  // dQ = dS K for this consumer's half of the CTA's columns: dS read transposed from the dS^T tile, K transposed from
  // its 64-column blocks. A key pair: columns 128 key_rank + 64 me over this tile's keys (issue_dq_other adds the
  // other tile's).
  __device__ __forceinline__ void issue_dq(float (&dq)[kDqAcc], const Buf& buf) const {
    const int block = Tile::kKeyPair == 2 ? 2 * key_rank_ + me_ : me_ * (kCta / 128);
    const uint64_t ds0 = ptx::mn_major_descriptor(buf.template dst<T>(), BN, 0),
                   k0 = ptx::mn_major_descriptor(buf.template k<T>() + block * BN * 64, BN, 0);
#pragma unroll
    for (int t = 0; t < BN / 16; ++t)
      ptx::Wgmma<T, kDqN, 1>::template ss<1>(dq, ptx::mn_major_step(ds0, t), ptx::mn_major_step(k0, t), t > 0);
    ptx::wgmma_commit();
  }
  // A key pair: dQ's k-steps over the other tile's keys (its dS^T tile and K half), after issue_dq's over this one's,
  // their own wgmma group.
  __device__ __forceinline__ void issue_dq_other(float (&dq)[kDqAcc], const Buf& buf) const {
    // The other's dS^T tile is dst_other, right after dst: its k-steps run on from this tile's.
    const uint64_t ds0 = ptx::mn_major_descriptor(buf.template dst<T>(), BN, 0),
                   k1 = ptx::mn_major_descriptor(buf.template k_other<T>() + me_ * BN * 64, BN, 0);
#pragma unroll
    for (int t = 0; t < BN / 16; ++t)
      ptx::Wgmma<T, kDqN, 1>::template ss<1>(dq, ptx::mn_major_step(ds0, BN / 16 + t), ptx::mn_major_step(k1, t), true);
    ptx::wgmma_commit();
  }

  // Tile::kStagedDq: step `it`'s dQ (this consumer's columns) into the staged tile, once the writer has read step
  // it - 1's; then this thread's arrival on dq_full.
  __device__ __forceinline__ void stage_dq(const float (&dq)[kDqAcc], const Buf& buf, int it) const {
    Buf::DqRing::wait_free(buf.dq_empty(), it);
    if constexpr (Tile::kDqSlotChunks > 0)  // the CTA's columns only, chunks of the head dim
      dq_staging::write_group(dq, buf.dq_slot(), warp_, me_ * kDqN / 8,
                              min(Tile::kDqSlotChunks, p_.K16 / 8 - key_rank_ * Tile::kDqSlotChunks),
                              Tile::kDqSlotChunks);
    else
      dq_staging::write_group(dq, buf.dq_slot(), warp_, me_ * kDqN / 8, p_.K16 / 8, p_.K16 / 8);
    ptx::barrier_arrive(buf.dq_full());
  }

  // A pair: dQ (this consumer's columns of the CTA's half) added into dq_acc's fragment order.
  __device__ __forceinline__ void add_dq(const float (&dq)[kDqAcc], int64_t h, int i0) const {
    const AttentionParams& a = p_.a;
    const int i_first = i0 + 16 * warp_, col0 = kCta * rank_ + me_ * kCta / 2;
    if (i_first >= w_.seq.len) return;
    const int64_t row0 = bwd::dq_row(a, w_.seq.batch, h, w_.seq_index, w_.seq.start);
    float* at = p_.dq_acc + bwd::dq_acc_offset(row0, i_first, col0, p_.K16) + 4 * lane_;
    const auto add = [&](int j) {
#if FG_HOPPER_BWD_BODY
      ptx::red_add_v4_f32(at + j * 128, make_float4(dq[4 * j], dq[4 * j + 1], dq[4 * j + 2], dq[4 * j + 3]));
#endif
    };
    // All columns real (every shape but padded head dims): the adds back to back. A branch between two adds waits
    // until the first has read its registers, which serialised them on the LSU's pace.
    if (col0 + kCta / 2 <= p_.K16) {
#pragma unroll
      for (int j = 0; j < kDqAcc / 4; ++j) add(j);
    } else {
#pragma unroll
      for (int j = 0; j < kDqAcc / 4; ++j)
        if (col0 + 8 * j < p_.K16) add(j);
    }
  }

  // acc_ += a tile^T: the keys-as-rows operand (P^T or dS^T) times the step's dO or Q, read transposed from its TMA
  // layout (dV or dK); the caller commits.
  __device__ __forceinline__ void issue_acc(const Operand& a, const T* tile) {
    const uint64_t b0 = ptx::mn_major_descriptor(tile, BM, 0);
#pragma unroll
    for (int t = 0; t < BM / 16; ++t) ptx::Wgmma<T, kCta, 1>::rs(acc_, a[t], ptx::mn_major_step(b0, t), true);
  }

  __device__ __forceinline__ void hold_acc() { ptx::wgmma_hold(acc_); }

  // The accumulator (this consumer's dV or dK, keys as rows) times `factor` into a row-major [BN keys][kCta] tile,
  // 16-byte piece j of key r at piece j ^ (r % 8) so that the eight keys of a store hit different banks (copy_out
  // reads them back so).
  __device__ __forceinline__ void stage_out(float factor, T* tile) const {
    const int c = lane_ % 4;
    unsigned char* bytes = reinterpret_cast<unsigned char*>(tile);
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int r = 16 * warp_ + lane_ / 4 + 8 * half;
      unsigned char* row = bytes + r * kCta * 2 + 4 * c;
#pragma unroll
      for (int j = 0; j < kCta / 8; ++j)
        *reinterpret_cast<uint32_t*>(row + 16 * (j ^ (r % 8))) =
            ptx::pack2<T>(acc_[4 * j + 2 * half] * factor, acc_[4 * j + 2 * half + 1] * factor);
    }
  }

 protected:
  const bwd::BackwardParams& p_;
  const bwd_detail::KeyWork w_;
  const int me_, rank_, key_rank_, lane_, warp_;
  float acc_[kAcc];
};

// Consumer 0: S^T, P^T, dV.
template <class T, int kK, int kV, bool kRowSums>
class ScoreConsumer : public SplitConsumer<T, kK, kV, kRowSums> {
  using Base = SplitConsumer<T, kK, kV, kRowSums>;
  using typename Base::Buf;
  using Base::BM, Base::BN, Base::kCta, Base::kS;

 public:
  using typename Base::Operand;
  __device__ __forceinline__ ScoreConsumer(const bwd::BackwardParams& p, const bwd_detail::KeyWork& w, int rank,
                                           int key_rank)
      : Base(p, w, 0, rank, key_rank) {}

  // kRowSums: the gate's key terms Gc_key log2 e of this thread's keys for query head h (0 without a gate; a slice
  // pair's relative to its anchor, gate_anchor).
  __device__ __forceinline__ float2 key_terms(int64_t h) const {
    if (!kRowSums || !this->p_.a.has_gate) return make_float2(0.f, 0.f);
    return bwd_detail::key_gate_terms<BN>(this->p_.a, this->w_, h, this->key(0));
  }

  // S^T = K Q^T over the CTA's head dims, one wgmma group.
  __device__ __forceinline__ void issue_scores(float (&s)[kS], const Buf& buf, int stage) const {
    this->issue_keys_by_queries(s, buf.template k<T>(), buf.template q<T>(stage), 0, kCta / 16);
    ptx::wgmma_commit();
  }

  template <bool kMasked>
  __device__ __forceinline__ void probabilities(float (&s)[kS], const float* terms, int pos0, float2 key_term) const {
    bwd_detail::probabilities_by_key<kMasked, kRowSums, BM>(s, this->p_.a, terms, pos0,
                                                            make_int2(this->key(0), this->key(1)), key_term,
                                                            this->lane_);
  }

  // P^T in fp32 for consumer 1 (its dP^T has the same places), then packed into the A operand of dV.
  __device__ __forceinline__ void share(const float (&s)[kS], float4* shared_pt, Operand& pt) const {
    const int t = ptx::warpgroup_thread();
#pragma unroll
    for (int j = 0; j < kS / 4; ++j)
      shared_pt[j * 128 + t] = make_float4(s[4 * j], s[4 * j + 1], s[4 * j + 2], s[4 * j + 3]);
    ptx::accumulator_to_operand<T>(s, pt);
  }

  // dV += P^T dO (dO read transposed from its TMA layout), one wgmma group.
  __device__ __forceinline__ void issue_dv(const Operand& pt, const Buf& buf, int stage) {
    this->issue_acc(pt, buf.template dout<T>(stage));
    ptx::wgmma_commit();
  }
};

// Consumer 1: dP^T, dS^T (with the row and column sums), dK.
template <class T, int kK, int kV, bool kRowSums>
class GradientConsumer : public SplitConsumer<T, kK, kV, kRowSums> {
  using Base = SplitConsumer<T, kK, kV, kRowSums>;
  using typename Base::Buf;
  using typename Base::Scale;
  using Base::BM, Base::BN, Base::kCta, Base::kS;

 public:
  using typename Base::Operand;
  __device__ __forceinline__ GradientConsumer(const bwd::BackwardParams& p, const bwd_detail::KeyWork& w, int rank,
                                              int key_rank)
      : Base(p, w, 1, rank, key_rank) {}

  // dP^T = V dO^T over the CTA's head dims, one wgmma group.
  __device__ __forceinline__ void issue_dp(float (&dp)[kS], const Buf& buf, int stage) const {
    this->issue_keys_by_queries(dp, buf.template v<T>(), buf.template dout<T>(stage), 0, kCta / 16);
    ptx::wgmma_commit();
  }

  // dS^T = P^T (dP^T - D) from consumer 0's P^T, packed into the A operand of dK (P^T carries Scale's factor, the
  // staged D its inverse). kRowSums: the warp's parts of E (sum_keys P dP) and the mass (sum_keys P) of each query go
  // to `partials` ([E | mass][4 warps][BM]), and the key rows' sums of dS^T are added to colsum_.
  __device__ __forceinline__ void gradients(const float (&dp)[kS], const float4* shared_pt, const float* terms,
                                            float* partials, Operand& dst) {
    const int c = this->lane_ % 4, t = 32 * this->warp_ + this->lane_;
#pragma unroll
    for (int j = 0; j < kS / 4; ++j) {
      const float4 p4 = shared_pt[j * 128 + t];
      const float pr[4] = {p4.x, p4.y, p4.z, p4.w};
      const float2 d = *reinterpret_cast<const float2*>(terms + BM + 8 * j + 2 * c);
      float ds[4], sums[4] = {0.f, 0.f, 0.f, 0.f};  // E of columns 2c, 2c + 1, then their mass
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float dpv = dp[4 * j + e];
        ds[e] = pr[e] * Scale::dp_minus_d(dpv, (e & 1) ? d.y : d.x);
        if constexpr (kRowSums) {
          sums[e & 1] += pr[e] * dpv;
          sums[2 + (e & 1)] += pr[e];
          colsum_[e >> 1] += ds[e];
        }
      }
#pragma unroll
      for (int half = 0; half < 2; ++half)
        dst[j / 2][2 * (j % 2) + half] = ptx::pack2<T>(ds[2 * half], ds[2 * half + 1]);
      if constexpr (kRowSums)
        bwd_detail::store_query_sums<Buf::kSumWarps, BM>(sums, partials, this->warp_, 8 * j + 2 * c, this->lane_);
    }
  }

  // dS^T into its swizzled tile (rows: the keys, columns: the step's queries) for dQ, then a fence so that the tensor
  // cores see it.
  __device__ __forceinline__ void store_ds(const Operand& ds, const Buf& buf) const {
    const int g = this->lane_ / 4, c = this->lane_ % 4;
    unsigned char* bytes = reinterpret_cast<unsigned char*>(buf.template dst<T>());
#pragma unroll
    for (int j = 0; j < BM / 8; ++j)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int r = 16 * this->warp_ + g + 8 * half;
        *reinterpret_cast<uint32_t*>(bytes + ptx::swizzled_chunk(r, j) + 4 * c) = ds[j / 2][2 * (j % 2) + half];
      }
    ptx::fence_async_shared();
  }

  // dK += dS^T Q (Q read transposed), one wgmma group.
  __device__ __forceinline__ void issue_dk(const Operand& dst, const Buf& buf, int stage) {
    this->issue_acc(dst, buf.template q<T>(stage));
    ptx::wgmma_commit();
  }

  // kRowSums: once every warp's partials are in (ds_ready), BM threads add a query's four into E (and the mass);
  // a pair's CTAs hold the same sums, the first adds them.
  __device__ __forceinline__ void add_sums(const float* partials, int64_t h, int i0) const {
    const int t = ptx::warpgroup_thread();
    if (this->rank_ != 0 || t >= BM || i0 + t >= this->w_.seq.len) return;
    float e = 0.f, mass = 0.f;
#pragma unroll
    for (int w = 0; w < Buf::kSumWarps; ++w) e += partials[w * BM + t], mass += partials[(Buf::kSumWarps + w) * BM + t];
    const int64_t row = this->p_.row_index(this->w_.seq.batch, h, this->w_.seq.start) + i0 + t;
    atomicAdd(this->p_.E + row, e * Scale::kInv);
    if (this->p_.a.has_gate) atomicAdd(this->p_.mass + row, mass * Scale::kInv);
  }

  // kRowSums with a gate, in deterministic mode's ascending order (the query heads innermost, so that each step is
  // another head's): the step's sums of dS over its queries go into the shared column sums of query head `head` of
  // the group ([kAscendingGroup][BN]), each key's by the one lane that holds its quad's sum (no other thread touches
  // it: the steps need no barrier). clear_colsums before the walk, store_colsums after it.
  __device__ __forceinline__ void clear_colsums(float* colsums) const {
    if constexpr (kRowSums) {
      if (!this->p_.a.has_gate || this->lane_ % 4 != 0) return;
      for (int head = 0; head < this->p_.a.group; ++head)
#pragma unroll
        for (int half = 0; half < 2; ++half) colsums[head * BN + this->key(half) - this->w_.j0] = 0.f;
    }
  }
  __device__ __forceinline__ void gather_colsum(float* colsums, int head) {
    if constexpr (kRowSums) {
      if (!this->p_.a.has_gate) return;
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const float v = quad_sum(colsum_[half]);
        colsum_[half] = 0.f;
        if (this->lane_ % 4 == 0) colsums[head * BN + this->key(half) - this->w_.j0] += v;
      }
    }
  }
  __device__ __forceinline__ void store_colsums(const float* colsums) const {
    const bwd::BackwardParams& p = this->p_;
    if (!kRowSums || !p.a.has_gate || this->rank_ != 0 || this->lane_ % 4 != 0) return;
    const int keys = p.a.key_len(this->w_.seq.len);
    for (int head = 0; head < p.a.group; ++head) {
      const int64_t base = p.key_index(this->w_.seq.batch, this->w_.hk * p.a.group + head, this->w_.seq.start);
#pragma unroll
      for (int half = 0; half < 2; ++half)
        if (this->key(half) < keys) p.colsum[base + this->key(half)] = colsums[head * BN + this->key(half) - this->w_.j0];
    }
  }

  // kRowSums with a gate, in the descending order: at the end of query head h's steps, the key rows' sums of dS over
  // its queries.
  __device__ __forceinline__ void store_colsum(int64_t h) {
    if constexpr (kRowSums)
      bwd_detail::store_key_colsums(colsum_, this->p_, this->w_, h, this->key(0), this->lane_, this->rank_ == 0);
  }

 private:
  float colsum_[kRowSums ? 2 : 1] = {};  // kRowSums: this thread's part of its keys' dS sums for the current head
};

// The step's dQ leaves: staged for the writer warp, or (a pair) added by the consumer in deterministic mode's turn.
// Consumer 1 adds the step's row sums in the same turn.
// kSums: the consumer adds the row sums (`sums`, consumer 1 with kRowSums).
template <bool kSums, class Consumer, class Buf>
__device__ __forceinline__ void hand_over_dq(Consumer& c, const float (&dq)[Consumer::kDqAcc],
                                             const bwd::BackwardParams& p, const Buf& buf, int it,
                                             const bwd_detail::Step& st, const float* sums) {
  using TurnRing = typename Buf::TurnRing;
  constexpr bool kStaged = Buf::Tile::kStagedDq;
  if constexpr (kStaged) c.stage_dq(dq, buf, it);
  if constexpr (kSums || !kStaged) {
    const int t = TurnRing::stage(it);
    if (p.dq_order) ptx::barrier_wait(buf.turn_ready(t), TurnRing::parity(it));
    if constexpr (!kStaged) c.add_dq(dq, st.h, st.i0);
    if constexpr (kSums) c.add_sums(sums, st.h, st.i0);
    if (p.dq_order) TurnRing::release(buf.turn_done(t));
  }
}

// Consumer 0's walk over the item's steps; dV stays in its registers for leave().
template <class T, int kK, int kV, bool kRowSums>
__device__ __forceinline__ void consume_scores(ScoreConsumer<T, kK, kV, kRowSums>& c, const DkdvParams& p,
                                               const bwd_detail::KeyWork& w, const Buffers<kK, kV, kRowSums>& buf,
                                               int cta) {
  using Tile = DkdvWideTile<kK, kV, kRowSums>;
  using Buf = Buffers<kK, kV, kRowSums>;
  using Consumer = ScoreConsumer<T, kK, kV, kRowSums>;
  if (w.steps == 0) return;
  ptx::barrier_wait(buf.kv_full(), 0);
  float2 key_term = c.key_terms(w.hk * p.b.a.group);
  bwd_detail::StepWalk<Tile::BM> walk(p.b, w);
  for (int it = 0; it < w.steps; ++it, walk.next()) {
    const bwd_detail::Step st = *walk;
    const int s = buf.stage(it);
    buf.wait_step(s, buf.parity(it));
    float sc[Tile::BM / 2];
    ptx::wgmma_fence();
    c.issue_scores(sc, buf, s);
    const Exchange<kK, kV, kRowSums> swap(buf, it, 0, static_cast<uint32_t>(cta));
    if constexpr (Tile::kPair == 2) swap.open_slot();
    ptx::wgmma_wait<0>();
    ptx::wgmma_hold(sc);
    buf.release_q(s);  // consumer 0 is done with Q; consumer 1 still reads it for dK
    if constexpr (Tile::kPair == 2) {  // P^T needs the whole S^T
      swap.send(sc);
      swap.receive(sc);
    }
    const int pos0 = st.i0 + p.b.a.key_shift;  // the step's first row's key position (a slice pair's rows shifted)
    if (block_needs_mask(st.i0, st.i0 + Tile::BM, w.j0, w.j0 + Tile::BN, w.seq.len, p.b.a.window, p.b.a.key_shift,
                         p.b.a.key_end))
      c.template probabilities<true>(sc, buf.terms(s), pos0, key_term);
    else
      c.template probabilities<false>(sc, buf.terms(s), pos0, key_term);
    ptx::barrier_arrive(buf.t_empty(s));
    typename Consumer::Operand pt;
    c.share(sc, buf.pt(), pt);
    // The slot is freed once P^T, made from what it held, is stored: with one slot the other CTA's next partial
    // lands there a round trip after this arrival.
    if constexpr (Tile::kPair == 2) swap.free_slot();
    ptx::named_barrier_arrive_any(kPtReady, 256);
    if constexpr (Buf::kDoApart) ptx::barrier_wait(buf.do_full(), Buf::DoRing::parity(it));
    float dq[Consumer::kDqAcc];
    ptx::wgmma_fence();
    c.issue_dv(pt, buf, s);
    ptx::named_barrier_sync_any(kDsReady, 256);
    const DsSwap<kK, kV, kRowSums> ds(buf, it, static_cast<uint32_t>(cta));
    if constexpr (Tile::kKeyPair == 2) {
      // dO is released before the wait for the other CTA's tile, so that the next step's dO loads while it comes.
      ptx::wgmma_wait<0>();
      c.hold_acc();
      buf.release_do();
      c.issue_dq(dq, buf);
      ds.receive();
      c.issue_dq_other(dq, buf);
    } else {
      c.issue_dq(dq, buf);
      ptx::wgmma_wait<1>();
      c.hold_acc();
      buf.release_do();
    }
    ptx::wgmma_wait<0>();
    ptx::wgmma_hold(dq);
    if constexpr (Tile::kKeyPair == 2) ds.free();
    hand_over_dq<false>(c, dq, p.b, buf, it, st, nullptr);
    // The next step's key terms where it is another head's (every step in the ascending order).
    if (kRowSums && it + 1 < w.steps && (w.up || walk.ends_head())) key_term = c.key_terms(walk.following().h);
  }
}

// Consumer 1's walk over the item's steps; dK stays in its registers for leave().
template <class T, int kK, int kV, bool kRowSums>
__device__ __forceinline__ void consume_gradients(GradientConsumer<T, kK, kV, kRowSums>& c, const DkdvParams& p,
                                                  const bwd_detail::KeyWork& w, const Buffers<kK, kV, kRowSums>& buf,
                                                  int cta) {
  using Tile = DkdvWideTile<kK, kV, kRowSums>;
  using Buf = Buffers<kK, kV, kRowSums>;
  using Consumer = GradientConsumer<T, kK, kV, kRowSums>;
  if (w.steps == 0) {  // keys no query row sees (window 0): zero column sums
    for (int64_t h = w.hk * p.b.a.group; h < (w.hk + 1) * p.b.a.group; ++h) c.store_colsum(h);
    return;
  }
  ptx::barrier_wait(buf.kv_full(), 0);
  if (kRowSums && w.up) c.clear_colsums(buf.colsums());
  bwd_detail::StepWalk<Tile::BM> walk(p.b, w);
  for (int it = 0; it < w.steps; ++it, walk.next()) {
    const bwd_detail::Step st = *walk;
    const int s = buf.stage(it);
    if constexpr (Buf::kDoApart) ptx::barrier_wait(buf.do_full(), Buf::DoRing::parity(it));
    else ptx::barrier_wait(buf.q_full(s), buf.parity(it));
    ptx::barrier_wait(buf.t_full(s), buf.parity(it));
    float dp[Tile::BM / 2];
    ptx::wgmma_fence();
    c.issue_dp(dp, buf, s);
    const DsSwap<kK, kV, kRowSums> ds(buf, it, static_cast<uint32_t>(cta));
    if constexpr (Tile::kKeyPair == 2) ds.expect();
    const Exchange<kK, kV, kRowSums> swap(buf, it, 1, static_cast<uint32_t>(cta));
    if constexpr (Tile::kPair == 2) swap.open_slot();
    ptx::wgmma_wait<0>();
    ptx::wgmma_hold(dp);
    buf.release_do();  // consumer 1 is done with dO; consumer 0 still reads it for dV
    if constexpr (Tile::kPair == 2) {  // dS^T needs the whole dP^T
      swap.send(dp);
      swap.receive(dp);
    }
    ptx::named_barrier_sync_any(kPtReady, 256);
    typename Consumer::Operand dst;
    float* const sums = kRowSums ? buf.sums(it % 2) : nullptr;  // read two steps ago, before ds_ready of the step between
    c.gradients(dp, buf.pt(), buf.terms(s), sums, dst);
    ptx::barrier_arrive(buf.t_empty(s));
    if constexpr (Tile::kKeyPair == 2) ds.wait_sent_free();
    c.store_ds(dst, buf);
    if constexpr (Tile::kPair == 2) swap.free_slot();  // after dS^T, made from what the slot held, is stored
    ptx::named_barrier_sync_any(kDsReady, 256);
    if constexpr (Tile::kKeyPair == 2) ds.send();
    if constexpr (Buf::kDoApart) ptx::barrier_wait(buf.q_full(s), buf.parity(it));
    float dq[Consumer::kDqAcc];
    ptx::wgmma_fence();
    c.issue_dk(dst, buf, s);
    c.issue_dq(dq, buf);
    ptx::wgmma_wait<1>();
    c.hold_acc();
    buf.release_q(s);
    if constexpr (Tile::kKeyPair == 2) {  // Q is released before the wait for the other tile
      ds.receive();
      c.issue_dq_other(dq, buf);
    }
    ptx::wgmma_wait<0>();
    ptx::wgmma_hold(dq);
    if constexpr (Tile::kKeyPair == 2) ds.free();
    hand_over_dq<kRowSums>(c, dq, p.b, buf, it, st, sums);
    if (kRowSums && w.up) c.gather_colsum(buf.colsums(), static_cast<int>(st.h - w.hk * p.b.a.group));
    else if (kRowSums && walk.ends_head()) c.store_colsum(st.h);
  }
  if (kRowSums && w.up) c.store_colsums(buf.colsums());
}

// Both split consumers' walks, then dK and dV out through the Q and dO stages: consumer 0's dV into dO's (consumer 1
// read dO last for the last dP^T, before the last pt_ready), consumer 1's dK into a Q stage (one: consumer 0 read Q
// last for the last S^T; of two, the one the last step left alone); once both are staged, all 256 threads copy them
// out.
// cta: the CTA's rank in a pair's or a key pair's cluster (0 without one).
template <class T, int kK, int kV, bool kRowSums>
__device__ __forceinline__ void consume_split(const DkdvParams& p, const bwd_detail::KeyWork& w,
                                              const Buffers<kK, kV, kRowSums>& buf, int me, int cta) {
  using Tile = DkdvWideTile<kK, kV, kRowSums>;
  const int rank = Tile::kPair == 2 ? cta : 0, key_rank = Tile::kKeyPair == 2 ? cta : 0;
  // dK into the Q stage the last step did not use where there are two (no copy lands there any more).
  T* const dk_tile = buf.template q<T>(Buffers<kK, kV, kRowSums>::stage(static_cast<uint32_t>(w.steps)));
  T* const dv_tile = buf.template dout<T>(0);
  static_assert(Tile::kDoStages == 1 && Tile::BN * Tile::kCtaK * 2 == Tile::kQBytes &&
                    Tile::BN * Tile::kCtaV * 2 == Tile::kDoBytes,
                "dK and dV fill a Q stage and the dO stage");
  if (me == 0) {
    ScoreConsumer<T, kK, kV, kRowSums> c(p.b, w, rank, key_rank);
    consume_scores(c, p, w, buf, cta);
    c.stage_out(ScoreConsumer<T, kK, kV, kRowSums>::Scale::kInv, dv_tile);
  } else {
    GradientConsumer<T, kK, kV, kRowSums> c(p.b, w, rank, key_rank);
    consume_gradients(c, p, w, buf, cta);
    c.stage_out(p.b.a.scale, dk_tile);
  }
  ptx::named_barrier_sync_any(kOutStaged, 256);
  copy_out<T, kK, kV>(p.b, w, rank, dk_tile, dv_tile);
}

}  // namespace bwd_wide
#endif  // __CUDACC__

}  // namespace flashgate::cuda::hopper
