// Copies of input tensors whose rows are not 16-byte aligned (K=60 fp16: 120-byte rows; odd K; odd
// strides) into workspace rows that are, so that every tile loader can use 16-byte cp.async. The copy is
// [B, T, heads, dim] contiguous with dim padded to 16 bytes; the padding is never read as data (loaders
// zero-fill past the real dim).
#pragma once

#include <cstdint>

#include "cuda/common/attention_params.h"

struct CUstream_st;

namespace flashgate::cuda {

// Elements a repacked copy of a [B, T, heads, dim] tensor of `esize`-byte elements takes.
inline int64_t repacked_elements(int64_t B, int64_t T, int64_t heads, int64_t dim, int esize) {
  const int64_t per16 = 16 / esize;
  return B * T * heads * ((dim + per16 - 1) / per16 * per16);
}

// Copies `src` (dims as given) into `dst` (repacked_elements of workspace) and returns the view of the copy.
TokenHeadTensor repack_rows(const TokenHeadTensor& src, int64_t B, int64_t T, int64_t heads, int64_t dim, void* dst,
                            CUstream_st* stream);

}  // namespace flashgate::cuda
