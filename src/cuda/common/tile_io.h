// Moving row tiles between global and shared memory.
//
// load_tile: ROWS x COLS elements from global rows (`row_stride` elements apart) into shared rows of
// SMEM_STRIDE elements, asynchronously with cp.async; rows >= valid_rows and columns >= valid_cols become
// zero, columns >= active_cols are left untouched (so a tile bucketed at COLS costs only what the head dim
// needs). `width` is the byte width every global row start is aligned to (AttentionParams::*_width): 16, 8
// and 4 use cp.async of that size; 2 (odd fp16/bf16 rows) falls back to synchronous element copies.
// The caller commits and waits (ptx::cp_async_commit / cp_async_wait) as for any cp.async.
//
// store_rows: the reverse for outputs, `rows` x `cols` valid elements with vector stores of `width` bytes.
#pragma once

#include <cstdint>

#include "cuda/ptx/cp_async.h"

namespace flashgate::cuda {

namespace tile_io_detail {

template <int W>
__device__ __forceinline__ void cp_async(void* smem, const void* gmem, uint32_t bytes) {
  if constexpr (W == 16) ptx::cp_async_16(smem, gmem, bytes);
  else if constexpr (W == 8) ptx::cp_async_8(smem, gmem, bytes);
  else ptx::cp_async_4(smem, gmem, bytes);
}

template <class T, int ROWS, int COLS, int SMEM_STRIDE, int THREADS, int W>
__device__ __forceinline__ void load_tile_async(T* smem, const T* gmem, int64_t row_stride, int valid_rows,
                                                int valid_cols, int active_cols, int tid) {
  constexpr int kChunkElems = W / static_cast<int>(sizeof(T));
  constexpr int kChunksPerRow = COLS / kChunkElems;
  constexpr int kChunks = ROWS * kChunksPerRow;
#pragma unroll
  for (int it = 0; it < (kChunks + THREADS - 1) / THREADS; ++it) {
    const int idx = it * THREADS + tid;
    if (kChunks % THREADS != 0 && idx >= kChunks) break;
    const int r = idx / kChunksPerRow, col = (idx % kChunksPerRow) * kChunkElems;
    if (col >= active_cols) continue;
    int bytes = 0;
    if (r < valid_rows && col < valid_cols) {
      const int elems = valid_cols - col < kChunkElems ? valid_cols - col : kChunkElems;
      bytes = elems * static_cast<int>(sizeof(T));
    }
    const T* src = bytes ? gmem + r * row_stride + col : gmem;
    cp_async<W>(smem + r * SMEM_STRIDE + col, src, static_cast<uint32_t>(bytes));
  }
}

template <class T, int ROWS, int COLS, int SMEM_STRIDE, int THREADS>
__device__ __forceinline__ void load_tile_sync(T* smem, const T* gmem, int64_t row_stride, int valid_rows,
                                               int valid_cols, int active_cols, int tid) {
  for (int idx = tid; idx < ROWS * COLS; idx += THREADS) {
    const int r = idx / COLS, c = idx % COLS;
    if (c >= active_cols) continue;
    smem[r * SMEM_STRIDE + c] = (r < valid_rows && c < valid_cols) ? gmem[r * row_stride + c] : T(0.f);
  }
}

}  // namespace tile_io_detail

template <class T, int ROWS, int COLS, int SMEM_STRIDE, int THREADS>
__device__ __forceinline__ void load_tile(T* smem, const T* gmem, int64_t row_stride, int valid_rows, int valid_cols,
                                          int active_cols, int width, int tid) {
  static_assert((SMEM_STRIDE * sizeof(T)) % 16 == 0, "shared rows must keep 16-byte chunks aligned");
  using namespace tile_io_detail;
  if (width >= 16) load_tile_async<T, ROWS, COLS, SMEM_STRIDE, THREADS, 16>(smem, gmem, row_stride, valid_rows, valid_cols, active_cols, tid);
  else if (width == 8) load_tile_async<T, ROWS, COLS, SMEM_STRIDE, THREADS, 8>(smem, gmem, row_stride, valid_rows, valid_cols, active_cols, tid);
  else if (width == 4 && sizeof(T) <= 4) load_tile_async<T, ROWS, COLS, SMEM_STRIDE, THREADS, 4>(smem, gmem, row_stride, valid_rows, valid_cols, active_cols, tid);
  else load_tile_sync<T, ROWS, COLS, SMEM_STRIDE, THREADS>(smem, gmem, row_stride, valid_rows, valid_cols, active_cols, tid);
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
