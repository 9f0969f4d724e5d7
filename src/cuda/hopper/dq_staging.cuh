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

// A consumer warp's accumulators of 16-row group `group` of the slot (`group_chunks` chunks a group), chunks chunk0..
// of the group's first `chunks` (those past them are columns past the head dim: not written); then a fence so that
// the copy engine sees them.
template <int kFloats>
__device__ __forceinline__ void write_group(const float (&dq)[kFloats], unsigned char* slot, int group, int chunk0,
                                            int chunks, int group_chunks) {
  float4* at =
      reinterpret_cast<float4*>(slot + static_cast<uint32_t>(group * group_chunks + chunk0) * 512) + threadIdx.x % 32;
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

// The writer warp, where the slot holds a column range of its rows: `groups` 16-row groups of `bytes` each,
// `group_bytes` apart in the slot and `group_floats` apart at dst, added by lane 0 in one bulk group; the warp goes
// on once the copy engine has read them.
__device__ __forceinline__ void add_groups(float* dst, int64_t group_floats, const unsigned char* slot, int groups,
                                           uint32_t group_bytes, uint32_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (threadIdx.x % 32 == 0) {
    if (bytes > 0)
      for (int g = 0; g < groups; ++g)
        ptx::bulk_add_f32(dst + g * group_floats, reinterpret_cast<const float*>(slot + g * group_bytes), bytes);
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
