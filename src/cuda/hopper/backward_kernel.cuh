// The Hopper key-major backward kernel (sm_90a) for fp16/bf16 in the default (atomic dQ) mode: dK, dV of one key
// tile and one kv head, dQ added into the fp32 accumulator; with kRowSums (a gate or a sink) also the row sums E
// (and, with a gate, the mass) by atomics and the gate's column sums of dS; with a sink and no gate (p.sink_parts)
// instead each consumer warp's part of dsink's sum. Its shape is backward.h's DkdvTile.
//
// Warpgroup 0 produces (the roles of backward_roles.cuh): one elected lane loads K and V once and streams each
// step's Q and dO tiles through a two-stage ring with TMA; a second warp stages the step's row terms ((lse - Gc) in
// the log2 domain, +inf where a row takes no probability; D) into a ring beside them; a third (the writer) has the
// copy engine add each step's staged dQ tile into the accumulator. Warpgroups 1 and 2 consume, 64 keys each. A
// consumer's step: S^T and dP^T (P made while dP^T runs), dS^T; dV issued, then the previous step's dQ block from
// both consumers' dS^T, then dK; the dQ block is staged while dK runs. The one-step lag lets the consumers drift
// apart, so one's softmax work overlaps the other's MMAs.
//
// Shared memory: K, V [kD/64][128 keys][64]; per stage Q, dO [kD/64][BM rows][64]; dS^T [2][BM/64][128 keys][64];
// the terms [stage][lse | D | sink weight][BM]; with kRowSums the E and mass partials [2][E | mass][warp][BM]; the
// staged dQ tile [16-row group][chunk][lane] float4 (dq_staging.cuh), which the dK / dV staging rows reuse.
// Every 64-column block is 128-byte swizzled and 1024-byte aligned (cuda/ptx/wgmma.h has the layouts); the
// consumers write dS^T in that same swizzle.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "cuda/common/backward_params.h"
#include "cuda/common/cuda_check.h"
#include "cuda/common/element.h"
#include "cuda/common/online_softmax.h"
#include "cuda/common/visibility.h"
#include "cuda/hopper/backward.h"
#include "cuda/hopper/backward_keys_as_rows.cuh"
#include "cuda/hopper/backward_roles.cuh"
#include "cuda/hopper/dq_staging.cuh"
#include "cuda/hopper/ring.h"
#include "cuda/ptx/fast_math.h"
#include "cuda/ptx/mma.h"
#include "cuda/ptx/tma.h"
#include "cuda/ptx/warpgroup.h"
#include "cuda/ptx/wgmma.h"

namespace flashgate::cuda::hopper {

#if defined(__CUDACC__)
namespace bwd_detail {

// The CTA's buffers and barriers; the Q / dO and term rings count steps (ring.h).
template <int kD>
struct Buffers : Ring<DkdvTile<kD>::kStages>, StepBarriers<DkdvTile<kD>::kStages> {
  using Tile = DkdvTile<kD>;
  using Ring<Tile::kStages>::kS;
  static constexpr int kReleasers = 8;  // one lane per consumer warp

  // dS^T and the row-sum partials of step b sit in buffer b % 2: ds_full when both consumers wrote theirs, ds_empty
  // when both made their dQ blocks from it (one step later, so that the two consumers need not run in lockstep).
  // Every consumer thread arrives on both: its own shared-memory writes and reads are ordered by its arrival.
  using DsRing = Ring<2>;
  // K and V of the CTA's n-th item and the item's number (`item`): kv_empty when the consumers are done with both
  // and the term warp (and in deterministic mode the turn warp) has read the number.
  using KvRing = Ring<1>;
  // Deterministic mode, per step: turn_ready when the turn warp saw every earlier add to the step's dQ rows counted,
  // turn_done when the writer warp's adds there are complete (and with the row sums, every consumer warp added E and
  // the mass).
  using TurnRing = Ring<2>;
  // The step's staged dQ tile: dq_full when both consumers' 256 threads wrote it, dq_empty when the writer's copy
  // engine read it.
  using DqRing = Ring<1>;

  // then per buffer ds_full, ds_empty, per turn stage turn_ready, turn_done, then dq_full, dq_empty
  using Bars = StepBarriers<kS>;
  unsigned char* base;
  int* item;  // the number of the item in the K / V stage, -1 once there is none
  static constexpr int kBarriers = Bars::kCount + 2 * 2 + 2 * 2 + 2;

  template <class T>
  __device__ __forceinline__ T* k() const { return reinterpret_cast<T*>(base); }
  template <class T>
  __device__ __forceinline__ T* v() const { return reinterpret_cast<T*>(base + Tile::kKBytes); }
  template <class T>
  __device__ __forceinline__ T* q(int s) const {
    return reinterpret_cast<T*>(base + 2 * Tile::kKBytes + s * 2 * Tile::kQBytes);
  }
  template <class T>
  __device__ __forceinline__ T* dout(int s) const { return q<T>(s) + Tile::kQBytes / 2; }
  template <class T>
  __device__ __forceinline__ T* ds(int buffer) const {
    return reinterpret_cast<T*>(base + 2 * Tile::kKBytes + kS * 2 * Tile::kQBytes + buffer * Tile::kDsBytes);
  }
  // The row offsets r[BM], D[BM] and the sink weights exp(sink - lse)[BM] (with p.sink_parts) of stage s.
  __device__ __forceinline__ float* terms(int s) const {
    return reinterpret_cast<float*>(base + 2 * Tile::kKBytes + kS * 2 * Tile::kQBytes + 2 * Tile::kDsBytes) +
           s * Tile::kTermRows * Tile::BM;
  }
  // The consumer warps' partial E and mass of a step's queries, [buffer][E | mass][8 warps][BM].
  __device__ __forceinline__ float* sums(int buffer) const { return terms(kS) + buffer * 2 * 8 * Tile::BM; }
  // The staged dQ tile (16-byte aligned for the copy engine).
  __device__ __forceinline__ unsigned char* dq_slot() const { return reinterpret_cast<unsigned char*>(sums(2)); }
  // Consumer c's staging row r for its dK and dV, in the dQ slot.
  __device__ __forceinline__ unsigned char* out_row(int c, int r) const {
    return dq_slot() + (64 * c + r) * Tile::kOutRowBytes;
  }
  using Bars::kv_full, Bars::kv_empty, Bars::q_full, Bars::q_empty, Bars::t_full, Bars::t_empty;
  __device__ __forceinline__ uint64_t* ds_full(int b) const { return this->bars + Bars::kCount + b; }
  __device__ __forceinline__ uint64_t* ds_empty(int b) const { return this->bars + Bars::kCount + 2 + b; }
  __device__ __forceinline__ uint64_t* turn_ready(int t) const { return this->bars + Bars::kCount + 4 + t; }
  __device__ __forceinline__ uint64_t* turn_done(int t) const { return this->bars + Bars::kCount + 6 + t; }
  __device__ __forceinline__ uint64_t* dq_full() const { return this->bars + Bars::kCount + 8; }
  __device__ __forceinline__ uint64_t* dq_empty() const { return this->bars + Bars::kCount + 9; }

  // deterministic: the CTA has a turn warp; row_sums: the consumers add E and the mass in the turns.
  __device__ __forceinline__ void init(bool deterministic, bool row_sums) const {
    // The item's number is read by the term warp, the writer and in deterministic mode the turn warp.
    ptx::barrier_init(kv_full(), 1), ptx::barrier_init(kv_empty(), kReleasers + (deterministic ? 3 : 2));
    for (int t = 0; t < 2; ++t)
      ptx::barrier_init(turn_ready(t), 1), ptx::barrier_init(turn_done(t), 1 + (row_sums ? kReleasers : 0));
    ptx::barrier_init(dq_full(), 2 * 128), ptx::barrier_init(dq_empty(), 1);
    for (int s = 0; s < kS; ++s) {
      ptx::barrier_init(q_full(s), 1), ptx::barrier_init(q_empty(s), kReleasers);
      ptx::barrier_init(t_full(s), 32), ptx::barrier_init(t_empty(s), 128 * 2);
    }
    for (int b = 0; b < 2; ++b) ptx::barrier_init(ds_full(b), 2 * 128), ptx::barrier_init(ds_empty(b), 2 * 128);
    ptx::fence_barrier_init();
  }
  // A consumer warp is done with stage s's Q and dO (after its wgmma wait: every lane's reads are complete).
  __device__ __forceinline__ void release_q(int s) const { this->release(q_empty(s)); }
};

// One consumer warpgroup: keys j0 + 64 me .. + 63 of the tile.
template <class T, int kD, bool kRowSums>
class Consumer {
  using Tile = DkdvTile<kD>;
  static constexpr int BM = Tile::BM, BN = Tile::BN;
  static constexpr int kS = BM / 2;       // S^T, dP^T accumulators per thread (m64nBM)
  static constexpr int kAcc = kD / 2;     // dK, dV accumulators per thread (m64nkD)
  static constexpr int kDq = 64 / 2;      // dQ accumulators per thread (one m64n64 block)

 public:
  using Operand = uint32_t[BM / 16][4];
  // Whether it sums dsink's parts itself (p.sink_parts; host/hopper_backward.h): without the row sums, at kD 128 (D64's
  // consumers have no register to spare for it).
  static constexpr bool kSinkParts = !kRowSums && kD == 128;
  // P's factor (element.h) where a sink can come: with the row sums or the sink's parts (D64's plain consumer, which
  // never sees a sink, keeps its schedule).
  using Scale = PScale<T, kRowSums || kSinkParts>;

  __device__ __forceinline__ Consumer(const bwd::BackwardParams& p, const KeyWork& w, int me)
      : p_(p), w_(w), me_(me), lane_(threadIdx.x % 32), warp_(ptx::warpgroup_thread() / 32) {
#pragma unroll
    for (int i = 0; i < kAcc; ++i) dk_[i] = 0.f, dv_[i] = 0.f;
  }

  // This thread's two keys (rows g and g + 8 of its warp's 16).
  __device__ __forceinline__ int key(int half) const { return w_.j0 + 64 * me_ + 16 * warp_ + lane_ / 4 + 8 * half; }

  // kRowSums: the gate's key terms Gc_key log2 e of this thread's keys for query head h (0 without a gate; a slice
  // pair's relative to its anchor, gate_anchor).
  __device__ __forceinline__ float2 key_terms(int64_t h) const {
    if (!kRowSums || !p_.a.has_gate) return make_float2(0.f, 0.f);
    return key_gate_terms<BN>(p_.a, w_, h, key(0));
  }

  // S^T = K Q^T and dP^T = V dO^T for this consumer's keys, as two wgmma groups (P is made while dP^T runs).
  __device__ __forceinline__ void issue_scores(float (&s)[kS], float (&dp)[kS], const Buffers<kD>& buf,
                                               int stage) const {
    const T* k = buf.template k<T>() + 64 * me_ * 64;  // rows 64 me.. of every 64-column block
    const T* v = buf.template v<T>() + 64 * me_ * 64;
    const uint64_t k0 = ptx::k_major_descriptor(k, BN, 0), q0 = ptx::k_major_descriptor(buf.template q<T>(stage), BM, 0);
#pragma unroll
    for (int step = 0; step < kD / 16; ++step)
      ptx::Wgmma<T, BM, 0>::ss(s, ptx::descriptor_step(k0, BN, step), ptx::descriptor_step(q0, BM, step), step > 0);
    ptx::wgmma_commit();
    const uint64_t v0 = ptx::k_major_descriptor(v, BN, 0),
                   do0 = ptx::k_major_descriptor(buf.template dout<T>(stage), BM, 0);
#pragma unroll
    for (int step = 0; step < kD / 16; ++step)
      ptx::Wgmma<T, BM, 0>::ss(dp, ptx::descriptor_step(v0, BN, step), ptx::descriptor_step(do0, BM, step), step > 0);
    ptx::wgmma_commit();
  }

  // P^T in place in s (backward_keys_as_rows.cuh), the step's queries at key positions from pos0 (i0 + key_shift).
  template <bool kMasked>
  __device__ __forceinline__ void probabilities(float (&s)[kS], const float* terms, int pos0, float2 key_term) const {
    probabilities_by_key<kMasked, kRowSums, BM>(s, p_.a, terms, pos0, make_int2(key(0), key(1)), key_term, lane_);
  }

  // dS^T = P^T (dP^T - D), with P^T and dS^T packed into the A operands pt and dst as they are made (P^T carries
  // Scale's factor, the staged D its inverse; E and the mass are scaled back where they are stored).
  // kRowSums: the warp's parts of E (sum_keys P dP) and the mass (sum_keys P) of each query go to `partials`
  // ([E | mass][8 warps][BM]), and the key rows' sums of dS^T are added to colsum_ (the gate's column sums).
  // Else with p.sink_parts: sum_queries exp(sink - lse) sum_keys P dP is added to sink_sum_ (dsink's part).
  __device__ __forceinline__ void gradients(const float (&s)[kS], const float (&dp)[kS], const float* terms,
                                            float* partials, Operand& pt, Operand& dst) {
    const int c = lane_ % 4, warp = 4 * me_ + warp_;
#pragma unroll
    for (int j = 0; j < BM / 8; ++j) {
      const float2 d = *reinterpret_cast<const float2*>(terms + BM + 8 * j + 2 * c);
      float ds[4], sums[4] = {0.f, 0.f, 0.f, 0.f};  // E of columns 2c, 2c + 1, then their mass
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float pr = s[4 * j + e], dpv = dp[4 * j + e];
        ds[e] = pr * Scale::dp_minus_d(dpv, (e & 1) ? d.y : d.x);
        if constexpr (kRowSums) {
          sums[e & 1] += pr * dpv;
          sums[2 + (e & 1)] += pr;
          colsum_[e >> 1] += ds[e];
        }
      }
      if (kSinkParts && p_.sink_parts) {  // columns 2c, 2c + 1: each weight times its sum over the two keys
        const float2 weight = *reinterpret_cast<const float2*>(terms + 2 * BM + 8 * j + 2 * c);
        const float e0 = fmaf(s[4 * j], dp[4 * j], s[4 * j + 2] * dp[4 * j + 2]);
        const float e1 = fmaf(s[4 * j + 1], dp[4 * j + 1], s[4 * j + 3] * dp[4 * j + 3]);
        sink_sum_ = fmaf(e0, weight.x, fmaf(e1, weight.y, sink_sum_));
      }
#pragma unroll
      for (int half = 0; half < 2; ++half) {  // the operand places of cuda/ptx/wgmma.h: k-step j / 2
        pt[j / 2][2 * (j % 2) + half] = ptx::pack2<T>(s[4 * j + 2 * half], s[4 * j + 2 * half + 1]);
        dst[j / 2][2 * (j % 2) + half] = ptx::pack2<T>(ds[2 * half], ds[2 * half + 1]);
      }
      if constexpr (kRowSums) store_query_sums<8, BM>(sums, partials, warp, 8 * j + 2 * c, lane_);
    }
  }

  // kRowSums: once both consumers stored their partials, BM threads add a query's eight into E (and the mass).
  __device__ __forceinline__ void add_sums(const float* partials, int64_t h, int i0) const {
    const int t = ptx::warpgroup_thread() + 128 * me_;
    if (t >= BM || i0 + t >= w_.seq.len) return;
    float e = 0.f, mass = 0.f;
#pragma unroll
    for (int w = 0; w < 8; ++w) e += partials[w * BM + t], mass += partials[(8 + w) * BM + t];
    e *= Scale::kInv, mass *= Scale::kInv;
    const int64_t row = p_.row_index(w_.seq.batch, h, w_.seq.start) + i0 + t;
    atomicAdd(p_.E + row, e);
    if (p_.a.has_gate) atomicAdd(p_.mass + row, mass);
  }

  // With p.sink_parts (and no row sums): at the end of query head h's steps, the warp's part of dsink's sum.
  __device__ __forceinline__ void store_sink_part(int64_t h) {
    if constexpr (kSinkParts) {
      const float v = warp_sum(sink_sum_) * Scale::kInv;
      sink_sum_ = 0.f;
      if (lane_ == 0) p_.sink_parts[bwd::sink_part_index(p_, w_.hk, w_.order, h, 4 * me_ + warp_)] = v;
    }
  }

  // kRowSums with a gate: at the end of query head h's steps, the key rows' sums of dS over its queries.
  __device__ __forceinline__ void store_colsum(int64_t h) {
    if constexpr (kRowSums) store_key_colsums(colsum_, p_, w_, h, key(0), lane_, true);
  }

  // dS^T into shared memory (rows: the tile's keys, columns: the step's queries in swizzled 64-column blocks) for
  // dQ = dS K, then a fence so that the tensor cores see it.
  __device__ __forceinline__ void store_ds(const Operand& ds, T* tile) const {
    const int g = lane_ / 4, c = lane_ % 4;
    unsigned char* bytes = reinterpret_cast<unsigned char*>(tile);
#pragma unroll
    for (int j = 0; j < BM / 8; ++j)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int r = 64 * me_ + 16 * warp_ + g + 8 * half, chunk = j % 8;
        *reinterpret_cast<uint32_t*>(bytes + ptx::swizzled_chunk(r, chunk) + (j / 8) * BN * 128 + 4 * c) =
            ds[j / 2][2 * (j % 2) + half];
      }
    ptx::fence_async_shared();
  }

  // dV += P^T dO (dO read transposed from its TMA layout), as one wgmma group.
  __device__ __forceinline__ void issue_dv(const Operand& pt, const Buffers<kD>& buf, int stage) {
    const uint64_t do0 = ptx::mn_major_descriptor(buf.template dout<T>(stage), BM, 0);
#pragma unroll
    for (int t = 0; t < BM / 16; ++t) ptx::Wgmma<T, kD, 1>::rs(dv_, pt[t], ptx::mn_major_step(do0, t), true);
    ptx::wgmma_commit();
  }
  // dK += dS^T Q (Q read transposed), as one wgmma group.
  __device__ __forceinline__ void issue_dk(const Operand& dst, const Buffers<kD>& buf, int stage) {
    const uint64_t q0 = ptx::mn_major_descriptor(buf.template q<T>(stage), BM, 0);
#pragma unroll
    for (int t = 0; t < BM / 16; ++t) ptx::Wgmma<T, kD, 1>::rs(dk_, dst[t], ptx::mn_major_step(q0, t), true);
    ptx::wgmma_commit();
  }

  // This consumer's dQ block (backward.h): its first row in the step and first column.
  __device__ __forceinline__ int dq_row0() const { return Tile::kDqSplitsColumns ? 0 : 64 * me_; }
  __device__ __forceinline__ int dq_col0() const { return Tile::kDqSplitsColumns ? 64 * me_ : 0; }

  // dQ = dS K for this consumer's block over all BN keys: dS read transposed from dS^T's 64-column block of its
  // rows, K transposed from the TMA layout's 64-column block of its columns.
  __device__ __forceinline__ void issue_dq(float (&dq)[kDq], const T* ds_tile, const Buffers<kD>& buf) const {
    const T* ds = ds_tile + (dq_row0() / 64) * BN * 64;
    const T* k = buf.template k<T>() + (dq_col0() / 64) * BN * 64;
    const uint64_t ds0 = ptx::mn_major_descriptor(ds, BN, 0), k0 = ptx::mn_major_descriptor(k, BN, 0);
#pragma unroll
    for (int t = 0; t < BN / 16; ++t)
      ptx::Wgmma<T, 64, 1>::template ss<1>(dq, ptx::mn_major_step(ds0, t), ptx::mn_major_step(k0, t), t > 0);
    ptx::wgmma_commit();
  }

  // Step n's dQ block (rows as the accumulator's warp rows) into the staged tile, once the writer has read step
  // n - 1's; then this thread's arrival on dq_full.
  __device__ __forceinline__ void stage_dq(const float (&dq)[kDq], const Buffers<kD>& buf, uint32_t n) const {
    Buffers<kD>::DqRing::wait_free(buf.dq_empty(), n);
    dq_staging::write_group(dq, buf.dq_slot(), dq_row0() / 16 + warp_, dq_col0() / 8, p_.K16 / 8, p_.K16 / 8);
    ptx::barrier_arrive(buf.dq_full());
  }

  // One accumulator's rows (this thread's keys g and g + 8 of its warp's 16), times `factor`, into the staging rows:
  // 16-byte piece j of row r at piece j ^ (r % 8), so that the eight rows of a store hit different banks.
  __device__ __forceinline__ void stage_rows(const float (&acc)[kAcc], float factor, const Buffers<kD>& buf) const {
    const int g = lane_ / 4, c = lane_ % 4;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int r = 16 * warp_ + g + 8 * half;
      unsigned char* row = buf.out_row(me_, r) + 4 * c;
#pragma unroll
      for (int j = 0; j < kD / 8; ++j)
        *reinterpret_cast<uint32_t*>(row + 16 * (j ^ (r % 8))) =
            ptx::pack2<T>(acc[4 * j + 2 * half] * factor, acc[4 * j + 2 * half + 1] * factor);
    }
  }

  // The staged rows of the keys in the sequence to `out` ([B][T][H][width]), the first `width` columns.
  __device__ __forceinline__ void copy_rows(const TokenHeadTensor& out, int width, const Buffers<kD>& buf) const {
    constexpr int kChunks = kD / 8, kKeyStep = 128 / kChunks;  // a thread keeps one 16-byte column of the rows
    const int t = ptx::warpgroup_thread(), chunk = t % kChunks, first = t / kChunks;
    if (8 * chunk >= width) return;
    const int keys = p_.a.key_len(w_.seq.len) - (w_.j0 + 64 * me_);
    T* dst = out.template row<T>(w_.seq.batch, w_.seq.start + w_.j0 + 64 * me_ + first, w_.hk) + 8 * chunk;
    const int64_t step = out.token_stride * kKeyStep;
#pragma unroll 1
    for (int key = first; key < min(keys, 64); key += kKeyStep, dst += step)
      *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(buf.out_row(me_, key) + 16 * (chunk ^ (key % 8)));
  }

  __device__ __forceinline__ void hold_kv() {
    ptx::wgmma_hold(dk_);
    ptx::wgmma_hold(dv_);
  }

  // dK (times scale), then dV, of this consumer's keys: each written into the staging rows and stored from there by
  // the warpgroup in 16-byte pieces of rows (the fragments' own 4-byte pieces wrote half sectors). The rows lie in
  // the dQ slot, free once the writer has read the dQ of the CTA's steps before n_end (both consumers' last writes
  // to it); the next item's first dQ goes there only after both consumers wrote that item's first dS^T, after their
  // stores.
  __device__ __forceinline__ void store(const Buffers<kD>& buf, uint32_t n_end) const {
    const AttentionParams& a = p_.a;
    const int bar = 1 + me_;  // this warpgroup's named barrier
    Buffers<kD>::DqRing::wait_free(buf.dq_empty(), n_end);
    stage_rows(dk_, a.scale, buf);
    ptx::named_barrier_sync(bar, 128);
    copy_rows(p_.dk, a.K, buf);
    ptx::named_barrier_sync(bar, 128);
    stage_rows(dv_, Scale::kInv, buf);
    ptx::named_barrier_sync(bar, 128);
    copy_rows(p_.dv, a.V, buf);
  }

 private:
  const bwd::BackwardParams& p_;
  const KeyWork w_;
  const int me_, lane_, warp_;
  float dk_[kAcc], dv_[kAcc];
  float colsum_[kRowSums ? 2 : 1] = {};  // kRowSums: this thread's part of its keys' dS sums for the current head
  float sink_sum_ = 0.f;                  // kSinkParts: this thread's part of dsink's sum for the current head
};

}  // namespace bwd_detail

// A persistent grid: each CTA takes items (take_item: key tiles of 128 keys and kv heads) as it comes free; the next
// item's K and V load while the consumers store the last one's dK and dV.
template <class T, int kD, bool kRowSums>
__global__ void __launch_bounds__(DkdvTile<kD>::kThreads, 1)
    dkdv_kernel(const __grid_constant__ DkdvParams p, const __grid_constant__ TileSchedule keys) {
#if FG_HOPPER_BWD_BODY
  using Tile = DkdvTile<kD>;
  using Buffers = bwd_detail::Buffers<kD>;
  // The ascending order walks the query heads innermost, which the row sums (per head) do not allow here.
  constexpr bwd_detail::Walks kWalks = kRowSums ? bwd_detail::Walks::kDown : bwd_detail::Walks::kEither;
  extern __shared__ unsigned char raw[];
  __shared__ alignas(8) uint64_t bars[Buffers::kBarriers];
  __shared__ int item_number;
  const Buffers buf{{}, {bars}, ptx::swizzle_aligned(raw), &item_number};
  if (threadIdx.x == 0) buf.init(p.b.dq_order != nullptr, kRowSums);
  __syncthreads();

  // Nothing stays live across setmaxnreg (ptxas would spill it). The producer lane takes the items and hands each
  // one's number over with its K and V (kv_full, also for items without loads); the rings count the CTA's items
  // (item_n) and its steps (step).
  if (threadIdx.x < 128) {
    ptx::setmaxnreg_dec<Tile::template kProducerRegs<kRowSums>>();
    const int warp = threadIdx.x / 32;
    const bool loads = warp == 0 && ptx::elect_one();
    const bool turns = warp == 2 && p.b.dq_order;  // deterministic mode's turn warp (take_turns)
    const bool writes = warp == 3;                  // the dQ writer (write_dq)
    if (!loads && warp != 1 && !turns && !writes) return;
    uint32_t step = 0;
    if (loads) {
      const int64_t items = keys.num_tiles * p.b.a.H;
      for (uint32_t item_n = 0;; ++item_n) {
        Buffers::KvRing::wait_free(buf.kv_empty(), item_n);  // everyone is done with the last item and its number
        // Taken only now that the CTA is free: an item taken ahead would sit behind the CTA's current one while
        // other CTAs come free (and in deterministic mode, wait on it).
        const uint32_t taken = bwd_detail::take_item(p.b);
        const int item = taken < items ? static_cast<int>(taken) : -1;
        *buf.item = item;
        if (item < 0) {
          ptx::barrier_arrive(buf.kv_full());
          break;
        }
        const bwd_detail::KeyWork w = bwd_detail::key_work<Tile::BN, Tile::BM, kWalks>(p.b, keys, item);
        if (!w.valid || w.steps == 0) {
          ptx::barrier_arrive(buf.kv_full());  // nothing to load: the number alone
          continue;
        }
        bwd_detail::produce<T>(p, buf, w, item_n, step);
        step += w.steps;
      }
    } else {
      for (uint32_t item_n = 0;; ++item_n) {
        ptx::barrier_wait(buf.kv_full(), Buffers::KvRing::parity(item_n));
        const int item = bwd_detail::handed_item(buf.item);
        Buffers::KvRing::release(buf.kv_empty());
        if (item < 0) break;
        const bwd_detail::KeyWork w = bwd_detail::key_work<Tile::BN, Tile::BM, kWalks>(p.b, keys, item);
        if (!w.valid || w.steps == 0) continue;
        using Consumer = bwd_detail::Consumer<T, kD, kRowSums>;
        if (turns) bwd_detail::take_turns<false>(p.b, buf, w, step, Buffers::kReleasers);
        else if (writes) bwd_detail::write_dq(p.b, buf, w, step);
        else bwd_detail::stage_terms<typename Consumer::Scale, Buffers, Consumer::kSinkParts>(p.b, buf, w, step);
        step += w.steps;
      }
    }
    return;
  }

  ptx::setmaxnreg_inc<Tile::template kConsumerRegs<kRowSums>>();
  const int me = ptx::warpgroup_index() - 1;
  using Consumer = bwd_detail::Consumer<T, kD, kRowSums>;
  uint32_t step = 0;
  for (uint32_t item_n = 0;; ++item_n) {
    ptx::barrier_wait(buf.kv_full(), Buffers::KvRing::parity(item_n));
    const int item = bwd_detail::handed_item(buf.item);
    if (item < 0) break;
    const bwd_detail::KeyWork w = bwd_detail::key_work<Tile::BN, Tile::BM, kWalks>(p.b, keys, item);
    if (!w.valid) {
      Buffers::KvRing::release(buf.kv_empty());
      continue;
    }
    Consumer c(p.b, w, me);
    if (w.steps == 0) {  // keys no query row sees (window 0): zero dK, dV and column sums
      Buffers::KvRing::release(buf.kv_empty());
      if (kRowSums && p.b.a.has_gate)
        for (int64_t h = w.hk * p.b.a.group; h < (w.hk + 1) * p.b.a.group; ++h) c.store_colsum(h);
      c.store(buf, step);
      continue;
    }
    float2 key_term = c.key_terms(w.hk * p.b.a.group);
    // Step it's dQ block (and row sums) is made in step it + 1 from both consumers' dS^T of step it, issued between
    // that step's dV and dK and staged for the writer while dK runs; in deterministic mode the row sums are added in
    // the turn the turn warp hands over.
    const auto issue_dq_of = [&](int it, float (&dq)[64 / 2]) {
      const uint32_t n = step + it;
      const int b = Buffers::DsRing::stage(n);
      ptx::barrier_wait(buf.ds_full(b), Buffers::DsRing::parity(n));
      c.issue_dq(dq, buf.template ds<T>(b), buf);
    };
    const auto finish_dq_of = [&](int it, const bwd_detail::Step& st, const float (&dq)[64 / 2]) {  // once made
      const uint32_t n = step + it;
      const int b = Buffers::DsRing::stage(n);
      c.stage_dq(dq, buf, n);  // first: the writer's turn needs it staged, the consumers' turn does not
      if constexpr (kRowSums) {
        const int t = Buffers::TurnRing::stage(n);
        if (p.b.dq_order) ptx::barrier_wait(buf.turn_ready(t), Buffers::TurnRing::parity(n));
        c.add_sums(buf.sums(b), st.h, st.i0);
        if (p.b.dq_order) Buffers::TurnRing::release(buf.turn_done(t));
      }
      ptx::barrier_arrive(buf.ds_empty(b));
    };
    bwd_detail::StepWalk<Tile::BM> walk(p.b, w);
    for (int it = 0; it < w.steps; ++it, walk.next()) {
      const bwd_detail::Step st = *walk;
      const uint32_t n = step + it;
      const int s = buf.stage(n), b = Buffers::DsRing::stage(n);
      buf.wait_step(s, buf.parity(n));
      if constexpr (!kRowSums && Tile::BM < Tile::BN) {
        // This consumer's 64 keys all above the step's rows (a causal item's first step at 64-row steps): P and dS
        // are 0, dV and dK unchanged; its dS^T block for the dQ of this step is zero.
        if (w.j0 + 64 * me > st.i0 + Tile::BM - 1 + p.b.a.key_shift) {
          Buffers::DsRing::wait_free(buf.ds_empty(b), n);
          typename Consumer::Operand zero = {};
          ptx::barrier_arrive(buf.t_empty(s));
          c.store_ds(zero, buf.template ds<T>(b));
          ptx::barrier_arrive(buf.ds_full(b));
          if (it > 0) {
            float dq[64 / 2];
            ptx::wgmma_fence();
            issue_dq_of(it - 1, dq);
            ptx::wgmma_wait<0>();
            ptx::wgmma_hold(dq);
            finish_dq_of(it - 1, walk.previous(), dq);
          }
          buf.release_q(s);
          if (Consumer::kSinkParts && p.b.sink_parts && walk.ends_head()) c.store_sink_part(st.h);
          continue;
        }
      }
      float sc[Tile::BM / 2], dp[Tile::BM / 2];
      ptx::wgmma_fence();
      c.issue_scores(sc, dp, buf, s);
      ptx::wgmma_wait<1>();
      ptx::wgmma_hold(sc);
      if (block_needs_mask(st.i0, st.i0 + Tile::BM, w.j0, w.j0 + Tile::BN, w.seq.len, p.b.a.window, p.b.a.key_shift,
                           p.b.a.key_end))
        c.template probabilities<true>(sc, buf.terms(s), st.i0 + p.b.a.key_shift, key_term);
      else
        c.template probabilities<false>(sc, buf.terms(s), st.i0 + p.b.a.key_shift, key_term);
      ptx::wgmma_wait<0>();
      ptx::wgmma_hold(dp);
      Buffers::DsRing::wait_free(buf.ds_empty(b), n);  // both consumers made the dQ of two steps back from buffer b
      typename Consumer::Operand pt, dst;
      c.gradients(sc, dp, buf.terms(s), buf.sums(b), pt, dst);
      ptx::barrier_arrive(buf.t_empty(s));
      c.store_ds(dst, buf.template ds<T>(b));
      ptx::barrier_arrive(buf.ds_full(b));
      ptx::wgmma_fence();
      c.issue_dv(pt, buf, s);
      if (it > 0) {
        float dq[64 / 2];
        issue_dq_of(it - 1, dq);
        c.issue_dk(dst, buf, s);
        ptx::wgmma_wait<1>();  // dV and dQ are done
        ptx::wgmma_hold(dq);
        finish_dq_of(it - 1, walk.previous(), dq);
      } else {
        c.issue_dk(dst, buf, s);
      }
      ptx::wgmma_wait<0>();
      c.hold_kv();
      buf.release_q(s);
      if constexpr (kRowSums) {
        if (walk.ends_head()) {
          c.store_colsum(st.h);
          if (it + 1 < w.steps) key_term = c.key_terms(st.h + 1);
        }
      } else if (Consumer::kSinkParts && p.b.sink_parts && walk.ends_head()) {
        c.store_sink_part(st.h);
      }
    }
    {
      float dq[64 / 2];
      issue_dq_of(w.steps - 1, dq);
      ptx::wgmma_wait<0>();
      ptx::wgmma_hold(dq);
      finish_dq_of(w.steps - 1, walk.previous(), dq);
    }
    Buffers::KvRing::release(buf.kv_empty());  // the producer loads the next item's K and V under the stores
    step += w.steps;
    c.store(buf, step);
  }
#endif
}

template <class T, int kD>
void launch_dkdv(const DkdvParams& p, const TileSchedule& keys, int sms, CUstream_st* stream) {
  using Tile = DkdvTile<kD>;
  const int64_t items = keys.num_tiles * p.b.a.H;
  if (items == 0) return;
  const auto kernel = p.b.needs_row_sums() ? dkdv_kernel<T, kD, true> : dkdv_kernel<T, kD, false>;
  FLASHGATE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            static_cast<int>(Tile::smem_bytes())));
  const unsigned grid = static_cast<unsigned>(items < sms ? items : sms);
  kernel<<<grid, Tile::kThreads, Tile::smem_bytes(), stream>>>(p, keys);
  FLASHGATE_CHECK_LAUNCH("hopper dkdv_kernel");
}
#endif  // __CUDACC__

}  // namespace flashgate::cuda::hopper
