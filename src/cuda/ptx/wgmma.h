// Warpgroup MMA (sm_90a): wgmma.mma_async with fp32 accumulators, bf16/f16 operands, A from shared memory or
// from registers, B from shared memory; its fences; and the shared-memory matrix descriptors of the layout the
// bulk tensor copies write with 128-byte swizzling.
//
// Operand layout (PTX ISA "Shared Memory Matrix Layout", 128B swizzle): a tile is stored as column blocks of 64
// 16-bit elements (128 bytes a row, the TMA box width); a block holds its rows one after the other, and inside
// each group of 8 rows (1024 bytes) the 16-byte chunk c of row r sits at chunk c ^ (r % 8). Block bases must be
// 1024-byte aligned. Such a tile is
//   K-major (rows are M or N, columns are K: Q, K):  k-step s (16 columns) starts 32 * (s % 4) bytes into block
//     s / 4; 8-row groups are 1024 bytes apart (the stride byte offset); the leading byte offset is unused.
//   MN-major (rows are K, columns are N: V as P V's B): k-step s starts at row 16 s (2048 bytes per step);
//     8-row groups are 1024 bytes apart (stride byte offset), 64-column blocks `block_bytes` apart (leading
//     byte offset), and the instruction reads it transposed (imm-trans-b 1).
//
// Accumulator layout of m64nN (fp32): warp w of the warpgroup owns rows 16w..16w+15; lane (g = lane / 4,
// c = lane % 4) holds d[4j + 0..1] = (row g, columns 8j + 2c, +1) and d[4j + 2..3] = (row g + 8, same columns).
// An A operand in registers (m64nNk16) takes the same places as one 16-column slice of an accumulator:
// a[0] = (g, 2c..), a[1] = (g + 8, 2c..), a[2] = (g, 2c + 8..), a[3] = (g + 8, 2c + 8..), two 16-bit values each.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "cuda/ptx/mma.h"

namespace flashgate::ptx {

// ---- descriptors ---------------------------------------------------------------------------------------------

// The 64-bit matrix descriptor: start address, leading / stride byte offsets (all >> 4), 128-byte swizzle.
__device__ __forceinline__ uint64_t smem_descriptor(const void* smem, uint32_t leading_bytes, uint32_t stride_bytes) {
  const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  uint64_t d = (addr & 0x3FFFFu) >> 4;
  d |= static_cast<uint64_t>((leading_bytes & 0x3FFFFu) >> 4) << 16;
  d |= static_cast<uint64_t>((stride_bytes & 0x3FFFFu) >> 4) << 32;
  d |= uint64_t{1} << 62;  // 128-byte swizzle
  return d;
}

// The first 1024-byte aligned byte of dynamic shared memory `raw` (a swizzle block's alignment), reached by pointer
// arithmetic on `raw` so that the compiler still knows it is shared memory (and loads from it stay LDS).
__device__ __forceinline__ unsigned char* swizzle_aligned(unsigned char* raw) {
  return raw + ((1024u - (static_cast<uint32_t>(__cvta_generic_to_shared(raw)) & 1023u)) & 1023u);
}

// Bytes of one 64-column block of a tile with `rows` rows (128 bytes a row).
__host__ __device__ constexpr uint32_t swizzle_block_bytes(int rows) { return static_cast<uint32_t>(rows) * 128u; }

// The byte offset of 16-byte chunk `chunk` (columns 8 chunk..) of row `row` inside a 64-column block of 128-byte rows
// in that swizzle: the row's chunks are XOR-permuted by the row's place in its 8-row group (where ordinary stores put
// an operand tile). The caller adds the bytes within the chunk.
__host__ __device__ constexpr int swizzled_chunk(int row, int chunk) {
  return row * 128 + ((chunk ^ (row & 7)) << 4);
}

// The descriptor of k-step `step` (16 columns) of a K-major tile of `rows` rows.
__device__ __forceinline__ uint64_t k_major_descriptor(const void* tile, int rows, int step) {
  const char* base = static_cast<const char*>(tile) + (step / 4) * swizzle_block_bytes(rows) + (step % 4) * 32;
  return smem_descriptor(base, 16, 1024);
}

// Descriptor `d` moved on by `bytes` (a multiple of 16). The start address field (bits 0-13, in 16-byte units)
// cannot carry, shared memory ending below 256 KB, so only the low word changes: one 32-bit add, where a descriptor
// made from its address again costs a chain of uniform shifts and masks in front of its wgmma.
__device__ __forceinline__ uint64_t descriptor_plus(uint64_t d, uint32_t bytes) {
  return (d & ~uint64_t{0xFFFFFFFFu}) | (static_cast<uint32_t>(d) + (bytes >> 4));
}

// k_major_descriptor(tile, rows, step) from k_major_descriptor(tile, rows, 0).
__device__ __forceinline__ uint64_t descriptor_step(uint64_t first, int rows, int step) {
  return descriptor_plus(first, (step / 4) * swizzle_block_bytes(rows) + (step % 4) * 32);
}

// A copy of `x` the compiler cannot see through: values made from it are not hoisted out of loops.
__device__ __forceinline__ uint64_t opaque(uint64_t x) {
  asm volatile("" : "+l"(x));
  return x;
}

// The descriptor of k-step `step` (16 rows) of an MN-major tile of `rows` rows (N in 64-column blocks).
__device__ __forceinline__ uint64_t mn_major_descriptor(const void* tile, int rows, int step) {
  return smem_descriptor(static_cast<const char*>(tile) + step * 2048, swizzle_block_bytes(rows), 1024);
}

// mn_major_descriptor(tile, rows, step) from mn_major_descriptor(tile, rows, 0).
__device__ __forceinline__ uint64_t mn_major_step(uint64_t first, int step) { return descriptor_plus(first, step * 2048); }

// ---- ordering -------------------------------------------------------------------------------------------------

// Before the first wgmma that reads registers (accumulators, an A operand) written by ordinary instructions.
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
// Closes the group of wgmmas issued since the last commit.
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
// Waits until at most `kPending` committed groups are still running.
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}
// Keeps the compiler from moving accesses of an accumulator across a wgmma that is still running.
template <int kN>
__device__ __forceinline__ void wgmma_hold(float (&d)[kN]) {
#pragma unroll
  for (int i = 0; i < kN; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// An accumulator of m64nN, packed: the A operands of N / 16 k-steps (the places are the same, two 16-bit values a
// register). Scores made by one wgmma feed the next from registers so (P for P V, P^T for dV).
template <class T, int kN>
__device__ __forceinline__ void accumulator_to_operand(const float (&acc)[kN], uint32_t (&a)[kN / 8][4]) {
#pragma unroll
  for (int t = 0; t < kN / 8; ++t)
#pragma unroll
    for (int r = 0; r < 4; ++r) a[t][r] = pack2<T>(acc[8 * t + 2 * r], acc[8 * t + 2 * r + 1]);
}

// ---- the MMAs ----------------------------------------------------------------------------------------------------
// Wgmma<T, N, kTransB>::ss(d, a_desc, b_desc, accumulate): d[N/2] (+)= A[64 x 16] * B[16 x N], both from shared
// memory; ::rs(d, a, b_desc, accumulate): A from registers (a[4], the layout at the top). `accumulate` false
// gives d = A * B. kTransB 1: B is MN-major; ::ss<1> reads A MN-major (M contiguous, the MN-major descriptor
// with k-steps along the rows). Shapes: wgmma_shapes.h (generated by wgmma_generate.py).
template <class T, int kN, int kTransB>
struct Wgmma;

}  // namespace flashgate::ptx

#include "cuda/ptx/wgmma_shapes.h"
