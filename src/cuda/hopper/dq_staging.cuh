// dQ's adds through shared memory (the dK/dV kernels, sm_90a): a consumer writes a step's dQ into a staging slot and
// goes on, and a writer warp of the producer warpgroup has the copy engine add the slot into the fp32 accumulator.
// Issued by the consumers themselves, the vector reductions held them until the last one had left their registers,
// once a step; the copy engine's adds run under the consumers' next step instead.
//
// dq_acc (dq_acc_offset) keeps a 16-row group's columns as 512-byte chunks of 16 rows x 8 columns, chunk j of a lane
// being the float4 the lane's accumulators hold for columns 8 j... The slot keeps the step's tile in that order, its
// 16-row groups one after the other with all their chunks, so that the step's rows in the sequence go out as one
// run.
#pragma once

#include <cstdint>

#include "cuda/hopper/ring.h"
#include "cuda/ptx/red.h"
#include "cuda/ptx/tma.h"

namespace flashgate::cuda::hopper {

#if defined(__CUDACC__)
namespace dq_staging {

// A consumer warp's accumulators of 16-row group `group` of the slot, chunks chunk0.. of the group's `chunks`
// (those past it are columns past the head dim: not written); then a fence so that the copy engine sees them.
template <int kFloats>
__device__ __forceinline__ void write_group(const float (&dq)[kFloats], unsigned char* slot, int group, int chunk0,
                                            int chunks) {
  float4* at = reinterpret_cast<float4*>(slot + static_cast<uint32_t>(group * chunks + chunk0) * 512) + threadIdx.x % 32;
#pragma unroll
  for (int j = 0; j < kFloats / 4; ++j)
    if (chunk0 + j < chunks) at[32 * j] = make_float4(dq[4 * j], dq[4 * j + 1], dq[4 * j + 2], dq[4 * j + 3]);
  ptx::fence_async_shared();
}

// The writer warp: the first `bytes` of the slot added at dst by one bulk reduction from lane 0; the warp
// goes on once the copy engine has read them.
__device__ __forceinline__ void add_run(float* dst, const unsigned char* slot, uint32_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (threadIdx.x % 32 == 0) {
    if (bytes > 0) ptx::bulk_add_f32(dst, reinterpret_cast<const float*>(slot), bytes);
    ptx::bulk_commit();
    ptx::bulk_wait_read<0>();
  }
#endif
  __syncwarp();
}

// Deterministic mode: the writer's adds so far complete before its turn is counted (lane 0 issued them).
__device__ __forceinline__ void finish_adds() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (threadIdx.x % 32 == 0) ptx::bulk_wait_done<0>();
#endif
}

}  // namespace dq_staging
#endif  // __CUDACC__

}  // namespace flashgate::cuda::hopper
