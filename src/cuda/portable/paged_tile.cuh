// Compile-time shape of the serving kernel (paged_kernel.cuh): per cache kind and padded head dims, how the
// 4 warps split keys and value dims, the ring's stage layout and its bank-conflict-free swizzles, and the
// register and shared-memory budgets the host planner reads through PagedMma::shape().
#pragma once

#include "cuda/common/host_device.h"
#include "cuda/portable/paged_fragments.cuh"
#include "cuda/common/serving_params.h"

namespace flashgate::cuda {

// Compile-time shape of one instantiation: cache kind, padded head dims KP (keys) and VP (values), and query
// rows per CTA (16, or 8 with keys as the mma's M).
template <CacheKind C, int KP_, int VP_, int ROWS = 16>
struct PagedTile {
  using Traits = CacheTraits<C>;
  using Frag = Fragments<C>;
  static constexpr CacheKind kCache = C;
  static constexpr int kThreads = 128, kWarps = 4, kRows = ROWS;
  // Keys as M (8 rows): S^T = K Q^T and O^T = V^T P^T, the rows in the mma's n8, so a block of at most 8 rows
  // (decode at GQA <= 8) pays half the MMAs and softmax values of the 16-row layout, and a lane keeps half the
  // accumulators and uses half of each query fragment (docs/perf-notes.md). The 16-row layout:
  // S = Q K^T, O = P V.
  static constexpr bool kKeysAsM = ROWS == 8;
  static constexpr int KP = KP_, VP = VP_;
  static constexpr int kBytes = Traits::kBytes;
  static constexpr int E = Frag::kElemsPer16B;
  static constexpr int WV = VP > 128 ? VP / 128 : 1;  // warps across value dims
  static constexpr int VW = VP / WV;                   // value dims per warp
  static constexpr int WK = kWarps / WV;               // warps across keys
  static constexpr int kKeysPerWarp = 16;
  static constexpr int KS = kKeysPerWarp * WK;         // keys per stage
  static constexpr int kKeyRowBytes = KP * kBytes, kValueRowBytes = VP * kBytes;
  static constexpr int kKSteps = KP / 16;
  static constexpr int kKeyRounds = KP / Frag::kDimsPerKeyRound;
  // A value round: the 8 lanes g of a row load 16 bytes each (8 E dims), or where a warp's value row is 64 bytes
  // (fp8 D64) 8 bytes each; lane g then holds dims g * kRoundElems + t of the round, t < kRoundElems.
  static constexpr int kRoundElems = VW < 8 * E ? E / 2 : E;
  static constexpr int kValueRounds = VW / (8 * kRoundElems);
  static constexpr int kValueWords = kRoundElems * kBytes / 4;  // registers of a lane's load of one value row
  static constexpr int kValueTiles = VW / 8;
  // Accumulator tiles per warp: 16 rows x 8 value dims each, or with keys as M 16 value dims x 8 rows.
  static constexpr int kAccTiles = kKeysAsM ? kValueTiles / 2 : kValueTiles;
  // fp8 D128 runs 4 CTAs per SM (16 warps): its loop is latency-bound at 3 (docs/perf-notes.md),
  // so it reads the query fragments from shared memory every stage (8 loads) to fit 128 registers.
  static constexpr bool kFourCtas = Traits::kFp8 && KP == 128 && VP == 128;
  static constexpr bool kQInRegisters = KP <= 128 && !kFourCtas;
  static constexpr bool kScaleSlots = Traits::kTokenScales;  // per-token scales staged next to the rows
  static constexpr bool kScaleQ = Traits::kFp8;        // f16 Q K^T with a cache of any range: scale Q rows
  static constexpr int kStageBytes = KS * (kKeyRowBytes + kValueRowBytes) + (kScaleSlots ? 2 * KS * 4 : 0);
  static constexpr int kQBytes = kKSteps * 32 * 16;    // query fragments, [k-step][lane][4 registers]
  static constexpr int kRowInfoBytes = 16 * 32;      // SharedRows: 16 rows whatever the tile's count
  static constexpr int kMergeFactsBytes = 2 * WK * kRows * 4 + 2 * kRows * 4;  // row maxima, sums, scales, lse
  // The ring starts on 128 bytes: a stage's rows then fill whole 128-byte lines of shared memory (an 8-row tile's
  // merge facts left it 64 bytes off, and its fp8 rows ran 12% slower at 3.6 TB/s).
  static constexpr int kFixedBytes = (kRowInfoBytes + kMergeFactsBytes + kQBytes + 127) / 128 * 128;
  // The final cross-warp merge: each warp's partial o ([16][VP] fp32, one part) goes into a ring slot that
  // its kv head has consumed last (kMergeSlots slots), so that the CTA's next kv head can already have its
  // first stages in flight in the others. Where a part does not fit a stage (fp8 D512, K576), the parts
  // take the ring from its start and the next head's loads wait for the merge (kReduceBytes of ring).
  static constexpr int kPartBytes = kRows * VP * 4;
  static constexpr int kPartsPerSlot = kStageBytes / kPartBytes;
  static constexpr bool kMergeInSlots = kPartsPerSlot >= 1;
  static constexpr int kMergeSlots = kMergeInSlots ? (WK + kPartsPerSlot - 1) / kPartsPerSlot : 0;
  static constexpr int kReduceBytes = kMergeInSlots ? 0 : WK * kPartBytes;
  // Several kv heads per CTA (ServingParams::heads_per_cta): 16-bit caches only; the fp8 kernels sit at their
  // register bounds (kMinBlocksPerSM) and spilled with the head loop's state (per-tensor fp8 D128 too, without
  // the per-token code: 128 B; the 8-row tile 36 / 104 B, per token 12-14% slower).
  static constexpr bool kHeadsInTurn = !Traits::kFp8;
  // Query fragments by cp.async (16-bit caches with K <= 128, the query held in registers): a pure permuted
  // copy, issued ahead with the stages, so a head's start does not wait on a query round trip queued behind
  // its own stages. Elsewhere (fp8 scales each row; wider heads read the fragments every stage) the CTA
  // stages them through registers at the head's start.
  static constexpr bool kQByCopy = kHeadsInTurn && kQInRegisters;
  // Where warps split the keys alone (WV == 1), warp w loads and reads the same rows of every stage (keys
  // [16w, 16w + 16) and their scales): a stage changes hands within the warp, so the loop's barriers are warp
  // barriers and the warps drift apart within the ring instead of meeting twice a stage. The query fragments
  // of a head (copied by all threads, read by all warps) still take CTA barriers at its first stage.
  static constexpr bool kWarpOwnsRows = KS / kWarps == kKeysPerWarp;
  // The stage loader: warp w copies stage rows [w * kLoadRows, (w + 1) * kLoadRows) and their per-token scales.
  static constexpr int kLoadRows = KS / kWarps;
  // Swizzles that keep the 16-byte fragment loads free of bank conflicts (see key_chunk / value_chunk).
  static constexpr bool kSwizzleKeys = kKeyRowBytes % 128 == 0;
  // Register budget: 4 CTAs per SM (128 registers) for fp8 D128 (2 stages on the H200, kShallowRing; on sm_90a
  // its 16-row tile spills 4 B per tensor and 12 B per token, a reload or a few per stage: the per-token
  // scale copies cost the 8 B more and still made its verify rows 1-4% faster); 3 (<= 170 registers) where an
  // H200's shared memory holds 3 (fp8 up to D256, D64); elsewhere it holds 2, and up to 255 registers avoid
  // spills. The planner picks the stages that keep this count.
  static constexpr int kMinBlocksPerSM = kFourCtas ? 4 : (Traits::kFp8 && VP <= 256) || VP <= 64 ? 3 : 2;
  // The launch bound: sm_8x keeps 3 for fp8 D128 (its emulated fp8 conversions spill 20 B at 128 registers,
  // and an A100's 164 KB of shared memory holds 3 such CTAs at most).
  static constexpr int kLaunchMinBlocks = kFourCtas && kSm8xDevicePass ? 3 : kMinBlocksPerSM;
  // fp8 caches come only through paged_attention (decode's K/V have q's dtype), so its kernels need no test for the
  // decode gate; dropping it shortened the per-token D128 loop on sm_90a by ~160 instructions, but on sm_8x the
  // same code spilled 16 B at its 170-register bound, so there the test stays.
  static constexpr bool kSkipGate = Traits::kFp8 && !kSm8xDevicePass;
  // fp8 D128 streams faster with 2 stages than 3 at its 4 CTAs per SM (H200: per token 2-5%, per
  // tensor 0-2%), so the planner takes the shallowest depth that keeps them (where 2 stages cannot, as on an
  // A100's 3 CTAs, its choice is unchanged).
  static constexpr bool kShallowRing = kFourCtas;
  // CTAs per SM that a split launch fills (0: every resident one), where fewer saturate DRAM: fewer slices then cost
  // less (fewer CTA starts, a smaller merge). Measured on the H200 at K = V = 128 only (the planner applies it
  // there, not to padded requests): 16-bit 8-row 1 of 2 (B1/131072 -2.6%, B8/32768 -0.5%), per-tensor
  // fp8 3 of 4 (B1/131072 -4.2%, verify 3x4 32K -2.9%, B8/32768 -1.6%). Elsewhere fewer lost: 16-bit
  // D64 and D256 (B8/32768 +29% and +9%), fp8 D64 in this tile (+6%), per token (verify 128K +6%), 16-bit 16-row
  // (verify 32K +1.5%).
  static constexpr int kSplitCtasPerSM =
      KP != 128 || VP != 128 ? 0 : Traits::kFp8 ? (Traits::kTokenScales ? 0 : 3) : (kKeysAsM ? 1 : 0);

  static_assert(KP % Frag::kDimsPerKeyRound == 0, "key dims must fill whole 16-byte lane loads");
  static_assert(VW % (8 * kRoundElems) == 0 && (kValueRowBytes % 128 == 0 || kValueRowBytes == 64),
                "value dims must fill whole rounds");
  static_assert(VP % 32 == 0, "reduce_col permutes dims within aligned groups of 32");
  static_assert(WV * WK == kWarps, "warps must tile keys x value dims");
  static_assert(kMergeSlots <= 2, "the loads held back for the merge fit one commit group per skipped stage");
  static_assert(ROWS == 16 || (ROWS == 8 && WV == 1 && E % 2 == 0), "keys as M: one warp per key group, tile pairs");
  static_assert(kStageBytes % 128 == 0, "every stage starts on 128 bytes, as the ring does");

  // Byte offset of 16-byte chunk `chunk` of key row `row` in a stage (pairs of rows alternate 64-byte halves,
  // so the 8 lanes of one load phase, 2 rows x 64 bytes, hit all 32 banks).
  __host__ __device__ static constexpr int key_chunk(int row, int chunk) {
    return row * kKeyRowBytes + ((kSwizzleKeys ? (chunk ^ ((row & 1) << 2)) : chunk) << 4);
  }
  // Value rows 2c, 2c+2, 2c+4, 2c+6 (one load phase) shift their chunks by 0, 2, 4, 6. 64-byte rows (8-byte lane
  // loads, one phase per half warp: 4 rows x 32 bytes) swap rows 4i+2 and 4i+3 and shift the chunks of rows
  // 4..7 of every 8 by 2, so that the four rows of a phase take the four 32-byte quarters of the banks.
  __host__ __device__ static constexpr int value_chunk(int row, int chunk) {
    if (kValueRowBytes == 64) return (row ^ ((row >> 1) & 1)) * 64 + ((chunk ^ (((row >> 2) & 1) << 1)) << 4);
    return row * kValueRowBytes + ((chunk ^ (((row >> 1) & 3) << 1)) << 4);
  }
  // Byte offset of lane g's words of value row `row` in round `round` of warp column wv.
  __host__ __device__ static constexpr int value_words(int row, int wv, int round, int g) {
    if (kRoundElems < E) return value_chunk(row, g >> 1) + (g & 1) * 8;  // one round (VW = 64)
    return value_chunk(row, wv * VW * kBytes / 16 + round * 8 + g);
  }
  // Per-token scales follow a stage's rows as [KS K scales][KS V scales]. Lane r < kLoadRows of warp w copies the K
  // scale of the warp's row r, lane kLoadRows + r its V scale (the float slot below). Where a warp loads fewer rows
  // than half a warp (wide value tiles) the lanes past both operands' rows copy nothing: copying a neighbour's slot
  // again was a write-write race (racecheck). Two functions, so that the test folds away where every
  // lane copies (the D64 / D128 kernels' SASS is unchanged by it).
  __host__ __device__ static constexpr bool copies_scale(int lane) { return 2 * kLoadRows == 32 || lane < 2 * kLoadRows; }
  __host__ __device__ static constexpr int scale_slot(int warp, int lane) {
    return (lane >= kLoadRows ? KS : 0) + warp * kLoadRows + lane % kLoadRows;
  }
  // Row (0..15) of a lane's row slot rs (0 or 1): g and g + 8, or with keys as M 2c and 2c + 1.
  __host__ __device__ static constexpr int lane_row(int g, int c, int rs) { return kKeysAsM ? 2 * c + rs : g + 8 * rs; }
  // Value dim of accumulator column n (the lane's g in the fragments) of n-tile t in round `round`.
  __host__ __device__ static constexpr int value_dim(int round, int n, int t) {
    return round * 8 * kRoundElems + n * kRoundElems + t;
  }
  // Column of value dim d of row r in the cross-warp merge buffer ([WK][16][VP] floats). An accumulator store
  // covers 8 rows x 4 lane columns whose dims lie 8 or 16 apart, i.e. 2 banks unswizzled (16-way conflicts);
  // permuting dim bits 0-4 by the row (bits 0-2) and by dim bits 5-6 (bits 3-4) spreads it over all 32.
  __host__ __device__ static constexpr int reduce_col(int r, int d) { return d ^ ((r & 7) | (((d >> 5) & 3) << 3)); }

  static constexpr int smem_bytes(int stages) {
    const int pipe = stages * kStageBytes;
    return kFixedBytes + (pipe > kReduceBytes ? pipe : kReduceBytes);
  }
};

}  // namespace flashgate::cuda
