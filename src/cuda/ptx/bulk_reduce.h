// Bulk reductions from shared into global memory (sm_90+): cp.reduce.async.bulk .add.f32 adds a run of
// fp32 values from shared memory into global memory in one instruction, carried out by the copy engine
// (not the issuing warp's load/store queue). Writes to the source made by ordinary stores must be fenced
// (fence_proxy_async_shared) and ordered before the issue by a barrier; the source may be written again once
// the issuing thread's bulk_wait_read has returned (and a barrier orders the new writes after it).
// Declared in every compilation pass (so that `if constexpr` code can name them); below sm_90 they trap.
#pragma once

#include <cstdint>

namespace flashgate::ptx {

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define FLASHGATE_BULK_ASM(...) asm volatile(__VA_ARGS__)
#else
#define FLASHGATE_BULK_ASM(...) __trap()
#endif

// Makes this thread's earlier shared-memory stores visible to the bulk copies (the async proxy).
__device__ __forceinline__ void fence_proxy_async_shared() {
  FLASHGATE_BULK_ASM("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// dst[0 .. bytes/4) += src[0 .. bytes/4), unordered with other adds; dst and src 16-byte aligned, bytes a
// multiple of 16. Joins this thread's current bulk group (bulk_commit closes it).
__device__ __forceinline__ void bulk_reduce_add_f32(float* dst, const float* src, uint32_t bytes) {
  [[maybe_unused]] const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(src));
  FLASHGATE_BULK_ASM("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n" ::"l"(dst),
                     "r"(s), "r"(bytes)
                     : "memory");
}

__device__ __forceinline__ void bulk_commit() { FLASHGATE_BULK_ASM("cp.async.bulk.commit_group;\n" ::: "memory"); }

// Waits until at most N of this thread's bulk groups still read their shared-memory sources.
template <int N>
__device__ __forceinline__ void bulk_wait_read() {
  FLASHGATE_BULK_ASM("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
}

// Waits until at most N of this thread's bulk groups are incomplete (their global writes done).
template <int N>
__device__ __forceinline__ void bulk_wait() {
  FLASHGATE_BULK_ASM("cp.async.bulk.wait_group %0;\n" ::"n"(N) : "memory");
}

#undef FLASHGATE_BULK_ASM

}  // namespace flashgate::ptx
