// ldmatrix: four 8x8 b16 matrices from shared memory into mma fragments, plain or transposed; stmatrix (sm_90):
// fragments into shared memory.
#pragma once

#include <cstdint>

#include "cuda/ptx/cp_async.h"

namespace flashgate::ptx {

// Thread t supplies the row address (a 32-bit shared-memory byte address) for row (t % 8) of matrix (t / 8);
// r[i] receives matrix i's fragment (thread t holds row t/4, columns 2*(t%4) and +1). Callers that keep an
// address per thread and add compile-time offsets get LDSM with immediate offsets and no address arithmetic.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
// The same with each 8x8 matrix transposed (thread t holds column t/4, rows 2*(t%4) and +1).
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
// Two matrices (threads 0..15 supply addresses).
__device__ __forceinline__ void ldmatrix_x2(uint32_t (&r)[2], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n" : "=r"(r[0]), "=r"(r[1]) : "r"(addr));
}

// The reverse of ldmatrix_x4 (sm_90): r[i] (matrix i's fragment) into the rows whose addresses threads 8i..8i+7 give.
__device__ __forceinline__ void stmatrix_x4(void* row_addr, const uint32_t (&r)[4]) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1,%2,%3,%4};\n" ::"r"(smem_addr(row_addr)), "r"(r[0]),
               "r"(r[1]), "r"(r[2]), "r"(r[3])
               : "memory");
}

// Pointer forms: the row address as a generic pointer into shared memory.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* row_addr) { ldmatrix_x4(r, smem_addr(row_addr)); }
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* row_addr) {
  ldmatrix_x4_trans(r, smem_addr(row_addr));
}
__device__ __forceinline__ void ldmatrix_x2(uint32_t (&r)[2], const void* row_addr) { ldmatrix_x2(r, smem_addr(row_addr)); }
__device__ __forceinline__ void ldmatrix_x2_trans(uint32_t (&r)[2], const void* row_addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(smem_addr(row_addr)));
}

}  // namespace flashgate::ptx
