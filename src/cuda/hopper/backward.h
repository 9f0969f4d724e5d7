// The Hopper backward's interface (host-includable): the key-major dK/dV kernel's params, tile and launcher; the
// kernel is backward_kernel.cuh. It takes the place of the portable dK/dV kernel inside the backward's passes
// (host/backward.cpp): the pre-pass (lse, D), the fp32 dq accumulator and its convert stay as they are.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <cstdint>

#include "cuda/common/backward_params.h"
#include "cuda/common/tile_scheduler.h"
#include "cuda/hopper/registers.h"

struct CUstream_st;

namespace flashgate::cuda::hopper {

// What the dK/dV kernel receives: the backward's params and the tensor maps of q, k, v and dout ([B][T][heads][D]
// viewed innermost first: D, T, heads, B; boxes of 64 dims x the tile's rows, zero beyond the head dim).
struct DkdvParams {
  bwd::BackwardParams b;
  CUtensorMap q_map, k_map, v_map, do_map;
};

// A CTA's item is BN = 128 keys of one kv head (a persistent grid: each CTA walks several items). Two consumer
// warpgroups of 64 keys each keep their dK and dV in registers while the CTA walks the query tiles (BM rows: 128 at
// kD 64, 64 at kD 128) of every query head of the group that see its keys. Per step: S^T = K Q^T and dP^T = V dO^T
// from shared memory, P^T and dS^T in registers as the A operands of dV += P^T dO and dK += dS^T Q, dS^T through
// shared memory into dQ = dS K, staged in shared memory and added to the fp32 accumulator by a writer warp. Each
// consumer makes one 64 x 64 block of the step's dQ over all 128 keys: at kD 128 the head dim's 64-column half `me`
// of the 64 rows, at kD 64 the 64 rows `me`.
template <int kD>
struct DkdvTile {
  static constexpr int BN = 128, BM = kD == 64 ? 128 : 64, kStages = 2, kBlocks = kD / 64;
  // D64's consumers with the row sums need all 240 registers; that leaves the producer 24, where its loops spill
  // (per step). Every other variant's consumers fit 232 and the producer keeps 40 (one spill per item).
  static constexpr int kThreads = 384;
  template <bool kRowSums>
  static constexpr int kProducerRegs = kD == 64 && kRowSums ? 24 : 40;
  template <bool kRowSums>
  static constexpr int kConsumerRegs = kD == 64 && kRowSums ? 240 : 232;
  static constexpr bool kDqSplitsColumns = kD >= 128;  // else it splits the step's rows
  static constexpr int kKBlocks = kBlocks, kVBlocks = kBlocks;
  static constexpr uint32_t kKBytes = BN * kD * 2, kQBytes = BM * kD * 2, kDsBytes = BN * BM * 2;
  static constexpr uint32_t kVBytes = kKBytes, kDoBytes = kQBytes;
  // The row offset (log2 domain), D and the sink's share (with BackwardParams::sink_parts) of a step's rows.
  static constexpr int kTermRows = 3;
  static constexpr uint32_t kTermBytes = kTermRows * BM * 4;
  static constexpr uint32_t kSumBytes = 2 * 2 * 8 * BM * 4;  // E and mass partials per consumer warp, two buffers
  // The step's dQ tile staged for the writer warp (dq_staging.cuh's whole-tile form): BM x kD fp32.
  static constexpr uint32_t kDqSlotBytes = BM * kD * 4;
  // dK, then dV, leave through staging rows of kD * 2 bytes (a consumer's 64 keys, their 16-byte pieces swizzled
  // against bank conflicts) in the dQ slot, which is free once the writer has read the item's last dQ.
  static constexpr uint32_t kOutRowBytes = kD * 2;
  static constexpr size_t smem_bytes() {
    return 2 * kKBytes + kStages * 2 * kQBytes + 2 * kDsBytes + kStages * kTermBytes + kSumBytes + kDqSlotBytes +
           1024;
  }
  static_assert(2 * 64 * kOutRowBytes <= kDqSlotBytes, "both consumers' staging rows fit the dQ slot");
  static_assert(kD == 64 || kD == 128, "head dims of the Hopper backward");
  static_assert(register_split_fits(3, kProducerRegs<true>, kConsumerRegs<true>) &&
                    register_split_fits(3, kProducerRegs<false>, kConsumerRegs<false>),
                "register budget of the Hopper backward");
  static_assert(BM * kD == 64 * 128, "each consumer's dQ block is 64 x 64");
  static_assert(smem_bytes() <= 227 * 1024, "the Hopper backward's buffers exceed shared memory");
};

// The wide buckets (K or V above 128, backward_wide_kernel.cuh): K, V up to 256 or 512, and K up to 192 with V up
// to 128 (that common shape in the 256 bucket would do 1.6x its FLOPs). dK and dV of a key tile do not fit one
// consumer's registers, so the two consumers split the head dims instead of the keys. A CTA's item is BN keys of one
// kv head (64; 96 at 192 / 128, whose accumulators leave room for them: each step's Q, dO and dQ then serve half as
// many keys again, and those bytes through L2 bound the bucket at 64); per step of BM = 64 query rows each consumer
// makes S and dP for BN / 2 of the keys (queries as rows), both write P and dS into shared memory, and then each
// accumulates dV^T = dO^T P and dK^T = Q^T dS for its 64-dim blocks of the head dims (as rows, the keys as columns)
// and makes dQ = dS K for its 64-column blocks of the 64 query rows.
//
// 512 / 512 (K or V above 256) pairs two CTAs in a cluster on one item, each with half of the head dims: a CTA holds
// its halves of K, V, Q and dO, makes S and dP over its half (partial sums), hands its partials to the other CTA by
// stores into its shared memory and adds the other's, so that both have the whole S and dP and make the same P and
// dS; from there each works as the 256 / 256 kernel on its half (dV^T, dK^T, dQ's columns). The halves leave room for
// one Q / dO stage only: dO is released once dV^T is made and Q once dK^T is, so that each reloads under the step's
// later products.
template <int kK, int kV>
struct DkdvWideTile {
  static constexpr int kPair = kK > 256 || kV > 256 ? 2 : 1;  // CTAs on one item (a cluster), each a head-dim half
  static constexpr int kCtaK = kK / kPair, kCtaV = kV / kPair;  // the head dims a CTA holds
  // One Q / dO stage where shared memory has no room for a second beside the dQ slot (256 / 256) or the exchange
  // (pairs): dO is released once dV^T is made and Q once dK^T is, so that each reloads under the step's later products.
  static constexpr int BN = kK == 192 ? 96 : 64, BM = 64, kStages = kPair == 2 || kCtaK == 256 ? 1 : 2,
                       kKBlocks = kCtaK / 64, kVBlocks = kCtaV / 64;
  static constexpr int kThreads = 384, kProducerRegs = 24, kConsumerRegs = 240;
  // Whether the bucket serves the row sums (a gate or a sink): 192 / 128's row-sum variant has ptxas serialize its
  // wgmmas (C7514), so those cases take the 256 bucket.
  static constexpr bool kServesRowSums = kK == kV;
  // P and dS are [64-key block][BM rows][64] tiles (the last block part filled at BN 96).
  static constexpr uint32_t kKBytes = BN * kCtaK * 2, kVBytes = BN * kCtaV * 2;
  static constexpr uint32_t kPBytes = BM * ((BN + 63) / 64 * 64) * 2;
  static constexpr uint32_t kQBytes = BM * kCtaK * 2, kDoBytes = BM * kCtaV * 2;
  static constexpr uint32_t kTermBytes = 2 * BM * 4;
  static constexpr uint32_t kSumBytes = 2 * 2 * 2 * BM * 4;  // E and mass partials of both consumers, two buffers
  static constexpr uint32_t kColsumBytes = 2 * 4 * 32 * 4;   // the gate's column-sum partials per consumer warp
  static constexpr uint32_t kKeyTermBytes = BN * 4;          // the gate's key terms of the current query head
  // The step's dQ tile staged for a writer warp (dq_staging.cuh: 64 rows x kCtaK fp32); a pair's consumers add
  // theirs themselves (no shared memory left).
  static constexpr bool kStagedDq = kPair == 1;
  static constexpr uint32_t kDqSlotBytes = kStagedDq ? BM * kCtaK * 4 : 0;
  // A pair's partial S and dP from the other CTA: two slots (by step parity) of [consumer][S | dP][BM x BN / 2] fp32.
  static constexpr uint32_t kExchangeBytes = kPair == 2 ? 2 * 2 * 2 * (BM * BN / 2) * 4 : 0;
  static constexpr size_t bytes_with(int pds_buffers) {
    return kKBytes + kVBytes + kStages * (kQBytes + kDoBytes) + pds_buffers * 2 * kPBytes + kStages * kTermBytes +
           kSumBytes + kColsumBytes + kKeyTermBytes + kExchangeBytes + kDqSlotBytes + 1024;
  }
  // P and dS in two buffers where shared memory allows (192 / 128): a step then writes the buffer that the step two
  // back read, which the last step's barrier already waited for, and needs no barrier of its own for it.
  static constexpr int kPdsBuffers = bytes_with(2) <= 227 * 1024 ? 2 : 1;
  static constexpr size_t smem_bytes() { return bytes_with(kPdsBuffers); }
  static_assert((kK == kV && (kK == 256 || kK == 512)) || (kK == 192 && kV == 128),
                "head dims of the wide Hopper backward");
  static_assert(register_split_fits(3, kProducerRegs, kConsumerRegs), "register budget of the wide Hopper backward");
  static_assert(smem_bytes() <= 227 * 1024, "the wide Hopper backward's buffers exceed shared memory");
  // dK and dV leave through the Q / dO stages as row-major [BN][kCtaK] and [BN][kCtaV] tiles.
  static_assert(BN * (kCtaK + kCtaV) * 2 <= kStages * (kQBytes + kDoBytes), "dK and dV's staging fits the stages");
};

// Launches the dK/dV kernel of bucket kD (K, V <= kD) over the key tiles `keys` (tile_rows BN) on a persistent grid
// of at most `sms` CTAs, with the row sums where p.b.needs_row_sums(). Instantiated per (T, kD) in
// backward_instances/.
template <class T, int kD>
void launch_dkdv(const DkdvParams& p, const TileSchedule& keys, int sms, CUstream_st* stream);

// The wide bucket (kK, kV)'s kernel, with the row sums where p.b.needs_row_sums(), over key tiles of DkdvWideTile's
// BN rows. Instantiated per (T, kK, kV) in backward_instances/.
template <class T, int kK, int kV>
void launch_dkdv_wide(const DkdvParams& p, const TileSchedule& keys, CUstream_st* stream);

}  // namespace flashgate::cuda::hopper
