// The serving kernel's stage loads (paged_kernel.cuh): one warp's 16-byte cp.async copies of whole K or V
// rows into a ring stage, and the wait for the ring's oldest stage.
#pragma once

#include <cstdint>

#include "cuda/ptx/cp_async.h"

namespace flashgate::cuda::paged_detail {

// Waits until the oldest of `stages - 1` committed groups has landed (cp.async.wait_group takes an
// immediate; the stage count is chosen per device on the host, 2..4).
__device__ __forceinline__ void wait_oldest_stage(int stages) {
  if (stages >= 4) ptx::cp_async_wait<3>();
  else if (stages == 3) ptx::cp_async_wait<2>();
  else ptx::cp_async_wait<1>();
}

// One warp copies `kRowsPerWarp` rows of one operand (padded to kChunks 16-byte chunks) into a stage, kLanes
// lanes per row: one instruction covers whole rows, i.e. whole 128-byte lines (full L2 sectors, one request
// per line) and whole 32-bank spans of shared memory (the swizzles only permute chunks within 128 bytes).
// What depends on the lane alone (its chunk, its bytes of it) is set up once per kernel, so a copy costs a
// shuffle of the row's address, a select of the byte count and the cp.async itself.
template <int kChunks, int kRowsPerWarp>
struct WarpRowCopy {
  static constexpr int kLanes = kChunks < 32 ? kChunks : 32;
  static constexpr int kRowsPerPass = 32 / kLanes;
  static constexpr int kChunkPasses = (kChunks + kLanes - 1) / kLanes;
  static_assert(32 % kLanes == 0 && kRowsPerWarp % kRowsPerPass == 0, "a pass must cover whole rows");

  // Rows shorter than a 128-byte line prefetch the whole line into L2: in vLLM's layout its other part is the next kv
  // head's row, which another CTA reads about now (ptx::cp_async_16_line).
  static constexpr bool kWholeLines = kChunks < 8;

  int lane_row;                        // row of this lane within a pass
  int chunk[kChunkPasses];             // this lane's chunk in each chunk pass
  int src_chunk[kChunkPasses];         // its source byte offset in the row (0 for a chunk past the row)
  uint32_t chunk_bytes[kChunkPasses];  // bytes of the row in that chunk: 16, fewer for a partial last
                                       // one, 0 past the row (padding dims: zero-filled, so no NaN)
  bool whole_chunks;                   // no partial chunk (the same for every lane)

  __device__ __forceinline__ WarpRowCopy(int row_bytes, int lane)
      : lane_row(lane / kLanes), whole_chunks(row_bytes % 16 == 0) {
#pragma unroll
    for (int pass = 0; pass < kChunkPasses; ++pass) {
      chunk[pass] = lane % kLanes + pass * kLanes;
      const int left = row_bytes - chunk[pass] * 16;
      chunk_bytes[pass] = left <= 0 ? 0u : (left < 16 ? static_cast<uint32_t>(left) : 16u);
      src_chunk[pass] = left > 0 ? chunk[pass] * 16 : 0;
    }
  }

  // Lane r holds row r's source address `src` (any readable address for a dead row); bit r of `live` says
  // whether row r exists (a dead row is zero-filled: never read, and no NaN from the ring can leak).
  template <class ChunkOffset>
  __device__ __forceinline__ void operator()(unsigned char* stage, const unsigned char* src, uint32_t live, int row0,
                                             ChunkOffset chunk_offset) const {
    // Whole chunks copy 16 bytes or none, which cp.async takes as a predicate (no byte count to compute).
    if (whole_chunks) copy<true>(stage, src, live, row0, chunk_offset);
    else copy<false>(stage, src, live, row0, chunk_offset);
  }

  // The common case: rows row0 .. row0 + kRowsPerWarp - 1 all exist and lie `row_step` bytes apart from
  // `first` (consecutive slots of one page, or tokens of a decode sequence), whole chunks. Each lane's
  // source then advances by a constant: no shuffle, no liveness test per row.
  template <class ChunkOffset>
  __device__ __forceinline__ void copy_run(unsigned char* stage, const unsigned char* first, int64_t row_step, int row0,
                                           ChunkOffset chunk_offset) const {
    const unsigned char* src = first + lane_row * row_step;
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; r += kRowsPerPass, src += kRowsPerPass * row_step) {
#pragma unroll
      for (int pass = 0; pass < kChunkPasses; ++pass) {
        if (kChunks % kLanes != 0 && chunk[pass] >= kChunks) continue;  // past the padded row (wide rows only)
        copy16(stage + chunk_offset(row0 + r + lane_row, chunk[pass]), src + src_chunk[pass],
               chunk_bytes[pass]);  // 16, or 0 past the row (zero-filled padding dims)
      }
    }
  }

  __device__ static __forceinline__ void copy16(unsigned char* dst, const unsigned char* src, uint32_t bytes) {
    if constexpr (kWholeLines) ptx::cp_async_16_line(dst, src, bytes);
    else ptx::cp_async_16(dst, src, bytes);
  }

  template <bool kWhole, class ChunkOffset>
  __device__ __forceinline__ void copy(unsigned char* stage, const unsigned char* src, uint32_t live, int row0,
                                       ChunkOffset chunk_offset) const {
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; r += kRowsPerPass) {
      const int row = r + lane_row;
      const auto* row_src = reinterpret_cast<const unsigned char*>(
          __shfl_sync(0xffffffffu, reinterpret_cast<unsigned long long>(src), row));
      const bool row_live = (live >> row) & 1u;
#pragma unroll
      for (int pass = 0; pass < kChunkPasses; ++pass) {
        if (kChunks % kLanes != 0 && chunk[pass] >= kChunks) continue;  // past the padded row (wide rows only)
        const uint32_t n =
            kWhole ? (row_live && chunk_bytes[pass] != 0 ? 16u : 0u) : (row_live ? chunk_bytes[pass] : 0u);
        copy16(stage + chunk_offset(row0 + row, chunk[pass]), row_src + src_chunk[pass], n);
      }
    }
  }
};

}  // namespace flashgate::cuda::paged_detail
