// Bulk asynchronous reduction shared -> global (sm_90+): the copy engine adds a contiguous run of fp32 from
// shared memory into global memory, element by element as unordered atomic adds, while the issuing thread
// goes on. Protocol:
//   writers:  st.shared of the data, then fence_proxy_async_shared() (the engine reads through the async
//             proxy, which does not see generic-proxy writes without the fence), then a CTA barrier;
//   issuer:   bulk_reduce_add_f32(...) per run, bulk_commit();
//   reuse:    the issuer bulk_wait_read<0>() (its groups have read the shared source), then a barrier before
//             anyone writes the buffer again; before exit the issuer bulk_wait<0>() (shared memory must
//             outlive the reads).
// Bulk groups are per thread: each issuing thread waits for its own groups.
// Only sm_90+ has these instructions: callers branch on kBulkAsync (a compile-time constant per
// architecture); the bodies are empty below sm_90 so that unreferenced copies still assemble.
#pragma once

#include <cstdint>

#include "cuda/ptx/cp_async.h"

namespace flashgate::ptx {

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
inline constexpr bool kBulkAsync = true;
#else
inline constexpr bool kBulkAsync = false;
#endif

__device__ __forceinline__ void fence_proxy_async_shared() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}

// gmem[0 .. bytes/4) += smem[0 .. bytes/4); both 16-byte aligned, bytes a multiple of 16.
__device__ __forceinline__ void bulk_reduce_add_f32(float* gmem, const float* smem, uint32_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n" ::"l"(gmem),
               "r"(smem_addr(smem)), "r"(bytes)
               : "memory");
#endif
}

__device__ __forceinline__ void bulk_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
#endif
}

// Waits until at most N of this thread's bulk groups still read their shared source.
template <int N>
__device__ __forceinline__ void bulk_wait_read() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
#endif
}

// Waits until at most N of this thread's bulk groups are incomplete (writes performed).
template <int N>
__device__ __forceinline__ void bulk_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(N) : "memory");
#endif
}

}  // namespace flashgate::ptx
