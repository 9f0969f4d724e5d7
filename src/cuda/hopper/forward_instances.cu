// The Hopper forward's instances: fp16 and bf16, head dims 64 and 128 (K == V).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda/common/cuda_check.h"
#include "cuda/hopper/forward_kernel.cuh"

namespace flashgate::cuda::hopper {

template <class T, int kD>
void launch_forward(const ForwardParams& p, const TileSchedule& sched, CUstream_st* stream) {
  using Tile = ForwardTile<kD>;
  const int64_t items = sched.num_tiles * p.a.HQ;
  if (items == 0) return;
  const auto kernel = forward_kernel<T, kD>;
  FLASHGATE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            static_cast<int>(Tile::smem_bytes())));
  kernel<<<static_cast<unsigned>(items), Tile::kThreads, Tile::smem_bytes(), stream>>>(p, sched);
  FLASHGATE_CHECK_LAUNCH("hopper forward_kernel");
}

template void launch_forward<__half, 64>(const ForwardParams&, const TileSchedule&, CUstream_st*);
template void launch_forward<__half, 128>(const ForwardParams&, const TileSchedule&, CUstream_st*);
template void launch_forward<__nv_bfloat16, 64>(const ForwardParams&, const TileSchedule&, CUstream_st*);
template void launch_forward<__nv_bfloat16, 128>(const ForwardParams&, const TileSchedule&, CUstream_st*);

}  // namespace flashgate::cuda::hopper
