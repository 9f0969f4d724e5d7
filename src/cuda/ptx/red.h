// Reductions into global memory (sm_90+): red.global.add.v4.f32, four unordered fp32 atomic adds to 16 consecutive
// bytes in one instruction (an MMA accumulator fragment holds its four values in consecutive registers, so a
// fragment goes out as it is: dq_acc's layout, backward_params.h), and the copy engine's bulk reduction of a run of
// shared memory into global memory.
#pragma once

#include <cuda/ptx>

#include <cstdint>

namespace flashgate::ptx {

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
// dst[0..3] += v; dst 16-byte aligned global memory.
__device__ __forceinline__ void red_add_v4_f32(float* dst, float4 v) {
  asm volatile("red.relaxed.gpu.global.add.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"l"(dst), "f"(v.x), "f"(v.y), "f"(v.z),
               "f"(v.w)
               : "memory");
}

// dst[i] += src[i] for `bytes` / 4 floats by the copy engine (dst, src 16-byte aligned, bytes a multiple of 16),
// in the issuing thread's current bulk group. The source was written by the generic proxy: its writers fence it
// (fence_async_shared) before handing it over.
__device__ __forceinline__ void bulk_add_f32(float* dst, const float* src, uint32_t bytes) {
  ::cuda::ptx::cp_reduce_async_bulk(::cuda::ptx::space_global, ::cuda::ptx::space_shared, ::cuda::ptx::op_add, dst, src,
                                   bytes);
}
// Closes the thread's current bulk group.
__device__ __forceinline__ void bulk_commit() { ::cuda::ptx::cp_async_bulk_commit_group(); }
// Waits until the copy engine has read the sources of all but the last n of the thread's bulk groups.
template <int n>
__device__ __forceinline__ void bulk_wait_read() {
  ::cuda::ptx::cp_async_bulk_wait_group_read(::cuda::ptx::n32_t<n>{});
}
// Waits until all but the last n of the thread's bulk groups are complete, and orders their writes before the
// thread's later generic accesses (a release after it covers them).
template <int n>
__device__ __forceinline__ void bulk_wait_done() {
  ::cuda::ptx::cp_async_bulk_wait_group(::cuda::ptx::n32_t<n>{});
  asm volatile("fence.proxy.async.global;" ::: "memory");
}
#endif

}  // namespace flashgate::ptx
