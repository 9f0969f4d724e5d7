// The serving kernel (sm80+, mma.sync): packed decode (SPEC §5) and paged attention (SPEC §6).
//
// Design note
// - Memory-bound: the goal is to read every K/V byte once at close to copy bandwidth. A CTA owns 16 query
//   rows (8 with the 8-row tile, below) that share one kv head (decode: the G heads of one token; verify: 16/G
//   tokens x G heads; G > 16: 16 heads of one token) and one slice of the keys (split-KV), so each K/V byte
//   feeds up to 16 rows.
//   16-bit caches: a CTA may take several kv heads in turn over the same keys (ServingParams::heads_per_cta),
//   streaming all their stages through one ring, so a short context pays one CTA start for several heads.
// - 4 warps. Head dims up to 128: each warp takes its own 16 keys of every 64-key stage (WK = 4) and keeps
//   o for all value dims (64 fp32 registers). Wider values split the dims over WV warps that redo Q K^T
//   (WV = V/128, WK = 4/WV). The warps' partial softmax states merge through shared memory at the end.
// - Query fragments: 16-bit caches with K <= 128 copy them with cp.async ahead of need (kQByCopy); fp8 scales
//   each query row into f16 range first, so it (and wider heads) stage them through registers.
// - K/V rows are copied with 16-byte cp.async (paged_copy.cuh) into a multi-stage ring (2-4 stages, chosen
//   on the host from the device's shared memory; stage layout and budgets: paged_tile.cuh), row by row
//   through the block table, so a page of any size and any strides works; rows outside the slice and the
//   padding dims past K or V are zero-filled by the same copies (NaN in unused slots or an earlier stage
//   cannot leak into the mma).
// - Fragments come from shared memory with plain 16-byte loads (8-byte for fp8 D64's 64-byte value rows;
//   paged_fragments.cuh, PagedTile::kRoundElems): fp16/bf16 and fp8
//   caches share the code, fp8 converts to f16 exactly in registers (one instruction per pair on sm_89+)
//   and both mmas run in f16: each query row is scaled by a power of two so its largest element lies in
//   [2^14, 2^15) (f16 range; the scores undo it), P lies in [0, 1]. Per-token K scales multiply score
//   columns in fp32; per-token V scales multiply probability columns after the row sum, and P * scale goes
//   through the mma as an f16 hi + lo pair (two mmas), so it is not rounded (SPEC §6). To keep that pair
//   in f16 range, each warp divides P * scale by a power of two at least the largest V scale it has seen
//   (raised, with an accumulator rescale, like the softmax max) and multiplies it back at the end.
//   Without per-token V scales P is rounded once, and one mma does. Caches with a per-token scale on K or V
//   take their own kernel family (CacheKind::e4m3_tokens), which reads both operands' scales per token;
//   per-tensor fp8 (CacheKind::e4m3) compiles without any of it: no scale copies, no second mma.
// - Row blocks of at most 8 rows (decode at GQA <= 8 under the caller's max_seqlen_q) take an 8-row tile on D128
//   and D64 (every cache kind; PagedTile::kKeysAsM): keys become the mma's M, S^T = K Q^T and O^T = V^T P^T
//   with the rows in n8, so a warp's 16 keys cost 8 + 8 mmas instead of 16 + 16 and a lane holds 4 scores and 32
//   accumulators instead of 8 and 64. The key and value fragments are the 16-row layout's (its B operands,
//   paired into A); P^T reaches the B operand by movmatrix (the transpose the 16-row layout avoids by keeping P
//   in C's layout).
// - Scores live in the exp2 domain (scale * log2 e folded once); the decode gate term arrives precomputed
//   per (query head, key) from a suffix-sum pre-kernel (decode_gate.cu).
// - One split: the CTA writes o. Several: normalised partial o (fp32) and its log2 sum go to the
//   workspace and paged_merge.cu combines them; an empty slice writes lse = -inf and weighs 0.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "cuda/common/online_softmax.h"
#include "cuda/portable/paged_copy.cuh"
#include "cuda/portable/paged_finish.cuh"
#include "cuda/portable/paged_fragments.cuh"
#include "cuda/common/serving_params.h"
#include "cuda/portable/paged_tile.cuh"
#include "cuda/common/serving_work.cuh"
#include "cuda/ptx/cp_async.h"
#include "cuda/ptx/grid_dependency.h"
#include "cuda/ptx/fast_math.h"
#include "cuda/ptx/mma.h"

namespace flashgate::cuda {

namespace paged_detail {

__device__ __forceinline__ float load_qo(const void* base, int64_t i, ElementType t) {
  return t == ElementType::bf16 ? __bfloat162float(static_cast<const __nv_bfloat16*>(base)[i])
                          : __half2float(static_cast<const __half*>(base)[i]);
}

// The power of two s that puts amax * 2^s in [2^14, 2^15) (clamped for zero, subnormal or non-finite amax).
__device__ __forceinline__ int f16_range_shift(float amax) {
  const int biased = static_cast<int>((__float_as_uint(amax) >> 23) & 0xff);
  const int s = 141 - biased;
  return s < -100 ? -100 : (s > 100 ? 100 : s);
}

// x0, x1 as a 16-bit pair `hi` and the pair `lo` of what hi's rounding left: P * scale through two mmas keeps
// ~22 bits (SPEC §6).
template <class Mma>
__device__ __forceinline__ void split_pair(float x0, float x1, uint32_t& hi, uint32_t& lo) {
  hi = ptx::pack2<Mma>(x0, x1);
  const float2 h = ptx::unpack2<Mma>(hi);
  lo = ptx::pack2<Mma>(x0 - h.x, x1 - h.y);
}

// Lane g's words (Tile::value_words) of value rows row, row + 1, row + 8 and row + 9 (row = the warp's first row
// + 2c) in round `round` of warp column wv: both layouts' value fragments (Frag::value_pair pairs them).
template <class Tile>
__device__ __forceinline__ void load_value_words(const unsigned char* vst, int row, int wv, int round, int g,
                                                 uint32_t (&v0)[Tile::kValueWords], uint32_t (&v1)[Tile::kValueWords],
                                                 uint32_t (&v8)[Tile::kValueWords], uint32_t (&v9)[Tile::kValueWords]) {
  lds_words(v0, vst + Tile::value_words(row, wv, round, g));
  lds_words(v1, vst + Tile::value_words(row + 1, wv, round, g));
  lds_words(v8, vst + Tile::value_words(row + 8, wv, round, g));
  lds_words(v9, vst + Tile::value_words(row + 9, wv, round, g));
}

}  // namespace paged_detail

template <class Tile>
__global__ void __launch_bounds__(Tile::kThreads, Tile::kLaunchMinBlocks)
    paged_mma_kernel(const ServingParams p, const int stages) {
  using Frag = typename Tile::Frag;
  using Mma = typename Tile::Traits::Mma;
  static_assert(sizeof(paged_detail::SharedRows) <= Tile::kRowInfoBytes, "row facts must fit their slot");
  constexpr int KS = Tile::KS;
  ptx::launch_dependents();  // the split merge may start its CTAs now (it waits for this grid's partials)

  extern __shared__ __align__(128) unsigned char smem[];
  auto* rows = reinterpret_cast<paged_detail::SharedRows*>(smem);
  float* merge_facts = reinterpret_cast<float*>(smem + Tile::kRowInfoBytes);
  auto* qfrag = reinterpret_cast<uint32_t*>(smem + Tile::kRowInfoBytes + Tile::kMergeFactsBytes);
  unsigned char* ring = smem + Tile::kFixedBytes;

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wk = warp / Tile::WV, wv = warp % Tile::WV;
  const int g = lane >> 2, c = lane & 3;
  const int split = blockIdx.z;
  // The CTA's kv heads, taken in turn over the same keys (p.heads_per_cta; ServingParams).
  const int heads_per_cta = Tile::kHeadsInTurn ? p.heads_per_cta : 1;
  // The grid is (row blocks, head groups, splits), but a CTA takes its (row block, head group) from its place in
  // the grid's linear (dispatch) order, head group fastest: the CTAs that read the other kv heads of the same
  // pages then run at the same time, also across waves (fp8 +0.5-1%, docs/perf-notes.md). 32-bit
  // index: serving.cpp refuses row blocks x kv heads >= 2^32.
  const uint32_t cta = blockIdx.y * gridDim.x + blockIdx.x;
  const uint32_t row_block = cta / gridDim.y;
  const int kv_head0 = static_cast<int>(cta % gridDim.y) * heads_per_cta;
  const int heads = Tile::kHeadsInTurn ? min(heads_per_cta, p.H - kv_head0) : 1;

  RowBlock rb;
  if (!resolve_row_block(p, row_block, rb)) return;  // the same for every thread of the CTA
  // An 8-row tile takes the block's first 8 rows (the host sends it blocks of at most 8: a caller's max_seqlen_q
  // of 8 / G tokens or less, so without validation rows past that bound may stay unwritten, as ops.h says).
  if constexpr (Tile::kRows < 16) rb.ntok = min(rb.ntok, static_cast<int64_t>(Tile::kRows / p.rows_per_token));

  // This split's keys: num_tiles stages per kv head; the ring streams all heads' tiles in one order
  // (head-major), so the next head's first stages load under this head's last ones.
  const KeyRange slice = split_slice(block_key_range(p, rb), split, p.num_splits, KS);
  const int num_tiles = slice.end > slice.begin ? (slice.end - slice.begin + KS - 1) / KS : 0;
  const int total_tiles = num_tiles * heads;
  // Ring slots the merge at the end of a head needs free: loads of the next head's tiles stop short of them
  // and catch up after the merge.
  const int merge_slots = Tile::kMergeInSlots ? Tile::kMergeSlots : stages;

  // Stage loader: warp w copies stage rows [w * kRowsPerWarp, (w + 1) * kRowsPerWarp); the rows' addresses
  // come from the block-table entry of the warp's first row (or, off the common path, lane i looks row i
  // up), and lane i fetches row i's per-token scales. Stages are loaded in tile order, so the loader keeps
  // its own key and ring slot; block-table entries come a group of 32 stages ahead (below).
  constexpr int kRowsPerWarp = Tile::kLoadRows;
  const int key_bytes = p.K * Tile::kBytes, value_bytes = p.V * Tile::kBytes;
  // The first kv head's rows and per-token scales: the head term of every key's offset is added per stage.
  const unsigned char* kbase0 = static_cast<const unsigned char*>(p.k) + kv_head0 * p.k_head_stride * Tile::kBytes;
  const unsigned char* vbase0 = static_cast<const unsigned char*>(p.v) + kv_head0 * p.v_head_stride * Tile::kBytes;
  // Per-token scales: lane r < kRowsPerWarp copies row r's K scale, lane kRowsPerWarp + r its V scale, so one
  // copy per lane serves both operands (load_stage, PagedTile::scale_slot). Strides are 0 unless per token; an
  // operand without a scale writes 1 (no base).
  const int scale_row = lane % kRowsPerWarp;
  const paged_detail::WarpRowCopy<Tile::kKeyRowBytes / 16, kRowsPerWarp> copy_keys(key_bytes, lane);
  const paged_detail::WarpRowCopy<Tile::kValueRowBytes / 16, kRowsPerWarp> copy_values(value_bytes, lane);
  const bool loader_lane = lane < kRowsPerWarp;
  static_assert(kRowsPerWarp < 32, "one bit per row of the warp");
  static_assert(!Tile::kScaleSlots || 2 * kRowsPerWarp <= 32, "a lane per row and operand for the scales");
  const bool whole_rows = copy_keys.whole_chunks && copy_values.whole_chunks;
  const int lane_key0 = slice.begin + warp * kRowsPerWarp + lane;  // this lane's row in a head's first stage
  int loaded = 0;                // stages issued (all heads, in order)
  int load_tile = 0, load_head = 0;  // the next stage to load: its tile within its head, the head
  int load_key = lane_key0;      // this lane's row in that stage
  int load_slot = 0;
  // Block-table entries of the warp's rows: lane a holds the entry of the page of the warp's first row in
  // tile 32 * group + a (one register covers 32 stages), and the next group's entries load while this
  // group's stages go out. Entries looked up a stage or two ahead and shifted through registers made each
  // stage wait for the previous stage's lookup, a loaded round trip behind the stream (docs/perf-notes.md).
  // Every head of the CTA reads the same keys, so the same entries.
  const int32_t* table_row = table_row_of(p, rb.seq);
  auto fetch_group = [&](int group) {
    const int tile = group * 32 + lane;
    const int key = slice.begin + tile * KS + warp * kRowsPerWarp;
    return table_row && tile < num_tiles && key < slice.end ? key_page(p, table_row, key).block : 0;
  };
  int entries = num_tiles > 0 ? fetch_group(0) : 0;
  int next_entries = num_tiles > 32 ? fetch_group(1) : 0;  // the next group's (past the last: group 0's)
  // The per-token family reads both operands' scales per token: a per-tensor scale through zero strides (the
  // same float for every token), none as 1 (serving.cpp sends every cache with a per-token scale here).
  constexpr bool k_per_token = Tile::Traits::kTokenScales, v_per_token = Tile::Traits::kTokenScales;
  const int64_t k_row_step = p.k_slot_stride * Tile::kBytes, v_row_step = p.v_slot_stride * Tile::kBytes;
  auto load_stage = [&]() {
    unsigned char* stage = ring + load_slot * Tile::kStageBytes;
    unsigned char* vstage = stage + KS * Tile::kKeyRowBytes;
    load_slot = load_slot + 1 == stages ? 0 : load_slot + 1;
    const int j = load_key;
    const int tile = Tile::kHeadsInTurn ? load_tile : loaded;  // this stage's tile within its head
    if ((tile & 31) == 0 && loaded > 0 && num_tiles > 32) {  // a new group: its entries loaded 32 stages ago
      entries = next_entries;
      const int group = tile >> 5;
      next_entries = fetch_group(32 * (group + 1) < num_tiles ? group + 1 : 0);
    }
    const int block0 = __shfl_sync(0xffffffffu, entries, tile & 31);
    const unsigned char* kbase = kbase0 + load_head * p.k_head_stride * Tile::kBytes;
    const unsigned char* vbase = vbase0 + load_head * p.v_head_stride * Tile::kBytes;
    ++loaded;
    if (Tile::kHeadsInTurn && ++load_tile == num_tiles) load_tile = 0, ++load_head, load_key = lane_key0;
    else load_key += KS;
    const int row0 = warp * kRowsPerWarp;
    auto key_chunk = [](int row, int chunk) { return Tile::key_chunk(row, chunk); };
    auto value_chunk = [](int row, int chunk) { return Tile::value_chunk(row, chunk); };
    // Usually the warp's rows are consecutive slots of one page (or tokens of a decode sequence), all live:
    // lane 0's block-table entry and the key numbers tell, with no per-row lookup, and each lane's source
    // advances by a constant.
    const int first = j - lane;  // the warp's first row (the same in every lane)
    const int slot0 = p.block_table ? first - page_index_of(p, first) * p.block_size : 0;  // decode: unused
    const bool run = whole_rows && first + kRowsPerWarp <= slice.end &&
                     (!p.block_table || (slot0 + kRowsPerWarp <= p.block_size && block0 >= 0 && block0 < p.num_blocks));
    KeyRow kr;
    bool ok = loader_lane;
    if (run) {
      const int64_t t = p.block_table ? slot0 : rb.seq.key_start + first;  // slot (paged) or row (decode)
      kr.block = block0, kr.slot = slot0 + scale_row, ok = true;           // for the per-token scales
      copy_keys.copy_run(stage, kbase + (block0 * p.k_block_stride + t * p.k_slot_stride) * Tile::kBytes,
                         k_row_step, row0, key_chunk);
      copy_values.copy_run(vstage, vbase + (block0 * p.v_block_stride + t * p.v_slot_stride) * Tile::kBytes,
                           v_row_step, row0, value_chunk);
    } else {
      // Rows across a page edge (an unaligned window's every stage), past the slice or behind a bad entry:
      // a lane whose row lies in a later page than the warp's first row looks its entry up.
      ok = ok && j < slice.end;
      KeyPage page;  // decode: unused
      if (ok && p.block_table) {
        const int page_index = page_index_of(p, j);
        page = page_index == page_index_of(p, first) ? KeyPage{block0, j - page_index * p.block_size}
                                                     : key_page(p, table_row, j);
      }
      ok = ok && locate_key(p, rb.seq, /*kv_head=*/0, j, page, kr);
      const uint32_t live = __ballot_sync(0xffffffffu, ok);
      copy_keys(stage, ok ? kbase + kr.k_off * Tile::kBytes : kbase, live, row0, key_chunk);
      copy_values(vstage, ok ? vbase + kr.v_off * Tile::kBytes : vbase, live, row0, value_chunk);
    }
    if constexpr (Tile::kScaleSlots) {
      // Per-token scales next to the rows (setup above); a key that is not loaded gets scale 0 (its column is
      // masked). Off the run path the V lanes take their row's page and liveness from its K lane.
      if (!run) {
        kr.block = __shfl_sync(0xffffffffu, kr.block, scale_row);
        kr.slot = __shfl_sync(0xffffffffu, kr.slot, scale_row);
        ok = __shfl_sync(0xffffffffu, ok, scale_row);
      }
      // Offsets in 32 bits: serving.cpp refuses scale views spanning 2^31 elements. The lane's operand facts
      // are read from the parameters here, not kept in registers across the loop. A lane copies one slot or
      // none (PagedTile::copies_scale, scale_slot).
      if (!Tile::copies_scale(lane)) return;
      const bool scale_of_values = lane >= kRowsPerWarp;
      float* dst = reinterpret_cast<float*>(vstage + KS * Tile::kValueRowBytes) + Tile::scale_slot(warp, lane);
      const float* base = scale_of_values ? p.v_scale : p.k_scale;
      const int64_t(&strides)[3] = scale_of_values ? p.v_scale_strides : p.k_scale_strides;
      if (!base) {
        *dst = ok ? 1.f : 0.f;
      } else {
        const int offset = (kv_head0 + load_head) * static_cast<int>(strides[1]) +
                           static_cast<int>(kr.block) * static_cast<int>(strides[0]) +
                           static_cast<int>(kr.slot) * static_cast<int>(strides[2]);
        ptx::cp_async_4_line(dst, base + (ok ? offset : 0), ok ? 4 : 0);
      }
    }
  };

  // The first stages go out before anything else: staging the rows and query fragments below then costs
  // no time of its own (it overlaps their latency). A stage of the next head may be loaded once it leaves
  // the merge's slots free (head_load_end); one held back is loaded right after the merge, one commit
  // group each, so the loop's wait (S - 1 newer groups) still covers it.
  auto load_end = [&](int head) { return min(total_tiles, (head + 1) * num_tiles + stages - merge_slots); };
  // Thread tid copies register tid % 4 of lane tid / 4 of every k-step: elements 0 and 1 of key_dim are
  // adjacent, so a register is one 4-byte piece of a q row (zero-filled past K and in padding rows). Needs
  // 4-byte aligned pairs; otherwise every head stages through registers.
  const bool q_by_copy =
      Tile::kQByCopy && ((reinterpret_cast<uintptr_t>(p.q) & 3) | (p.q_row_stride & 1) | (p.q_head_stride & 1)) == 0;
  auto copy_queries = [&](int kv_head) {
    const int ln = tid >> 2, reg = tid & 3;
    const int r = (ln >> 2) + ((reg & 1) ? 8 : 0), half = reg >> 1;
    const RowInfo ri = row_info(p, rb, kv_head, r);
    const auto* row =
        static_cast<const unsigned char*>(p.q) + (ri.q_row * p.q_row_stride + ri.head * p.q_head_stride) * 2;
#pragma unroll
    for (int ks = 0; ks < Tile::kKSteps; ++ks) {
      const int d0 = Frag::key_dim(ks, ln & 3, half, 0);
      const int bytes = ri.valid ? min(max(2 * (p.K - d0), 0), 4) : 0;
      ptx::cp_async_4(qfrag + ks * 128 + tid, bytes ? row + 2 * d0 : p.q, static_cast<uint32_t>(bytes));
    }
  };
  if (q_by_copy) copy_queries(kv_head0);  // joins the first stage's commit group
  for (int t = 0; t < stages - 1; ++t) {
    if (loaded < load_end(0)) load_stage();
    ptx::cp_async_commit();
  }

  int read_slot = 0;
  for (int hi = 0; hi < heads; ++hi) {
    const int kv_head = kv_head0 + hi;
    const int first_tile = hi * num_tiles;  // this head's first stage in the ring's order
    if constexpr (Tile::kHeadsInTurn) {
      while (loaded < min(load_end(hi), first_tile + stages - 1)) {
        load_stage();
        ptx::cp_async_commit();
      }
    }
    const int head_load_end = load_end(hi);

    if (tid < 16) {  // every row of SharedRows: those past the tile's rows are padding
      const RowInfo ri = tid < Tile::kRows ? row_info(p, rb, kv_head, tid) : RowInfo{};
      rows->q_row[tid] = ri.q_row;
      rows->head[tid] = ri.valid ? ri.head : -1;
      rows->pos[tid] = ri.pos;
      rows->lo[tid] = ri.lo;
      rows->gate_row[tid] = ri.valid ? ri.head * p.total_k + rb.seq.key_start : 0;
    }
    __syncthreads();

    // Query fragments in the key-permuted head-dim order (Frag::key_dim), zero past K and in padding rows,
    // through registers (see kQByCopy). Thread tid fills register tid % 4 of lane tid / 4 in every k-step;
    // kQBatch k-steps of independent loads at a time.
    uint32_t qreg[Tile::kQInRegisters ? Tile::kKSteps : 1][4];
    auto load_qreg = [&]() {
      if constexpr (Tile::kQInRegisters) {
#pragma unroll
        for (int ks = 0; ks < Tile::kKSteps; ++ks) lds128(qreg[ks], qfrag + (ks * 32 + lane) * 4);
      }
    };
    if (!q_by_copy) {
      static_assert(Tile::kThreads == 128, "one query fragment register per thread and k-step");
      constexpr int kQBatch = Tile::kKSteps < 8 ? Tile::kKSteps : 8;
      const int ln = tid >> 2, reg = tid & 3;
      const int r = (ln >> 2) + ((reg & 1) ? 8 : 0), half = reg >> 1;
      const int head = rows->head[r];
      const int64_t base = head >= 0 ? rows->q_row[r] * p.q_row_stride + head * p.q_head_stride : 0;
      // f16 Q K^T on an fp8 cache: row r's q goes in as q * 2^s with its largest element in [2^14, 2^15),
      // so no element overflows f16 and all but those below 2^-29 of the largest keep full precision. Row r
      // lives in the 8 threads that differ in tid bits 1-3.
      float q_mul = 1.f;
      if constexpr (Tile::kScaleQ) {
        float amax = 0.f;
        if (head >= 0) {
#pragma unroll 4
          for (int ks = 0; ks < Tile::kKSteps; ++ks)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              const int d = Frag::key_dim(ks, ln & 3, half, e);
              if (d < p.K) amax = fmaxf(amax, fabsf(paged_detail::load_qo(p.q, base + d, p.qo_dtype)));
            }
        }
#pragma unroll
        for (int m = 2; m <= 8; m <<= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, m));
        const int shift = paged_detail::f16_range_shift(amax);
        q_mul = paged_detail::pow2(shift);
        if ((tid & 14) == 0) rows->q_unscale[r] = paged_detail::pow2(-shift);
      }
      for (int ks0 = 0; ks0 < Tile::kKSteps; ks0 += kQBatch) {
        float x[kQBatch][2];
#pragma unroll
        for (int u = 0; u < kQBatch; ++u) {
          const int d0 = Frag::key_dim(ks0 + u, ln & 3, half, 0), d1 = Frag::key_dim(ks0 + u, ln & 3, half, 1);
          const bool live = head >= 0 && ks0 + u < Tile::kKSteps;
          x[u][0] = live && d0 < p.K ? paged_detail::load_qo(p.q, base + d0, p.qo_dtype) * q_mul : 0.f;
          x[u][1] = live && d1 < p.K ? paged_detail::load_qo(p.q, base + d1, p.qo_dtype) * q_mul : 0.f;
        }
#pragma unroll
        for (int u = 0; u < kQBatch; ++u)
          if (ks0 + u < Tile::kKSteps) qfrag[(ks0 + u) * 128 + tid] = ptx::pack2<Mma>(x[u][0], x[u][1]);
      }
      __syncthreads();  // qfrag and q_unscale complete
      load_qreg();
    }

    // This lane's two rows (g, g+8; keys as M: 2c, 2c+1): visible keys and the score multiplier (softmax scale
    // in the exp2 domain, per-tensor K scale, the undoing of the query's power-of-two scale).
    auto my_row = [&](int rs) { return Tile::lane_row(g, c, rs); };
    float score_mul = p.scale_log2;
    if (!k_per_token && p.k_scale_mode == CacheScale::per_tensor) score_mul *= p.k_scale[0];
    float row_mul[2];
#pragma unroll
    for (int rs = 0; rs < 2; ++rs) row_mul[rs] = Tile::kScaleQ ? score_mul * rows->q_unscale[my_row(rs)] : score_mul;
    // Key j is visible to row rs of this lane when lo <= j <= pos (a padding row has pos -1). The limits are
    // read from shared memory where needed (edge tiles, the gate): the loop keeps no registers for them.
    auto visible = [&](int j, int rs) {
      return j < slice.end && j <= rows->pos[my_row(rs)] && j >= rows->lo[my_row(rs)];
    };
    // A warp tile [key0, key0 + 16) needs no mask where this lane's rows see all of it (most tiles); padding
    // rows, whose results are never written, may then see it too (zero queries: finite scores).
    int whole_lo = 0, whole_hi = slice.end - 1;
#pragma unroll
    for (int rs = 0; rs < 2; ++rs) {
      if (rows->head[my_row(rs)] < 0) continue;
      whole_lo = max(whole_lo, rows->lo[my_row(rs)]);
      whole_hi = min(whole_hi, rows->pos[my_row(rs)]);
    }
    // Per-token V: P * scale enters the mma divided by 2^(v_exp - 127), v_exp the largest biased exponent of
    // the V scales this warp has seen (so the pair stays below 2 in f16); the epilogue multiplies it back.
    int v_exp = 1;
    // Raises v_exp to the largest biased exponent of a tile's V scales (lane_vmax: this lane's largest;
    // warp_max(lane_vmax) the warp's); the accumulators, below the old unit, take the ratio along with the
    // softmax rescale `factor`. Most tiles raise nothing, which a vote tells without the reduction.
    auto raise_v_unit = [&](float lane_vmax, auto warp_max, float (&factor)[2]) {
      auto unit_exp = [](float x) { return min(static_cast<int>((__float_as_uint(x) >> 23) & 0xff), 253); };
      if (!__any_sync(0xffffffffu, unit_exp(lane_vmax) > v_exp)) return;
      const int e = unit_exp(warp_max(lane_vmax));  // > v_exp, the same in every lane
      const float down = e - v_exp > 126 ? 0.f : paged_detail::pow2(v_exp - e);
      factor[0] *= down, factor[1] *= down;
      v_exp = e;
    };

    SoftmaxRow softmax[2];
    float acc[Tile::kAccTiles][4];
#pragma unroll
    for (int i = 0; i < Tile::kAccTiles; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.f;

    for (int tile = 0; tile < num_tiles; ++tile, read_slot = read_slot + 1 == stages ? 0 : read_slot + 1) {
      if (loaded < min(head_load_end, first_tile + tile + stages)) load_stage();
      ptx::cp_async_commit();
      paged_detail::wait_oldest_stage(stages);
      // By copy, this head's query fragments joined the group of the previous head's second iteration (the
      // load of tile + S): this stage's group or an older one, unless the head has fewer stages than the ring.
      if (q_by_copy && tile == 0 && hi > 0 && num_tiles < stages) ptx::cp_async_wait<0>();
      if (!Tile::kWarpOwnsRows || (q_by_copy && tile == 0)) __syncthreads();
      else __syncwarp();
      if (q_by_copy && tile == 0) load_qreg();
      const unsigned char* kst = ring + read_slot * Tile::kStageBytes;
      const unsigned char* vst = kst + KS * Tile::kKeyRowBytes;
      const float* kscales = reinterpret_cast<const float*>(vst + KS * Tile::kValueRowBytes);
      const float* vscales = kscales + KS;
      const int wrow = wk * Tile::kKeysPerWarp;            // this warp's first key row in the stage
      const int key0 = slice.begin + tile * KS + wrow;     // its first key (local position)
      // Q's A fragment of k-step ks (the 16-row layout's; with keys as M its registers 0 and 2 are Q^T's B
      // fragment): from registers, or from shared memory where the tile keeps none (kQInRegisters).
      auto query_words = [&](int ks, uint32_t (&q)[4]) {
        if constexpr (Tile::kQInRegisters) {
          q[0] = qreg[ks][0], q[1] = qreg[ks][1], q[2] = qreg[ks][2], q[3] = qreg[ks][3];
        } else {
          lds128(q, qfrag + (ks * 32 + lane) * 4);
        }
      };
      // 16 bytes of key rows g and g + 8 at lane column c of key round `round`: both layouts' key fragments.
      auto load_key_words = [&](int round, uint32_t (&kw)[2][4]) {
#pragma unroll
        for (int nt = 0; nt < 2; ++nt) lds128(kw[nt], kst + Tile::key_chunk(wrow + nt * 8 + g, round * 4 + c));
      };

      if constexpr (Tile::kKeysAsM) {
        // S^T = K Q^T over this warp's 16 keys: s[i] is key g + 8 * (i >> 1), row 2c + (i & 1). The key
        // fragments are the 16-row layout's two n-tiles (B) as one A; Q^T's B fragment is that layout's a0, a2.
        // Two accumulator chains (even and odd key rounds), as the 16-row layout has in its two n-tiles, rather
        // than one of 8 dependent mmas (docs/perf-notes.md: not measured alone).
        float s[4] = {0.f, 0.f, 0.f, 0.f}, s_odd[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
        for (int round = 0; round < Tile::kKeyRounds; ++round) {
          uint32_t kw[2][4];
          load_key_words(round, kw);
#pragma unroll
          for (int step = 0; step < Frag::kStepsPerKeyLoad; ++step) {
            const int ks = round * Frag::kStepsPerKeyLoad + step;
            uint32_t k0[2], k8[2];
            Frag::key_fragment(kw[0], step, k0);
            Frag::key_fragment(kw[1], step, k8);
            const uint32_t a[4] = {k0[0], k8[0], k0[1], k8[1]};
            uint32_t q[4];
            query_words(ks, q);
            const uint32_t b[2] = {q[0], q[2]};
            ptx::mma_16816<Mma>(round % 2 ? s_odd : s, a, b);
          }
        }
#pragma unroll
        for (int i = 0; i < 4; ++i) s[i] += s_odd[i];
        if (k_per_token) {
          const float k0s = kscales[wrow + g], k8s = kscales[wrow + g + 8];
          s[0] *= k0s, s[1] *= k0s, s[2] *= k8s, s[3] *= k8s;
        }
        if (key0 >= whole_lo && key0 + Tile::kKeysPerWarp - 1 <= whole_hi) {
#pragma unroll
          for (int i = 0; i < 4; ++i) s[i] *= row_mul[i & 1];
        } else {
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            s[i] = visible(key0 + g + 8 * (i >> 1), i & 1) ? s[i] * row_mul[i & 1] : -INFINITY;
          }
        }
        if (!Tile::kSkipGate && p.gate_bias) {
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            const int j = key0 + g + 8 * (i >> 1);
            if (visible(j, i & 1)) s[i] += p.gate_bias[rows->gate_row[my_row(i & 1)] + j];
          }
        }
        // A row's keys lie across the 8 lanes of its column (column_max).
        float factor[2];
#pragma unroll
        for (int rs = 0; rs < 2; ++rs) factor[rs] = softmax[rs].rescale(column_max(fmaxf(s[rs], s[2 + rs])));
        float v_scale[2] = {0.f, 0.f};  // keys g, g + 8
        if (v_per_token) {
          v_scale[0] = vscales[wrow + g], v_scale[1] = vscales[wrow + g + 8];
          raise_v_unit(fmaxf(v_scale[0], v_scale[1]), [](float x) { return column_max(x); }, factor);
        }
        if (__any_sync(0xffffffffu, factor[0] != 1.f || factor[1] != 1.f)) {
#pragma unroll
          for (int i = 0; i < Tile::kAccTiles; ++i) {
            acc[i][0] *= factor[0], acc[i][1] *= factor[1];
            acc[i][2] *= factor[0], acc[i][3] *= factor[1];
          }
        }
        const float off[2] = {softmax[0].exp_offset(), softmax[1].exp_offset()};
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          s[i] = ptx::exp2_ftz(s[i] - off[i & 1]);
          softmax[i & 1].sum += s[i];
        }
        // P^T as the B operand (keys 2c, 2c+1 and 2c+8, 2c+9 of row g): the transposes of the (key g, rows 2c,
        // 2c+1) pairs. Per-token V scales ride on P as an f16 hi + lo pair through two mmas (SPEC §6).
        uint32_t pb[2], pb_lo[2];
        if (v_per_token) {
          const float v_unit = paged_detail::pow2(127 - v_exp);
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const float unit_scale = v_scale[h] * v_unit;
            uint32_t hi2, lo2;
            paged_detail::split_pair<Mma>(s[2 * h] * unit_scale, s[2 * h + 1] * unit_scale, hi2, lo2);
            pb[h] = ptx::movmatrix_trans(hi2), pb_lo[h] = ptx::movmatrix_trans(lo2);
          }
        } else {
#pragma unroll
          for (int h = 0; h < 2; ++h) pb[h] = ptx::movmatrix_trans(ptx::pack2<Mma>(s[2 * h], s[2 * h + 1]));
        }
        // O^T += V^T P^T: value n-tiles t and t + 1 of the 16-row layout are the two halves of one M tile.
#pragma unroll
        for (int round = 0; round < Tile::kValueRounds; ++round) {
          uint32_t v0[Tile::kValueWords], v1[Tile::kValueWords], v8[Tile::kValueWords], v9[Tile::kValueWords];
          paged_detail::load_value_words<Tile>(vst, wrow + 2 * c, 0, round, g, v0, v1, v8, v9);
#pragma unroll
          for (int t = 0; t < Tile::kRoundElems; t += 2) {
            const uint32_t a[4] = {Frag::value_pair(v0, v1, t), Frag::value_pair(v0, v1, t + 1),
                                   Frag::value_pair(v8, v9, t), Frag::value_pair(v8, v9, t + 1)};
            ptx::mma_16816<Mma>(acc[(round * Tile::kRoundElems + t) / 2], a, pb);
            if (v_per_token) ptx::mma_16816<Mma>(acc[(round * Tile::kRoundElems + t) / 2], a, pb_lo);
          }
        }
      } else {
        // S = Q K^T over this warp's 16 keys: two n-tiles of 8 keys.
        float s[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
#pragma unroll
        for (int round = 0; round < Tile::kKeyRounds; ++round) {
          uint32_t kw[2][4];
          load_key_words(round, kw);
#pragma unroll
          for (int step = 0; step < Frag::kStepsPerKeyLoad; ++step) {
            const int ks = round * Frag::kStepsPerKeyLoad + step;
            uint32_t a[4];
            query_words(ks, a);
#pragma unroll
            for (int nt = 0; nt < 2; ++nt) {
              uint32_t b[2];
              Frag::key_fragment(kw[nt], step, b);
              ptx::mma_16816<Mma>(s[nt], a, b);
            }
          }
        }

        // Per-token K scales, then scale and mask; then the gate (decode with g only); then the online
        // softmax per row.
        if (k_per_token) {
#pragma unroll
          for (int nt = 0; nt < 2; ++nt)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              const float ks = kscales[wrow + nt * 8 + 2 * c + e];
              s[nt][e] *= ks, s[nt][2 + e] *= ks;
            }
        }
        if (key0 >= whole_lo && key0 + Tile::kKeysPerWarp - 1 <= whole_hi) {
#pragma unroll
          for (int nt = 0; nt < 2; ++nt)
#pragma unroll
            for (int i = 0; i < 4; ++i) s[nt][i] *= row_mul[i >> 1];
        } else {
#pragma unroll
          for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              const int j = key0 + nt * 8 + 2 * c + e;
#pragma unroll
              for (int rs = 0; rs < 2; ++rs) {
                s[nt][2 * rs + e] = visible(j, rs) ? s[nt][2 * rs + e] * row_mul[rs] : -INFINITY;
              }
            }
          }
        }
        if (!Tile::kSkipGate && p.gate_bias) {
          const int64_t gate_row[2] = {rows->gate_row[g], rows->gate_row[g + 8]};
#pragma unroll
          for (int nt = 0; nt < 2; ++nt)
#pragma unroll
            for (int e = 0; e < 2; ++e)
#pragma unroll
              for (int rs = 0; rs < 2; ++rs) {
                const int j = key0 + nt * 8 + 2 * c + e;
                if (visible(j, rs)) s[nt][2 * rs + e] += p.gate_bias[gate_row[rs] + j];
              }
        }
        float factor[2];
#pragma unroll
        for (int rs = 0; rs < 2; ++rs) {
          const float m = fmaxf(fmaxf(s[0][2 * rs], s[0][2 * rs + 1]), fmaxf(s[1][2 * rs], s[1][2 * rs + 1]));
          factor[rs] = softmax[rs].rescale(quad_max(m));
        }
        // Per-token V: this tile's V scales (the same 16 in every quad; unloaded keys have 0) may raise v_exp.
        // Each lane's 4 are read once and later multiplied by the unit once (each serves two rows).
        float v_scale[2][2] = {{0.f, 0.f}, {0.f, 0.f}};
        if (v_per_token) {
#pragma unroll
          for (int nt = 0; nt < 2; ++nt) {
            const float2 x = *reinterpret_cast<const float2*>(vscales + wrow + nt * 8 + 2 * c);
            v_scale[nt][0] = x.x, v_scale[nt][1] = x.y;
          }
          raise_v_unit(fmaxf(fmaxf(v_scale[0][0], v_scale[0][1]), fmaxf(v_scale[1][0], v_scale[1][1])),
                       [](float x) { return quad_max(x); }, factor);
        }
        // Once a row has met its large scores its max rarely moves: skip the accumulator rescale then.
        if (__any_sync(0xffffffffu, factor[0] != 1.f || factor[1] != 1.f)) {
#pragma unroll
          for (int i = 0; i < Tile::kValueTiles; ++i) {
            acc[i][0] *= factor[0], acc[i][1] *= factor[0];
            acc[i][2] *= factor[1], acc[i][3] *= factor[1];
          }
        }
#pragma unroll
        for (int rs = 0; rs < 2; ++rs) {
          const float off = softmax[rs].exp_offset();
#pragma unroll
          for (int nt = 0; nt < 2; ++nt)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              const float pr = ptx::exp2_ftz(s[nt][2 * rs + e] - off);
              s[nt][2 * rs + e] = pr;
              softmax[rs].sum += pr;
            }
        }

        // P as the A operand: keys 2c,2c+1 (a0 row g, a1 row g+8) and 8+2c,8+2c+1 (a2, a3). Per-token V scales
        // (fp8) ride on P, and P * scale keeps ~22 bits as an f16 hi + lo pair through two mmas (SPEC §6);
        // without them P is rounded once, as on the 16-bit path.
        uint32_t pa[4], pa_lo[4];
        if (v_per_token) {
          const float v_unit = paged_detail::pow2(127 - v_exp);
#pragma unroll
          for (int nt = 0; nt < 2; ++nt) v_scale[nt][0] *= v_unit, v_scale[nt][1] *= v_unit;
        }
#pragma unroll
        for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
          for (int rs = 0; rs < 2; ++rs) {
            if (v_per_token) {
              paged_detail::split_pair<Mma>(s[nt][2 * rs] * v_scale[nt][0], s[nt][2 * rs + 1] * v_scale[nt][1],
                                            pa[2 * nt + rs], pa_lo[2 * nt + rs]);
            } else {
              pa[2 * nt + rs] = ptx::pack2<Mma>(s[nt][2 * rs], s[nt][2 * rs + 1]);
            }
          }
        }

        // O += P V over this warp's value dims.
#pragma unroll
        for (int round = 0; round < Tile::kValueRounds; ++round) {
          uint32_t v0[Tile::kValueWords], v1[Tile::kValueWords], v8[Tile::kValueWords], v9[Tile::kValueWords];
          paged_detail::load_value_words<Tile>(vst, wrow + 2 * c, wv, round, g, v0, v1, v8, v9);
#pragma unroll
          for (int t = 0; t < Tile::kRoundElems; ++t) {
            const uint32_t b[2] = {Frag::value_pair(v0, v1, t), Frag::value_pair(v8, v9, t)};
            ptx::mma_16816<Mma>(acc[round * Tile::kRoundElems + t], pa, b);
            if (v_per_token) ptx::mma_16816<Mma>(acc[round * Tile::kRoundElems + t], pa_lo, b);
          }
        }
      }
      // This stage is free for the loads of the next iteration. Every warp has its query registers: the next
      // head's fragments may replace them (they join the next commit group).
      if (!Tile::kWarpOwnsRows || (q_by_copy && tile == 0 && hi + 1 < heads)) __syncthreads();
      else __syncwarp();
      if (q_by_copy && tile == 0 && hi + 1 < heads) copy_queries(kv_head + 1);
    }

    // Merge the warps' partial states and write the rows (paged_finish.cuh).
    paged_detail::finish_head<Tile>(p, rows, merge_facts, ring, stages, read_slot, softmax, acc, v_exp, split);
    __syncthreads();  // rows, query fragments and the merge's slots are free for the next head
  }
  ptx::cp_async_wait<0>();  // a CTA without keys still has its query copies in flight
}

}  // namespace flashgate::cuda
