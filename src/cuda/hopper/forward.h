// The Hopper forward's interface (host-includable): its params, its tiles and its launcher; the kernel is
// forward_kernel.cuh (with its work order in forward_work.cuh and its consumers in forward_consumer.cuh).
#pragma once

#include <cuda.h>

#include <cstddef>
#include <cstdint>

#include "cuda/common/attention_params.h"
#include "cuda/common/tile_scheduler.h"
#include "cuda/hopper/registers.h"

struct CUstream_st;

namespace flashgate::cuda::hopper {

// What the forward kernel receives: the shared params and the tensor maps of q, k and v ([B][T][heads][D]
// viewed innermost first: D, T, heads, B; boxes of 64 dims x the tile's rows, zero beyond the head dim).
struct ForwardParams {
  AttentionParams a;
  CUtensorMap q_map, k_map, v_map;
  int section_heads = 1;  // dense: (sequence, query head) pairs per L2 section of the item order (whole kv groups)
};

// The tile of one head-dim bucket pair (kK for q and k, kV for v and o; multiples of 64): kConsumers warpgroups
// of 64 query rows against key blocks of BN, K, V and the gate's key terms each in a ring of kStages. BN keeps
// the scores, the output and P inside a consumer's registers and the stages inside 227 KB of shared memory; D64
// runs three consumers, whose GEMMs are too short for two to hide each other's softmax.
// V above 256 (kSplitV) does not fit one warpgroup's registers: both consumers share one block of 64 rows and
// split the output's columns; consumer 0 makes the scores and P, which reaches consumer 1 through shared memory
// (two P buffers, with each block's rescale factors). Q, K and V of 512 columns leave room for one stage each.
template <int kK, int kV>
struct ForwardTile {
  static constexpr int kKDim = kK, kVDim = kV;
  static constexpr bool kSplitV = kV > 256;
  static constexpr int kConsumers = kK == 64 && kV == 64 ? 3 : 2;
  static constexpr int kSplitKeys = 64;  // split V's key block: 64 with one K / V stage, or 32 with two
  static constexpr int BM = kSplitV ? 64 : 64 * kConsumers;
  static constexpr int BN = kSplitV ? kSplitKeys : kV > 128 ? 80 : 128;
  static constexpr int kStages = kSplitV && kSplitKeys == 64 ? 1 : 2;
  static constexpr int kOutCols = kSplitV ? kV / 2 : kV;  // output columns a consumer accumulates
  static constexpr int kKBlocks = kK / 64, kVBlocks = kV / 64;
  static constexpr int kThreads = 128 * (1 + kConsumers);
  // setmaxnreg moves registers from the producer to the consumers. V of 256 needs every consumer register it can get.
  static constexpr bool kWideOut = kOutCols > 128;
  static constexpr int kProducerRegs = kConsumers == 3 ? 32 : kWideOut ? 24 : 40;
  static constexpr int kConsumerRegs = kConsumers == 3 ? 160 : kWideOut ? 240 : 232;
  static_assert(register_split_fits(1 + kConsumers, kProducerRegs, kConsumerRegs),
                "register budget of the Hopper forward");
  static constexpr uint32_t kQBytes = BM * kK * 2, kKBytes = BN * kK * 2, kVBytes = BN * kV * 2;
  static constexpr uint32_t kGateBytes = BN * 4;
  // Split V: per P buffer the probabilities [BM rows][BN keys] (one 128-byte swizzled block) and the rows' rescale
  // factors [BM]; then the rows' output scales [BM] for the epilogue.
  static constexpr uint32_t kPBytes = kSplitV ? BM * 128 : 0, kPScaleBytes = kSplitV ? BM * 4 : 0;
  static constexpr uint32_t kHandoffBytes = 2 * (kPBytes + kPScaleBytes) + kPScaleBytes;
  static constexpr uint32_t kStagesEnd = kQBytes + kStages * (kKBytes + kVBytes + kGateBytes);
  static constexpr uint32_t kHandoffAt = (kStagesEnd + 1023) / 1024 * 1024;  // P's swizzle needs 1024-byte alignment
  // Where shared memory allows, a consumer's epilogue stages its 64 output rows (o and their residual codes, or
  // the codes only) and two producer warps store them to global memory as whole row chunks: stored from the
  // accumulators' fragments, the rows' partial sector writes held a consumer (and the other, waiting for its turn)
  // for a large part of a short item. o rows are padded by 16 bytes and code rows swizzled (8-byte chunk c of row r
  // at c ^ (r % 8)), which keeps the fragments' writes free of bank conflicts.
  static constexpr uint32_t kOutPitch = kV * 2 + 16;
  static constexpr uint32_t kOutStageAt = (kStagesEnd + 15) / 16 * 16;
  static constexpr uint32_t kStaticSmem = 256;  // the kernel's barriers, beside the dynamic buffer
  static constexpr bool stage_fits(uint32_t per_consumer) {
    return !kSplitV && kOutStageAt + kConsumers * per_consumer + 1024 + kStaticSmem <= 227 * 1024;
  }
  static constexpr bool kStageO = stage_fits(64 * (kOutPitch + kV));
  static constexpr bool kStageCodes = stage_fits(64 * kV);
  static constexpr uint32_t kCodesAt = kStageO ? 64 * kOutPitch : 0;  // in a consumer's staging rows
  static constexpr uint32_t kOutStageBytes = kStageCodes ? kCodesAt + 64 * kV : 0;
  // The byte of a consumer's staging rows that holds the code of row r, column c.
  FG_HOST_DEVICE static constexpr uint32_t codes_at(int r, int c) {
    return kCodesAt + r * kV + ((c / 8) ^ (r % 8)) * 8 + c % 8;
  }
  static constexpr size_t smem_bytes() {
    return (kSplitV ? kHandoffAt + kHandoffBytes : kStageCodes ? kOutStageAt + kConsumers * kOutStageBytes : kStagesEnd) +
           1024;
  }
  static_assert(kK % 64 == 0 && kV % 64 == 0 && kK <= 512 && kV <= 512, "head-dim buckets of the Hopper forward");
  static_assert(!kSplitV || (kConsumers == 2 && BN <= 64), "split V: two consumers, P in one swizzled block");
  static_assert(smem_bytes() + kStaticSmem <= 227 * 1024, "the Hopper forward's stages exceed shared memory");
};

// The head-dim bucket pairs that have kernels, and the pair a problem's (K, V) runs in (0, 0: none).
struct HeadDimBuckets {
  int k = 0, v = 0;
};
constexpr HeadDimBuckets forward_buckets(int64_t K, int64_t V) {
  const auto up = [](int64_t d) {
    return d <= 64 ? 64 : d <= 128 ? 128 : d <= 192 ? 192 : d <= 256 ? 256 : d <= 512 ? 512 : 0;
  };
  const int64_t k = up(K), v = up(V);
  if (k == 0 || v == 0) return {};
  if (k == 512 || v == 512) return {512, 512};
  if (v <= 128 && k <= 128) return k == v ? HeadDimBuckets{static_cast<int>(k), static_cast<int>(v)}
                                          : HeadDimBuckets{128, 128};
  if (v <= 128 && k == 192) return {192, 128};
  return {256, 256};
}

// Launches the forward of bucket pair (kK, kV) over `sched` (tile_rows BM) on a persistent grid of at most
// `sm_count` CTAs. Instantiated per (T, kK, kV) in forward_instances/.
template <class T, int kK, int kV>
void launch_forward(const ForwardParams& p, const TileSchedule& sched, int sm_count, CUstream_st* stream);

}  // namespace flashgate::cuda::hopper
