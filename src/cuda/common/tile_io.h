// Moving row tiles between global and shared memory.
//
// load_tile: ROWS x COLS elements from global rows (`row_stride` elements apart, every row start 16-byte
// aligned) into shared rows of SMEM_STRIDE elements, asynchronously with 16-byte cp.async; rows >= valid_rows
// and columns >= valid_cols become zero, columns >= active_cols are left untouched (so a tile bucketed at
// COLS costs only what the head dim needs). Tensors whose rows are not 16-byte aligned (K=60 fp16 has
// 120-byte rows; odd K) are first copied into aligned workspace rows (row_repack.h): a kernel with one
// copy path per width inlined into its main loop grows past what ptxas allocates registers for.
// The caller commits and waits (ptx::cp_async_commit / cp_async_wait) as for any cp.async.
//
// store_rows: the reverse for outputs, `rows` x `cols` valid elements, 16-byte stores where the output's
// rows allow and element stores otherwise (outside the main loop, so the slow path costs no registers).
#pragma once

#include <cstdint>

#include "cuda/ptx/cp_async.h"

namespace flashgate::cuda {

// Each thread copies one 16-byte column chunk of every (THREADS / chunks-per-row)-th row: one column test,
// one row pointer stepped by a constant, so few registers stay live across a caller's main loop.
template <class T, int ROWS, int COLS, int SMEM_STRIDE, int THREADS>
__device__ __forceinline__ void load_tile(T* smem, const T* gmem, int64_t row_stride, int valid_rows, int valid_cols,
                                          int active_cols, int tid) {
  constexpr int kChunkElems = 16 / static_cast<int>(sizeof(T));
  constexpr int kChunksPerRow = COLS / kChunkElems;
  constexpr int kRowStep = THREADS / kChunksPerRow;
  static_assert((SMEM_STRIDE * sizeof(T)) % 16 == 0, "shared rows must keep 16-byte chunks aligned");
  static_assert(THREADS % kChunksPerRow == 0 && ROWS % kRowStep == 0, "threads must tile the rows evenly");
  const int col = (tid % kChunksPerRow) * kChunkElems;
  if (col >= active_cols) return;
  const int row0 = tid / kChunksPerRow;
  const int col_bytes =
      (valid_cols - col < kChunkElems ? valid_cols - col : kChunkElems) * static_cast<int>(sizeof(T));
  const uint32_t bytes = col_bytes > 0 ? static_cast<uint32_t>(col_bytes) : 0u;
  const T* src = gmem + row0 * row_stride + col;
  T* dst = smem + row0 * SMEM_STRIDE + col;
#pragma unroll
  for (int it = 0; it < ROWS / kRowStep; ++it) {
    const bool row_ok = row0 + it * kRowStep < valid_rows;
    ptx::cp_async_16(dst + it * kRowStep * SMEM_STRIDE, row_ok && bytes ? src : gmem, row_ok ? bytes : 0u);
    src += kRowStep * row_stride;
  }
}

// Stores rows x cols elements from shared rows of `smem_stride` elements to global rows `row_stride` apart,
// `width`-byte vectors where the row start allows (tail elements one by one); threads tid of nthreads share it.
template <class T>
__device__ __forceinline__ void store_rows(T* gmem, int64_t row_stride, const T* smem, int smem_stride, int rows,
                                           int cols, int width, int tid, int nthreads) {
  const int chunk = width >= 16 ? 16 / static_cast<int>(sizeof(T)) : 1;
  const int chunks_per_row = (cols + chunk - 1) / chunk;
  for (int idx = tid; idx < rows * chunks_per_row; idx += nthreads) {
    const int r = idx / chunks_per_row, c = (idx % chunks_per_row) * chunk;
    T* dst = gmem + r * row_stride + c;
    const T* src = smem + r * smem_stride + c;
    if (chunk > 1 && c + chunk <= cols) {
      *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(src);
    } else {
      for (int e = 0; e < chunk && c + e < cols; ++e) dst[e] = src[e];
    }
  }
}

}  // namespace flashgate::cuda
