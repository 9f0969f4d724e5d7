#include "cuda/common/row_repack.h"

#include "cuda/common/cuda_check.h"
#include "cuda/common/element_type.h"

namespace flashgate::cuda {
namespace {

constexpr int kThreads = 256;

// One warp per row; elements copied as raw 2- or 4-byte words (no conversion).
template <class Word>
__global__ void __launch_bounds__(kThreads) repack_rows_kernel(const __grid_constant__ TokenHeadTensor src, Word* dst,
                                                               int64_t T, int64_t heads, int64_t dim, int64_t dst_dim,
                                                               int64_t rows) {
  const int lane = threadIdx.x % 32;
  for (int64_t row = (static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x) / 32; row < rows;
       row += static_cast<int64_t>(gridDim.x) * (kThreads / 32)) {
    const int64_t h = row % heads, t = (row / heads) % T, b = row / (heads * T);
    const Word* s = static_cast<const Word*>(src.data) + src.offset(b, t, h);
    Word* d = dst + row * dst_dim;
    for (int64_t e = lane; e < dim; e += 32) d[e] = s[e];
  }
}

}  // namespace

TokenHeadTensor repack_rows(const TokenHeadTensor& src, int64_t B, int64_t T, int64_t heads, int64_t dim, void* dst,
                            CUstream_st* stream) {
  const int esize = element_size(src.dtype);
  const int64_t per16 = 16 / esize;
  const int64_t dst_dim = (dim + per16 - 1) / per16 * per16;
  const int64_t rows = B * T * heads;
  TokenHeadTensor out;
  out.data = dst;
  out.dtype = src.dtype;
  out.head_stride = dst_dim;
  out.token_stride = heads * dst_dim;
  out.batch_stride = T * heads * dst_dim;
  if (rows == 0) return out;
  const int64_t blocks = (rows + kThreads / 32 - 1) / (kThreads / 32);
  const unsigned grid = static_cast<unsigned>(blocks < (1 << 20) ? blocks : (1 << 20));
  if (esize == 4)
    repack_rows_kernel<uint32_t><<<grid, kThreads, 0, stream>>>(src, static_cast<uint32_t*>(dst), T, heads, dim, dst_dim, rows);
  else
    repack_rows_kernel<uint16_t><<<grid, kThreads, 0, stream>>>(src, static_cast<uint16_t*>(dst), T, heads, dim, dst_dim, rows);
  FLASHGATE_CHECK_LAUNCH("repack_rows_kernel");
  return out;
}

}  // namespace flashgate::cuda
