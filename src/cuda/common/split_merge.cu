// The split-KV merge kernel of the serving ops: one warp per (query row, query head) and 32 value dims, so
// that a few rows with many splits (one long sequence) still spread over many warps.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda/common/cuda_check.h"
#include "cuda/common/serving_merge.cuh"
#include "cuda/common/serving_passes.h"
#include "cuda/ptx/grid_dependency.h"

namespace flashgate::cuda {
namespace {

constexpr int kWarps = 4;

template <int kBatch>
__global__ void __launch_bounds__(kWarps * 32) paged_merge_kernel(const ServingParams p) {
  const int warp = threadIdx.x / 32;
  const int dim_slices = (p.V + 31) / 32;
  const int64_t item = static_cast<int64_t>(blockIdx.x) * kWarps + warp;  // (query row, query head, slice)
  const int64_t rows = p.total_q * p.HQ;
  if (item >= rows * dim_slices) return;
  const int64_t row = item / dim_slices;
  const int dim_begin = static_cast<int>(item % dim_slices) * 32;
  const int64_t q_row = row / p.HQ;
  const int head = static_cast<int>(row % p.HQ);
  const bool has_sink = p.sink != nullptr;
  const float sink = has_sink ? p.sink[head * p.sink_stride] : 0.f;
  const int64_t out = q_row * p.o_row_stride + head * p.o_head_stride;
  ptx::grid_dependency_wait();  // the split kernel's partials (this grid may start during its last CTAs)
  auto store = [&](int d, float x) {
    if (p.qo_dtype == ElementType::bf16) static_cast<__nv_bfloat16*>(p.o)[out + d] = __float2bfloat16_rn(x);
    else if (p.qo_dtype == ElementType::f16) static_cast<__half*>(p.o)[out + d] = __float2half_rn(x);
    else static_cast<float*>(p.o)[out + d] = x;
  };
  merge_split_row<kBatch>(p.lse_partial + row, rows, p.o_partial + row * p.V, rows * p.V, p.num_splits, dim_begin,
                          min(dim_begin + 32, p.V), has_sink, sink, store);
}

}  // namespace

void launch_paged_merge(const ServingParams& p, bool dependent, CUstream_st* stream) {
  const int64_t items = p.total_q * p.HQ * ((p.V + 31) / 32);
  if (items == 0) return;
  const int64_t blocks = (items + kWarps - 1) / kWarps;
  // Programmatic dependent launch (sm_90+): the split kernel's CTAs call launch_dependents at their start, so
  // the merge's launch and index math overlap that kernel's tail (its CTAs wait in grid_dependency_wait).
  cudaLaunchAttribute pdl{};
  pdl.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  pdl.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(static_cast<unsigned>(blocks));
  config.blockDim = dim3(kWarps * 32);
  config.stream = stream;
  config.attrs = &pdl;
  config.numAttrs = dependent ? 1 : 0;
  // The smallest batch that holds every split (one round trip, no loads of splits that do not exist); more
  // than 64 go in batches of 64 (a batch of 128 spills).
  const auto kernel = p.num_splits <= 8    ? paged_merge_kernel<8>
                      : p.num_splits <= 16 ? paged_merge_kernel<16>
                      : p.num_splits <= 32 ? paged_merge_kernel<32>
                                           : paged_merge_kernel<64>;
  FLASHGATE_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, p));
  FLASHGATE_CHECK_LAUNCH("paged_merge_kernel");
}

}  // namespace flashgate::cuda
