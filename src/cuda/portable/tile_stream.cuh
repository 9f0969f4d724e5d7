// Row tiles streamed into shared memory by a main loop (cp.async, 16-byte chunks): the forward's keys and
// values, the backward's queries and output gradients. Each thread owns one column chunk of every
// kRowStep-th row for the whole loop, so a tile whose rows all exist (every tile but the sequence's last)
// costs one 64-bit add and one cp.async per row, without the zero-fill operand where the thread's chunk is
// whole; only a tile that reaches past the sequence tests its rows. The generic load_tile (tile_io.h)
// re-derives the column, the byte count and a clamped pointer for every row: about 13 instructions per row,
// more than a third of the forward's non-MMA main-loop instructions at D128, ~0.5 per MMA in the backward.
#pragma once

#include <cstdint>

#include "cuda/ptx/cp_async.h"

namespace flashgate::cuda {

// kWholeCopies: whole chunks of whole tiles take the cp.async form without the zero-fill operand (fewer
// instructions, one more code path). The backward's whole-tile kernels use it; the forward does not yet
// (not measured with it on the H200).
template <class T, int ROWS, int COLS, int SMEM_STRIDE, int THREADS, bool kWholeCopies = false>
class TileStream {
  static constexpr int kChunkElems = 16 / static_cast<int>(sizeof(T));
  static constexpr int kChunksPerRow = COLS / kChunkElems;
  static constexpr int kRowStep = THREADS / kChunksPerRow;
  static_assert((SMEM_STRIDE * sizeof(T)) % 16 == 0, "shared rows must keep 16-byte chunks aligned");
  static_assert(THREADS % kChunksPerRow == 0 && ROWS % kRowStep == 0, "threads must tile the rows evenly");

 public:
  // Rows of the stream start at `gmem` (16-byte aligned, `row_stride` elements apart); columns at or past
  // `valid_cols` are zero-filled, columns at or past `active_cols` (a multiple of 8) are never written.
  __device__ __forceinline__ TileStream(const T* gmem, int64_t row_stride, int valid_cols, int active_cols, int tid)
      : row_stride_(row_stride), row0_(tid / kChunksPerRow) {
    const int col = (tid % kChunksPerRow) * kChunkElems;
    const int cols_here = valid_cols - col < kChunkElems ? valid_cols - col : kChunkElems;
    active_ = col < active_cols;
    bytes_ = cols_here > 0 ? static_cast<uint32_t>(cols_here * sizeof(T)) : 0u;
    chunk_ = gmem + (bytes_ ? col : 0);  // an empty chunk reads nothing, but keeps a valid address
    dst_ = row0_ * SMEM_STRIDE + col;
  }

  // Rows r0 .. r0 + ROWS - 1 of the stream into the shared tile `smem`; rows at or past `valid_rows`
  // (counted from r0) become zero. Row r0 must exist (>= 1 valid row). The caller commits and waits.
  __device__ __forceinline__ void load(T* smem, int r0, int valid_rows) const {
    if (!active_) return;
    T* const dst = smem + dst_;
    const T* src = chunk_ + r0 * row_stride_ + row0_ * row_stride_;
    const int64_t step = kRowStep * row_stride_;
    if (kWholeCopies && valid_rows >= ROWS && bytes_ == 16) {
#pragma unroll
      for (int it = 0; it < ROWS / kRowStep; ++it) ptx::cp_async_16(dst + it * kRowStep * SMEM_STRIDE, src + it * step);
    } else if (valid_rows >= ROWS) {
#pragma unroll
      for (int it = 0; it < ROWS / kRowStep; ++it)
        ptx::cp_async_16(dst + it * kRowStep * SMEM_STRIDE, src + it * step, bytes_);
    } else {
      const T* first = chunk_ + r0 * row_stride_;  // row r0 exists: a safe address for rows that read nothing
#pragma unroll
      for (int it = 0; it < ROWS / kRowStep; ++it) {
        const bool row_ok = row0_ + it * kRowStep < valid_rows;
        ptx::cp_async_16(dst + it * kRowStep * SMEM_STRIDE, row_ok ? src + it * step : first, row_ok ? bytes_ : 0u);
      }
    }
  }

 private:
  const T* chunk_;  // this thread's chunk in row 0 (column 0 when the chunk is empty)
  int64_t row_stride_;
  int dst_;         // this thread's chunk in its first shared row (elements from the tile's start)
  int row0_;        // this thread's first row of a tile
  uint32_t bytes_;  // 16, fewer at the last valid column, 0 past it
  bool active_;
};

}  // namespace flashgate::cuda
