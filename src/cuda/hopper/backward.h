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
  static constexpr int kItemKeys = BN;      // an item's keys: one CTA's (deterministic mode counts turns by them)
  static constexpr int kDqSlotChunks = 0;   // the staged dQ holds every column of its rows (one run)
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
// consumer's registers. A CTA's item is BN keys of one kv head (64; 96 at 192 / 128), walked in steps of BM = 64
// query rows.
//
// 256 / 256 and 512 / 512 (kSplit) split the step's products by kind, with the keys as rows
// (backward_wide_split.cuh): consumer 0 makes S^T and P^T, hands P^T (fp32) to consumer 1 through shared memory and
// accumulates dV += P^T dO (m64n256, P^T in registers); consumer 1 makes dP^T, dS^T (and the row sums), accumulates
// dK += dS^T Q (m64n256, dS^T in registers) and writes dS^T for dQ; each then makes dQ = dS K for half of the
// columns. Every operand is read from shared memory once a step, and each consumer's scalar work runs under the
// other's products.
//
// 512 / 512 pairs two CTAs in a cluster on one item, each with half of the head dims: a CTA holds its halves of K,
// V, Q and dO; each consumer makes its product (S^T or dP^T) over its CTA's half, hands the partial to the same
// consumer of the other CTA by stores into its shared memory and adds the other's, so that both CTAs make the same
// P^T and dS^T; from there each works as the 256 / 256 kernel on its half.
//
// 256 / 256 without the row sums pairs two CTAs on adjacent key tiles instead (kKeyPair): the item is 128 keys, each
// CTA has 64 of them with all head dims and walks the query rows that see either tile (its P is 0 where only the
// other's keys are seen). Each step a CTA copies its dS^T tile into the other's shared memory and makes dQ = dS K over
// both tiles' keys for its half of the head dims (the other tile's K half loaded once an item), so that each dQ
// element is added to L2 once per 128 keys rather than per 64: those adds bound the one-CTA design. The row sums stay
// on one CTA a tile (both CTAs would add to the same rows' sums, out of order in deterministic mode).
//
// 192 / 128 (backward_wide_blocks.cuh) has each consumer make S and dP over half of the keys (queries as rows) and
// write P and dS into shared memory, where both read them for dV^T = dO^T P and dK^T = Q^T dS (head dims as rows) and
// dQ = dS K over their blocks of the head dims. It serves no row sums: its row-sum variant had ptxas serialise its
// wgmmas (C7514), so those cases take the 256 bucket.
template <int kK, int kV, bool kRowSums = false>
struct DkdvWideTile {
  static constexpr int kPair = kK > 256 || kV > 256 ? 2 : 1;  // CTAs on one item (a cluster), each a head-dim half
  static constexpr int kKeyPair = kK == 256 && kV == 256 && !kRowSums ? 2 : 1;  // CTAs on one item, each a key tile
  static constexpr int kCluster = kPair * kKeyPair;
  static constexpr int kCtaK = kK / kPair, kCtaV = kV / kPair;  // the head dims a CTA holds
  static constexpr bool kSplit = kK == kV;
  // The split consumers load dO and Q on barriers of their own, each released once its last product is made: one dO
  // stage (no room for a second beside the dQ slot at 256 / 256 or the exchange in a pair), and Q in a second stage
  // in a pair, where Q is loaded a step ahead (it is released last, after dK).
  static constexpr int BN = kK == 192 ? 96 : 64, BM = 64, kStages = kSplit ? kPair : 2, kDoStages = kSplit ? 1 : 2,
                       kKBlocks = kCtaK / 64, kVBlocks = kCtaV / 64;
  static constexpr int kItemKeys = BN * kKeyPair;  // an item's keys (its walk, deterministic mode's turns)
  static constexpr int kThreads = 384, kProducerRegs = 24, kConsumerRegs = 240;
  static constexpr bool kServesRowSums = kSplit;
  static constexpr uint32_t kKBytes = BN * kCtaK * 2, kVBytes = BN * kCtaV * 2;
  // kKeyPair: the other tile's keys for this CTA's half of K's columns (its dQ columns).
  static constexpr uint32_t kKOtherBytes = kKeyPair == 2 ? BN * kCtaK : 0;
  static constexpr uint32_t kQBytes = BM * kCtaK * 2, kDoBytes = BM * kCtaV * 2;
  static constexpr uint32_t kTermBytes = 2 * BM * 4;
  // kSplit: P^T in fp32 in the accumulators' order ([8 float4][128 threads]), dS^T as a swizzled [BN keys][BM] tile,
  // and the row sums' partials of consumer 1's warps ([2 buffers][E | mass][4 warps][BM]). Else P and dS as
  // [64-key block][BM rows][64] tiles (the last block part filled at BN 96). kKeyPair: the other CTA's dS^T tile right
  // after this one's (dQ's k-steps run on through both).
  static constexpr uint32_t kPtBytes = kSplit ? BN * BM * 4 : 0, kDsBytes = kSplit ? BN * BM * 2 * kKeyPair : 0;
  static constexpr uint32_t kSumBytes = kSplit ? 2 * 2 * 4 * BM * 4 : 0;
  // Deterministic mode's ascending order walks the query heads innermost; with the row sums (kSplit only) the gate's
  // column sums of each head then gather in shared memory, [kAscendingGroup heads][BN keys]: the row-sum cases take
  // that order where a kv head has at most kAscendingGroup query heads.
  static constexpr int kAscendingGroup = 8;
  static constexpr uint32_t kColsumBytes = kSplit ? kAscendingGroup * BN * 4 : 0;
  static constexpr uint32_t kPBytes = kSplit ? 0 : BM * ((BN + 63) / 64 * 64) * 2;
  // The step's dQ tile staged for a writer warp (dq_staging.cuh: 64 rows x kCtaK fp32; kKeyPair: x this CTA's half,
  // kDqSlotChunks 8-column chunks a 16-row group); a pair's consumers add theirs themselves (no shared memory left).
  static constexpr bool kStagedDq = kPair == 1;
  static constexpr int kDqColumns = kCtaK / kKeyPair;  // the dQ columns a CTA makes
  static constexpr int kDqSlotChunks = kKeyPair == 2 ? kDqColumns / 8 : 0;
  static constexpr uint32_t kDqSlotBytes = kStagedDq ? BM * kDqColumns * 4 : 0;
  // A pair's partial S^T and dP^T from the other CTA: one slot of [consumer][BN x BM] fp32.
  static constexpr uint32_t kExchangeBytes = kPair == 2 ? 2 * BN * BM * 4 : 0;
  static constexpr size_t smem_bytes() {
    return kKBytes + kVBytes + kKOtherBytes + kStages * kQBytes + kDoStages * kDoBytes + kDsBytes + kPtBytes +
           2 * kPBytes + kStages * kTermBytes + kSumBytes + kColsumBytes + kExchangeBytes + kDqSlotBytes + 1024;
  }
  static_assert((kSplit && (kK == 256 || kK == 512)) || (kK == 192 && kV == 128),
                "head dims of the wide Hopper backward");
  static_assert(!kSplit || BN == 64, "the split consumers' S^T and dP^T are m64 over the tile's keys");
  static_assert(kKeyPair == 1 || (kSplit && kPair == 1 && kDqColumns == 128),
                "a key pair's consumers make dQ in 64-column halves of the CTA's 128");
  static_assert(register_split_fits(3, kProducerRegs, kConsumerRegs), "register budget of the wide Hopper backward");
  static_assert(smem_bytes() <= 227 * 1024, "the wide Hopper backward's buffers exceed shared memory");
  // dK and dV leave through the Q / dO stages as row-major [BN][kCtaK] and [BN][kCtaV] tiles.
  static_assert(BN * (kCtaK + kCtaV) * 2 <= kStages * kQBytes + kDoStages * kDoBytes,
                "dK and dV's staging fits the stages");
};

// Launches the dK/dV kernel of bucket kD (K, V <= kD) over the key tiles `keys` (tile_rows BN) on a persistent grid
// of at most `sms` CTAs, with the row sums where p.b.needs_row_sums(). Instantiated per (T, kD) in
// backward_instances/.
template <class T, int kD>
void launch_dkdv(const DkdvParams& p, const TileSchedule& keys, int sms, CUstream_st* stream);

// The wide bucket (kK, kV)'s kernel, with the row sums where p.b.needs_row_sums(), over key tiles of kItemKeys rows
// (DkdvWideTile<kK, kV, p.b.needs_row_sums()>). Instantiated per (T, kK, kV) in backward_instances/.
template <class T, int kK, int kV>
void launch_dkdv_wide(const DkdvParams& p, const TileSchedule& keys, CUstream_st* stream);

}  // namespace flashgate::cuda::hopper
