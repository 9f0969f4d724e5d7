// The wide Hopper backward's shared memory and barriers (sm_90a; backward.h's DkdvWideTile): the buffers both of its
// consumer designs work on, and a pair's exchange of partial products between the two CTAs of a cluster.
//
// Shared memory (kK, kV: the CTA's head dims, a pair's half): K [kK/64][BN keys][64], V [kV/64][BN keys][64], a key
// pair's other K [kK/128][BN keys][64]; per stage Q [kK/64][64 rows][64] and dO [kV/64][64 rows][64] (kSplit: the Q
// stages, then one dO stage); then kSplit: dS^T [BN keys][64] (a key pair's, then the other CTA's) and P^T (fp32,
// the accumulators' order), else P, dS [BN/64 key blocks][64 rows][64]; a pair's
// exchange slot [consumer][8 float4][128 threads]; the terms [stage][lse | D][64]; kSplit: the row sums' partials
// [2][E | mass][4 warps][64] and the ascending order's column sums [8 query heads][64]; with kStagedDq the staged dQ
// tile [16-row group][chunk][lane] float4 (dq_staging.cuh).
// Every 64-column block 128-byte swizzled and 1024-byte aligned (cuda/ptx/wgmma.h has the layouts).
#pragma once

#include <cstdint>

#include "cuda/hopper/backward.h"
#include "cuda/hopper/backward_roles.cuh"
#include "cuda/hopper/ring.h"
#include "cuda/ptx/cluster.h"
#include "cuda/ptx/tma.h"
#include "cuda/ptx/warpgroup.h"

namespace flashgate::cuda::hopper {

#if defined(__CUDACC__)
namespace bwd_wide {

// The CTA's buffers and barriers: the narrow kernel's interface (the producer's and the term warp's code is shared)
// with the wide kernel's own tiles beside it.
template <int kK, int kV, bool kRowSums = false>
struct Buffers : Ring<DkdvWideTile<kK, kV, kRowSums>::kStages>,
                 bwd_detail::StepBarriers<DkdvWideTile<kK, kV, kRowSums>::kStages> {
  using Tile = DkdvWideTile<kK, kV, kRowSums>;
  using Ring<Tile::kStages>::kS;
  static constexpr int kReleasers = 8;  // one lane per consumer warp
  static constexpr int kSumWarps = 4;   // kSplit: consumer 1's warps add the row sums

  using KvRing = Ring<1>;  // one item a CTA: the producer's first wait_free passes at once

  // Deterministic mode, per step: turn_ready when the turn warp saw every earlier add to the step's dQ rows counted,
  // turn_done when the warps that add (the writer warp where dQ is staged, and those that add the row sums; else
  // every consumer warp) made their adds there (bwd_detail::take_turns).
  using TurnRing = Ring<2>;
  // Tile::kStagedDq: the step's staged dQ tile (dq_staging.cuh), dq_full when both consumers' 256 threads wrote it,
  // dq_empty when the writer's copy engine read it.
  using DqRing = Ring<1>;

  // then met (192 / 128); do_full, do_empty (one stage); a pair: xch_full[consumer], xch_empty[consumer]; a key pair:
  // ds_in, ds_out_free; then turn_ready[2], turn_done[2], dq_full, dq_empty
  using Bars = bwd_detail::StepBarriers<kS>;
  unsigned char* base;
  static constexpr bool kMeets = !Tile::kSplit;  // the consumers run copies of their code of their own
  static constexpr bool kPaired = Tile::kPair == 2;
  static constexpr bool kKeyPaired = Tile::kKeyPair == 2;
  // The split consumers load dO (one stage, DoRing) and Q on barriers of their own (q_full / q_empty then hold Q
  // alone), each released once its last product is made.
  static constexpr bool kDoApart = Tile::kSplit;
  using DoRing = Ring<Tile::kDoStages>;
  static_assert(!kDoApart || Tile::kDoStages == 1, "dO apart has one stage, after the Q stages (dout)");
  static constexpr int kTurnBarriers =
      Bars::kCount + (kMeets ? 1 : 0) + (kDoApart ? 2 : 0) + (kPaired ? 4 : 0) + (kKeyPaired ? 2 : 0);
  static constexpr int kBarriers = kTurnBarriers + 2 * 2 + 2;
  // One consumer's exchange slot: its partial S^T or dP^T, [8 float4 a thread][128 threads]; one a consumer.
  static constexpr uint32_t kSlotBytes = Tile::kExchangeBytes / 2;
  using ExchangeRing = Ring<1>;
  // A key pair: the other CTA's dS^T tile, one a step (ds_in: it landed; ds_out_free: the other CTA is done with the
  // tile this one sent it, so that it may send the next and write its own tile again).
  using DsRing = Ring<1>;

  template <class T>
  __device__ __forceinline__ T* k() const { return reinterpret_cast<T*>(base); }
  template <class T>
  __device__ __forceinline__ T* v() const { return reinterpret_cast<T*>(base + Tile::kKBytes); }
  // A key pair: the other tile's keys, this CTA's half of the columns.
  template <class T>
  __device__ __forceinline__ T* k_other() const { return reinterpret_cast<T*>(base + Tile::kKBytes + Tile::kVBytes); }
  static constexpr uint32_t kKvBytes = Tile::kKBytes + Tile::kVBytes + Tile::kKOtherBytes;
  // Stage s holds Q then dO; where dO loads apart, the Q stages come first and the one dO stage after them.
  static constexpr uint32_t kStageBytes = Tile::kQBytes + (kDoApart ? 0 : Tile::kDoBytes);
  template <class T>
  __device__ __forceinline__ T* q(int s) const { return reinterpret_cast<T*>(base + kKvBytes + s * kStageBytes); }
  template <class T>
  __device__ __forceinline__ T* dout(int s) const {
    return kDoApart ? q<T>(kS) : q<T>(s) + Tile::kQBytes / 2;
  }
  __device__ __forceinline__ unsigned char* after_stages() const {
    return base + kKvBytes + kS * Tile::kQBytes + Tile::kDoStages * Tile::kDoBytes;
  }
  // kSplit: dS^T (a key pair's, then the other CTA's), then P^T.
  template <class T>
  __device__ __forceinline__ T* dst() const { return reinterpret_cast<T*>(after_stages()); }
  template <class T>
  __device__ __forceinline__ T* dst_other() const {
    return reinterpret_cast<T*>(after_stages() + Tile::kDsBytes / 2);
  }
  __device__ __forceinline__ float4* pt() const { return reinterpret_cast<float4*>(after_stages() + Tile::kDsBytes); }
  // Else P (which 0) or dS (which 1).
  template <class T>
  __device__ __forceinline__ T* pds(int which) const {
    return reinterpret_cast<T*>(after_stages() + which * Tile::kPBytes);
  }
  // A pair: consumer c's exchange slot, where the other CTA's consumer c puts its partial.
  __device__ __forceinline__ float4* exchange(int c) const {
    return reinterpret_cast<float4*>(after_stages() + Tile::kDsBytes + Tile::kPtBytes + 2 * Tile::kPBytes +
                                     c * kSlotBytes);
  }
  // The row offsets r[BM] then D[BM] of stage s.
  __device__ __forceinline__ float* terms(int s) const {
    return reinterpret_cast<float*>(after_stages() + Tile::kDsBytes + Tile::kPtBytes +
                                    2 * Tile::kPBytes + Tile::kExchangeBytes) +
           s * 2 * Tile::BM;
  }
  // kSplit: consumer 1's warps' partial E and mass of step b's rows (two buffers by step parity),
  // [E | mass][4 warps][BM].
  __device__ __forceinline__ float* sums(int b) const { return terms(kS) + b * 2 * kSumWarps * Tile::BM; }
  // kSplit, deterministic mode's ascending order with the row sums: the gate's column sums of the tile's keys for each
  // query head of the group, [kAscendingGroup][BN].
  __device__ __forceinline__ float* colsums() const { return sums(2); }
  // Tile::kStagedDq: the step's staged dQ tile (16-byte aligned for the copy engine).
  __device__ __forceinline__ unsigned char* dq_slot() const {
    return reinterpret_cast<unsigned char*>(terms(kS)) + Tile::kSumBytes + Tile::kColsumBytes;
  }
  using Bars::kv_full, Bars::kv_empty, Bars::q_full, Bars::q_empty, Bars::t_full, Bars::t_empty;
  // kMeets: both consumers' threads at one point, the n-th time.
  __device__ __forceinline__ uint64_t* met() const { return this->bars + Bars::kCount; }
  __device__ __forceinline__ void meet(uint32_t n) const {
    ptx::barrier_arrive(met());
    ptx::barrier_wait(met(), n & 1);
  }
  // kDoApart: the dO stage's barriers; a pair: consumer c's exchange slot's (full: the other CTA's partial landed;
  // empty: the other CTA read what this one put into its slot).
  __device__ __forceinline__ uint64_t* do_full() const { return this->bars + Bars::kCount + (kMeets ? 1 : 0); }
  __device__ __forceinline__ uint64_t* do_empty() const { return do_full() + 1; }
  __device__ __forceinline__ uint64_t* xch_full(int c) const { return do_full() + 2 + c; }
  __device__ __forceinline__ uint64_t* xch_empty(int c) const { return do_full() + 4 + c; }
  // A key pair: ds_in, the other CTA's dS^T tile landed here (its copy's bytes and one arrival here);
  // ds_out_free, the other CTA's consumer warps are done with the tile this one sent (their arrivals from there).
  __device__ __forceinline__ uint64_t* ds_in() const { return do_full() + 2 + (kPaired ? 4 : 0); }
  __device__ __forceinline__ uint64_t* ds_out_free() const { return ds_in() + 1; }
  __device__ __forceinline__ uint64_t* turn_ready(int t) const { return this->bars + kTurnBarriers + t; }
  __device__ __forceinline__ uint64_t* turn_done(int t) const { return this->bars + kTurnBarriers + 2 + t; }
  __device__ __forceinline__ uint64_t* dq_full() const { return this->bars + kTurnBarriers + 4; }
  __device__ __forceinline__ uint64_t* dq_empty() const { return this->bars + kTurnBarriers + 5; }

  // row_sums: with a staged dQ, consumer 1's warps still add the row sums themselves, in deterministic mode in the
  // turns.
  __device__ __forceinline__ void init(bool row_sums) const {
    ptx::barrier_init(kv_full(), 1), ptx::barrier_init(kv_empty(), kReleasers);
    for (int s = 0; s < kS; ++s) {
      ptx::barrier_init(q_full(s), 1), ptx::barrier_init(q_empty(s), kReleasers);
      ptx::barrier_init(t_full(s), 32), ptx::barrier_init(t_empty(s), 128 * 2);
    }
    if (kMeets) ptx::barrier_init(met(), 256);
    for (int t = 0; t < 2; ++t)
      ptx::barrier_init(turn_ready(t), 1),
          ptx::barrier_init(turn_done(t), Tile::kStagedDq ? 1 + (row_sums ? kSumWarps : 0) : kReleasers);
    ptx::barrier_init(dq_full(), 2 * 128), ptx::barrier_init(dq_empty(), 1);
    if (kDoApart) ptx::barrier_init(do_full(), 1), ptx::barrier_init(do_empty(), kReleasers);
    if (kPaired)
      for (int c = 0; c < 2; ++c) ptx::barrier_init(xch_full(c), 1), ptx::barrier_init(xch_empty(c), 4);
    if (kKeyPaired) ptx::barrier_init(ds_in(), 1), ptx::barrier_init(ds_out_free(), kReleasers);
    ptx::fence_barrier_init();
  }
  __device__ __forceinline__ void release_q(int s) const { this->release(q_empty(s)); }
  __device__ __forceinline__ void release_do() const { DoRing::release(do_empty()); }
};

// A pair's consumer me swaps its partial product (S^T or dP^T over this CTA's half of the head dims) for the other
// CTA's, so that both CTAs hold the whole product, the same bits (a + b either way round): open_slot, send the
// partial as soon as its wgmmas are done, receive the other's, free_slot. The partials go into the other CTA's slot
// by stores that complete on its barriers, once the other CTA read what went there the step before.
template <int kK, int kV, bool kRowSums>
struct Exchange {
  using Buf = Buffers<kK, kV, kRowSums>;
  static constexpr int kFloats = DkdvWideTile<kK, kV>::BN * DkdvWideTile<kK, kV>::BM / 128;  // a thread's part
  static_assert(Buf::kSlotBytes == 0 || Buf::kSlotBytes == kFloats * 4 * 128, "a slot holds a consumer's partial");
  const Buf& buf;
  const int me, t;
  const uint32_t other;  // the other CTA's rank
  const int it;

  __device__ __forceinline__ Exchange(const Buf& b, int step, int consumer, uint32_t rank)
      : buf(b), me(consumer), t(ptx::warpgroup_thread()), other(rank ^ 1u), it(step) {}

  // This step's receipt expected, and the other CTA done with what this one sent into the slot the step before.
  __device__ __forceinline__ void open_slot() const {
    if (t == 0) ptx::barrier_arrive_expect(buf.xch_full(me), Buf::kSlotBytes);
    Buf::ExchangeRing::wait_free(buf.xch_empty(me), it);
  }
  // The partial into the other CTA's slot.
  __device__ __forceinline__ void send(const float (&x)[kFloats]) const {
    float* const theirs = ptx::peer_shared(reinterpret_cast<float*>(buf.exchange(me)), other);
    uint64_t* const theirs_full = ptx::peer_shared(buf.xch_full(me), other);
#pragma unroll
    for (int i = 0; i < kFloats / 4; ++i) {
      const float v[4] = {x[4 * i], x[4 * i + 1], x[4 * i + 2], x[4 * i + 3]};
      ptx::store_to_peer(theirs + 4 * (i * 128 + t), v, theirs_full);
    }
  }
  // The other CTA's partial added to x.
  __device__ __forceinline__ void receive(float (&x)[kFloats]) const {
    ptx::barrier_wait(buf.xch_full(me), Buf::ExchangeRing::parity(it));
    const float4* const mine = buf.exchange(me);
#pragma unroll
    for (int i = 0; i < kFloats / 4; ++i) {
      const float4 a = mine[i * 128 + t];
      x[4 * i] += a.x, x[4 * i + 1] += a.y, x[4 * i + 2] += a.z, x[4 * i + 3] += a.w;
    }
  }
  // The other CTA writes the slot again as soon as this arrival reaches it: the caller frees the slot only once it
  // has stored (P^T or dS^T) what it made from the slot's values, so that these reads are served before.
  __device__ __forceinline__ void free_slot() const {
    __syncwarp();  // every lane's reads are issued before its warp frees the slot
    if (threadIdx.x % 32 == 0) ptx::arrive_on_peer(ptx::peer_shared(buf.xch_empty(me), other));
  }
};

// A key pair's dS^T tiles, swapped each step so that both CTAs make dQ over the item's 128 keys: consumer 1 arms
// ds_in for the other CTA's tile (expect), writes its own tile once the other CTA is done with the last one sent
// (wait_sent_free: the copy engine has then read it too), and once both consumers met at ds_ready (every thread's
// stores are in and fenced) copies it into the other CTA (send); both consumers issue dQ's k-steps over their own tile,
// release the step's dO (consumer 0) or Q (consumer 1), then wait for the other's tile (receive) before the k-steps over
// it, and free it once their dQ wgmmas are done (free).
template <int kK, int kV, bool kRowSums>
struct DsSwap {
  using Buf = Buffers<kK, kV, kRowSums>;
  static constexpr uint32_t kTileBytes = Buf::Tile::kDsBytes / 2;
  const Buf& buf;
  const uint32_t other;  // the other CTA's rank
  const int it;

  __device__ __forceinline__ DsSwap(const Buf& b, int step, uint32_t rank) : buf(b), other(rank ^ 1u), it(step) {}

  __device__ __forceinline__ void expect() const {
    if (ptx::warpgroup_thread() == 0) ptx::barrier_arrive_expect(buf.ds_in(), kTileBytes);
  }
  __device__ __forceinline__ void wait_sent_free() const { Buf::DsRing::wait_free(buf.ds_out_free(), it); }
  __device__ __forceinline__ void send() const {
    if (ptx::warpgroup_thread() == 0)
      ptx::copy_to_peer(ptx::peer_shared(buf.template dst_other<unsigned char>(), other),
                        buf.template dst<unsigned char>(), kTileBytes, ptx::peer_shared(buf.ds_in(), other));
  }
  __device__ __forceinline__ void receive() const { ptx::barrier_wait(buf.ds_in(), Buf::DsRing::parity(it)); }
  // After the wgmmas that read the other's tile are waited for (their reads are done).
  __device__ __forceinline__ void free() const {
    __syncwarp();
    if (threadIdx.x % 32 == 0) ptx::arrive_on_peer(ptx::peer_shared(buf.ds_out_free(), other));
  }
};

// The staged dK and dV tiles ([BN keys][kCtaK] and [BN keys][kCtaV], 16-byte piece j of key r at piece j ^ (r % 8))
// to dk and dv by 16-byte pieces, all 256 consumer threads; a pair's CTA `rank` has columns kCtaK rank.. (kCtaV
// rank.. of dv).
template <class T, int kK, int kV>
__device__ __forceinline__ void copy_out(const bwd::BackwardParams& p, const bwd_detail::KeyWork& w, int rank,
                                         const T* dk_tile, const T* dv_tile) {
  using Tile = DkdvWideTile<kK, kV>;
  constexpr int kCtaK = Tile::kCtaK, kCtaV = Tile::kCtaV;
  constexpr int kChunks = (kCtaK > kCtaV ? kCtaK : kCtaV) * 2 / 16;  // 16-byte pieces of the wider row
  const int t = threadIdx.x - 128;
  for (int i = t; i < Tile::BN * kChunks; i += 256) {
    const int key = i / kChunks, chunk = i % kChunks, col = chunk * 8, at = 8 * (chunk ^ (key % 8));
    if (w.j0 + key >= p.a.key_len(w.seq.len)) continue;
    const int64_t token = w.seq.start + w.j0 + key;
    if (col < kCtaK && kCtaK * rank + col < p.a.K)
      *reinterpret_cast<uint4*>(p.dk.template row<T>(w.seq.batch, token, w.hk) + kCtaK * rank + col) =
          *reinterpret_cast<const uint4*>(dk_tile + key * kCtaK + at);
    if (col < kCtaV && kCtaV * rank + col < p.a.V)
      *reinterpret_cast<uint4*>(p.dv.template row<T>(w.seq.batch, token, w.hk) + kCtaV * rank + col) =
          *reinterpret_cast<const uint4*>(dv_tile + key * kCtaV + at);
  }
}

}  // namespace bwd_wide
#endif  // __CUDACC__

}  // namespace flashgate::cuda::hopper
