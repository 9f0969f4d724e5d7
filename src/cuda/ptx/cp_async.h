// Asynchronous global -> shared copies (sm80+): cp.async with zero-fill, commit and wait.
#pragma once

#include <cstdint>

namespace flashgate::ptx {

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Copies `src_bytes` (0..16) bytes from global to shared and zero-fills the rest of the 16; both addresses
// 16-byte aligned. src_bytes == 0 reads nothing (the global address may then be anything valid-looking).
__device__ __forceinline__ void cp_async_16(void* smem, const void* gmem, uint32_t src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(smem)), "l"(gmem), "r"(src_bytes));
}

// The same, with an L2 prefetch of the whole 128-byte line around the source: for rows shorter than a line, whose
// other part another CTA reads next (fp8 D64 in vLLM's layout, where the next kv head's 64 bytes share the line:
// 20% faster on the long rows, docs/perf-notes.md).
__device__ __forceinline__ void cp_async_16_line(void* smem, const void* gmem, uint32_t src_bytes) {
  asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16, %2;\n" ::"r"(smem_addr(smem)), "l"(gmem),
               "r"(src_bytes));
}

// All 16 bytes: without the source-size operand the copy needs no address arithmetic for the zero-fill
// (ptxas spends ~4 instructions per copy on it, even when the size is 16 at run time).
__device__ __forceinline__ void cp_async_16(void* smem, const void* gmem) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_addr(smem)), "l"(gmem));
}

// 8- and 4-byte variants (cache at all levels), for rows that are not 16-byte aligned.
__device__ __forceinline__ void cp_async_8(void* smem, const void* gmem, uint32_t src_bytes = 8) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(smem_addr(smem)), "l"(gmem), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_4(void* smem, const void* gmem, uint32_t src_bytes = 4) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_addr(smem)), "l"(gmem), "r"(src_bytes));
}
// With an L2 prefetch of the whole 128-byte line (as cp_async_16_line): per-token scales, whose 16 floats of one
// page and kv head share a line with the next kv head's.
__device__ __forceinline__ void cp_async_4_line(void* smem, const void* gmem, uint32_t src_bytes) {
  asm volatile("cp.async.ca.shared.global.L2::128B [%0], [%1], 4, %2;\n" ::"r"(smem_addr(smem)), "l"(gmem),
               "r"(src_bytes));
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }

// Waits until at most `N` committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

}  // namespace flashgate::ptx
