// The wide Hopper backward's block consumers (sm_90a; backward.h's DkdvWideTile for 192 / 128): the two consumers
// split the keys for S and dP and the head dims for dV, dK and dQ. A consumer's step: S and dP of its BN / 2 keys
// (queries as rows, P made while dP runs), dS; once the other consumer is done with the last step's P and dS, P and
// dS into shared memory; once both consumers' halves are in, dV^T += dO^T P and dK^T += Q^T dS for its 64-dim blocks
// and dQ = dS K for its 64-column blocks, staged for the writer warp. Consumer 0 owns the three dK^T blocks and dQ's
// first, consumer 1 the two dV^T blocks and dQ's other two, so that both make as many. Each runs a copy of the code
// of its own (kMe), so the two meet on an mbarrier (a named barrier's bar.sync wants one instruction for all warps).
// P and dS serve as MN-major B operands of dV^T and dK^T (rows: the K dimension, the queries) and dS as the K-major
// A operand of dQ (rows: M, the queries).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/backward_params.h"
#include "cuda/common/element.h"
#include "cuda/common/visibility.h"
#include "cuda/hopper/backward.h"
#include "cuda/hopper/backward_roles.cuh"
#include "cuda/hopper/backward_wide_buffers.cuh"
#include "cuda/hopper/dq_staging.cuh"
#include "cuda/ptx/fast_math.h"
#include "cuda/ptx/tma.h"
#include "cuda/ptx/warpgroup.h"
#include "cuda/ptx/wgmma.h"

namespace flashgate::cuda::hopper {

#if defined(__CUDACC__)
namespace bwd_wide {

// Consumer warpgroup kMe: keys BN / 2 kMe.. of the tile for S and dP; its blocks of dK^T and dV^T (head dims as rows)
// and of dQ (head dims as columns).
template <class T, int kK, int kV, int kMe>
class BlockConsumer {
  using Tile = DkdvWideTile<kK, kV>;
  using Buf = Buffers<kK, kV>;
  static constexpr int BM = Tile::BM, BN = Tile::BN;
  static constexpr int kKeys = BN / 2;  // S, dP columns of this consumer
  static constexpr int kS = kKeys / 2;  // S, dP accumulators per thread (m64 n kKeys)
  static_assert(!Tile::kSplit && Tile::kPair == 1 && (kMe == 0 || kMe == 1), "the block consumers' shape");
  using Scale = PScale<T, false>;
  // Counts of this consumer's blocks: dK^T rows, dV^T rows and dQ columns.
  static constexpr int kDkCount = kMe == 0 ? 3 : 0, kDvCount = kMe == 0 ? 0 : 2, kDqCount = kMe == 0 ? 1 : 2;
  static_assert(kDkCount + kDvCount + kDqCount == (2 * Tile::kKBlocks + Tile::kVBlocks) / 2,
                "both consumers make as many blocks");
  static constexpr int kDqFirst = kMe;

 public:
  static constexpr int kDqAcc = kDqCount * 32;  // accumulators per thread of dQ (m64, n 64 kDqCount)

  __device__ __forceinline__ BlockConsumer(const bwd::BackwardParams& p, const bwd_detail::KeyWork& w)
      : p_(p), w_(w), lane_(threadIdx.x % 32), warp_(ptx::warpgroup_thread() / 32) {
#pragma unroll
    for (int t = 0; t < kDkCount; ++t)
#pragma unroll
      for (int i = 0; i < BN / 2; ++i) dk_[t][i] = 0.f;
#pragma unroll
    for (int t = 0; t < kDvCount; ++t)
#pragma unroll
      for (int i = 0; i < BN / 2; ++i) dv_[t][i] = 0.f;
  }

  // S = Q K^T and dP = dO V^T for this consumer's keys, as two wgmma groups (P is made while dP runs).
  __device__ __forceinline__ void issue_scores(float (&s)[kS], float (&dp)[kS], const Buf& buf, int stage) const {
    const T* k = buf.template k<T>() + kKeys * kMe * 64;  // rows kKeys kMe.. of every 64-column block
    const T* v = buf.template v<T>() + kKeys * kMe * 64;
    const uint64_t q0 = ptx::k_major_descriptor(buf.template q<T>(stage), BM, 0), k0 = ptx::k_major_descriptor(k, BN, 0);
#pragma unroll
    for (int step = 0; step < kK / 16; ++step)
      ptx::Wgmma<T, kKeys, 0>::ss(s, ptx::descriptor_step(q0, BM, step), ptx::descriptor_step(k0, BN, step), step > 0);
    ptx::wgmma_commit();
    const uint64_t do0 = ptx::k_major_descriptor(buf.template dout<T>(stage), BM, 0),
                   v0 = ptx::k_major_descriptor(v, BN, 0);
#pragma unroll
    for (int step = 0; step < kV / 16; ++step)
      ptx::Wgmma<T, kKeys, 0>::ss(dp, ptx::descriptor_step(do0, BM, step), ptx::descriptor_step(v0, BN, step),
                                  step > 0);
    ptx::wgmma_commit();
  }

  // This thread's query rows in the step (accumulator rows g and g + 8 of its warp's 16) and keys in the tile.
  __device__ __forceinline__ int row(int half) const { return 16 * warp_ + lane_ / 4 + 8 * half; }
  __device__ __forceinline__ int key(int j, int odd) const { return kKeys * kMe + 8 * j + 2 * (lane_ % 4) + odd; }

  // P = exp2(S scale log2 e - row offset) in place in s, the step's queries at key positions from pos0 (i0 +
  // key_shift); kMasked: the step's block crosses the causal diagonal, the window's edge or the keys' end (a slice
  // pair's key_end: a sequence's keys past its end meet only rows past it, whose P is 0 through their terms).
  template <bool kMasked>
  __device__ __forceinline__ void probabilities(float (&s)[kS], const float* terms, int pos0) const {
    const AttentionParams& a = p_.a;
    const unsigned bound = distance_bound(a.window);
    const float r[2] = {terms[row(0)], terms[row(1)]};
#pragma unroll
    for (int j = 0; j < kKeys / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int half = e >> 1, q = pos0 + row(half), kk = w_.j0 + key(j, e & 1);
        float pr = ptx::exp2_ftz(fmaf(s[4 * j + e], a.scale_log2, -r[half]));
        if (kMasked && (!visible_at_distance(q - kk, bound) || kk >= a.key_end)) pr = 0.f;
        s[4 * j + e] = pr;
      }
  }

  // dS = P (dP - D) in place in dp.
  __device__ __forceinline__ void gradients(const float (&s)[kS], float (&dp)[kS], const float* terms) const {
    const float d[2] = {terms[BM + row(0)], terms[BM + row(1)]};
#pragma unroll
    for (int j = 0; j < kKeys / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) dp[4 * j + e] = s[4 * j + e] * Scale::dp_minus_d(dp[4 * j + e], d[e >> 1]);
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
        const int at = chunk / 8 * ptx::swizzle_block_bytes(BM) + ptx::swizzled_chunk(r, chunk % 8);
        *reinterpret_cast<uint32_t*>(bytes + at + 4 * (lane_ % 4)) =
            ptx::pack2<T>(x[4 * j + 2 * half], x[4 * j + 2 * half + 1]);
      }
    ptx::fence_async_shared();
  }

  // dV^T += dO^T P and dK^T += Q^T dS for this consumer's blocks of head dims (dO and Q read transposed: M is their
  // contiguous dimension), then dQ = dS K for its blocks of columns (K read transposed); two wgmma groups.
  // Per-step descriptors here: from bases by adds (as the other groups take theirs) measured no better beyond the
  // run-to-run spread.
  __device__ __forceinline__ void issue_kv(const Buf& buf, int stage, const T* p, const T* ds) {
    issue_blocks<kDvCount>(dv_, buf.template dout<T>(stage), p);
    issue_blocks<kDkCount>(dk_, buf.template q<T>(stage), ds);
    ptx::wgmma_commit();
  }
  __device__ __forceinline__ void issue_dq(float (&dq)[kDqAcc], const Buf& buf, const T* ds) const {
    const T* k = buf.template k<T>() + kDqFirst * BN * 64;  // 64-column blocks kDqFirst.. of K
    const uint64_t ds0 = ptx::k_major_descriptor(ds, BM, 0), k0 = ptx::mn_major_descriptor(k, BN, 0);
#pragma unroll
    for (int s = 0; s < BN / 16; ++s)
      ptx::Wgmma<T, 64 * kDqCount, 1>::ss(dq, ptx::descriptor_step(ds0, BM, s), ptx::mn_major_step(k0, s), s > 0);
    ptx::wgmma_commit();
  }

  // Step `it`'s dQ (this consumer's columns) into the staged tile, once the writer has read step it - 1's; then this
  // thread's arrival on dq_full.
  __device__ __forceinline__ void stage_dq(const float (&dq)[kDqAcc], const Buf& buf, int it) const {
    Buf::DqRing::wait_free(buf.dq_empty(), it);
    dq_staging::write_group(dq, buf.dq_slot(), warp_, 8 * kDqFirst, p_.K16 / 8, p_.K16 / 8);
    ptx::barrier_arrive(buf.dq_full());
  }

  __device__ __forceinline__ void hold_kv() {
#pragma unroll
    for (int t = 0; t < kDkCount; ++t) ptx::wgmma_hold(dk_[t]);
#pragma unroll
    for (int t = 0; t < kDvCount; ++t) ptx::wgmma_hold(dv_[t]);
  }

  // dK^T (times scale) and dV^T into the row-major [BN keys][kK] and [BN keys][kV] tiles of copy_out, this
  // consumer's blocks.
  __device__ __forceinline__ void stage_out(T* dk_tile, T* dv_tile) const {
#pragma unroll
    for (int t = 0; t < kDkCount; ++t) stage_block<kK>(dk_[t], t, p_.a.scale, dk_tile);
#pragma unroll
    for (int t = 0; t < kDvCount; ++t) stage_block<kV>(dv_[t], t, Scale::kInv, dv_tile);
  }

 private:
  // acc[t] += block t of `rows` (64 head dims, read transposed: M is their contiguous dimension) times `keys` (the
  // P or dS tile, read transposed), for the first kCount blocks.
  template <int kCount, int kN>
  __device__ __forceinline__ static void issue_blocks(float (&acc)[kN][BN / 2], const T* rows, const T* keys) {
#pragma unroll
    for (int t = 0; t < kCount; ++t)
#pragma unroll
      for (int s = 0; s < BM / 16; ++s)
        ptx::Wgmma<T, BN, 1>::template ss<1>(acc[t], ptx::mn_major_descriptor(rows + t * BM * 64, BM, s),
                                             ptx::mn_major_descriptor(keys, BM, s), true);
  }

  // One m64nBN block of dK^T or dV^T (head dims 64 block.. as rows, keys as columns), times `factor`, into its
  // columns of the tile (16-byte piece j of key r at piece j ^ (r % 8)).
  template <int kDim>
  __device__ __forceinline__ void stage_block(const float (&x)[BN / 2], int block, float factor, T* tile) const {
    const int g = lane_ / 4, c = lane_ % 4;
    uint16_t* out = reinterpret_cast<uint16_t*>(tile);
#pragma unroll
    for (int j = 0; j < BN / 8; ++j)
#pragma unroll
      for (int half = 0; half < 2; ++half) {  // keys 8j + 2c and the next of head dim `dim`
        const int dim = 64 * block + 16 * warp_ + g + 8 * half, key = 8 * j + 2 * c;
        const int at = key * kDim + 8 * ((dim / 8) ^ (key % 8)) + dim % 8;
        const int at_next = (key + 1) * kDim + 8 * ((dim / 8) ^ ((key + 1) % 8)) + dim % 8;
        const int i = 4 * j + 2 * half;
        const uint32_t packed = ptx::pack2<T>(x[i] * factor, x[i + 1] * factor);
        out[at] = static_cast<uint16_t>(packed), out[at_next] = static_cast<uint16_t>(packed >> 16);
      }
  }

  const bwd::BackwardParams& p_;
  const bwd_detail::KeyWork w_;
  const int lane_, warp_;
  // dK^T, dV^T: m64nBN tiles, head dims as rows (one unused tile where a consumer has none of a kind).
  float dk_[kDkCount > 0 ? kDkCount : 1][BN / 2], dv_[kDvCount > 0 ? kDvCount : 1][BN / 2];
};

// Consumer kMe's walk over the item's steps, then its part of dK and dV out.
template <class T, int kK, int kV, int kMe>
__device__ __forceinline__ void consume_blocks(const DkdvParams& p, const bwd_detail::KeyWork& w,
                                               const Buffers<kK, kV>& buf) {
  using Tile = DkdvWideTile<kK, kV>;
  using Consumer = BlockConsumer<T, kK, kV, kMe>;
  Consumer c(p.b, w);
  uint32_t meetings = 0;
  const auto both_consumers = [&] { buf.meet(meetings++); };
  if (w.steps > 0) ptx::barrier_wait(buf.kv_full(), 0);
  bwd_detail::StepWalk<Tile::BM> walk(p.b, w);
  for (int it = 0; it < w.steps; ++it, walk.next()) {
    const bwd_detail::Step st = *walk;
    const int s = buf.stage(it);
    buf.wait_step(s, buf.parity(it));
    float sc[Tile::BN / 4], dp[Tile::BN / 4];
    ptx::wgmma_fence();
    c.issue_scores(sc, dp, buf, s);
    ptx::wgmma_wait<1>();
    ptx::wgmma_hold(sc);
    const int pos0 = st.i0 + p.b.a.key_shift;  // the step's first row's key position (a slice pair's rows shifted)
    if (block_needs_mask(st.i0, st.i0 + Tile::BM, w.j0, w.j0 + Tile::BN, w.seq.len, p.b.a.window, p.b.a.key_shift,
                         p.b.a.key_end))
      c.template probabilities<true>(sc, buf.terms(s), pos0);
    else
      c.template probabilities<false>(sc, buf.terms(s), pos0);
    ptx::wgmma_wait<0>();
    ptx::wgmma_hold(dp);
    c.gradients(sc, dp, buf.terms(s));
    ptx::barrier_arrive(buf.t_empty(s));
    T* const pt = buf.template pds<T>(0);
    T* const dst = buf.template pds<T>(1);
    both_consumers();  // both consumers' wgmmas of the last step are done
    c.store_tile(sc, pt);
    c.store_tile(dp, dst);
    both_consumers();  // both consumers' keys of P and dS are in
    float dq[Consumer::kDqAcc];
    ptx::wgmma_fence();
    c.issue_kv(buf, s, pt, dst);
    c.issue_dq(dq, buf, dst);
    ptx::wgmma_wait<0>();
    c.hold_kv();
    ptx::wgmma_hold(dq);
    buf.release_q(s);
    c.stage_dq(dq, buf, it);
  }
  // dK and dV through the Q and dO stages: every step's reads of them are done once both consumers are here.
  T* const dk_tile = buf.template q<T>(0);
  T* const dv_tile = dk_tile + Tile::BN * Tile::kCtaK;
  both_consumers();
  c.stage_out(dk_tile, dv_tile);
  both_consumers();
  copy_out<T, kK, kV>(p.b, w, 0, dk_tile, dv_tile);
}

}  // namespace bwd_wide
#endif  // __CUDACC__

}  // namespace flashgate::cuda::hopper
