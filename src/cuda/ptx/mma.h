// mma.sync m16n8k16 with fp32 accumulation (sm80+), fp16 or bf16 operands, and movmatrix (an 8x8 16-bit
// transpose between lanes).
//
// Fragment layout (PTX ISA "Matrix Fragments for mma.m16n8k16"), with g = lane / 4 and c = lane % 4:
//   A (16x16, row-major) a[0]: (g, 2c..2c+1)  a[1]: (g+8, 2c..)  a[2]: (g, 2c+8..)  a[3]: (g+8, 2c+8..)
//   B (16x8, "col")      b[0]: (k=2c..2c+1, n=g)  b[1]: (k=2c+8.., n=g)
//   C/D (16x8, fp32)     d[0],d[1]: (g, 2c..2c+1)  d[2],d[3]: (g+8, 2c..2c+1)
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace flashgate::ptx {

// d = a * b + d for one 16x8x16 tile.
template <class T>
__device__ __forceinline__ void mma_16816(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]);

template <>
__device__ __forceinline__ void mma_16816<__half>(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

template <>
__device__ __forceinline__ void mma_16816<__nv_bfloat16>(float (&d)[4], const uint32_t (&a)[4],
                                                         const uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// Two floats packed into one b32 register of two 16-bit elements (lo in the low half).
template <class T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi);

template <>
__device__ __forceinline__ uint32_t pack2<__half>(float lo, float hi) {
  __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&h);
}
template <>
__device__ __forceinline__ uint32_t pack2<__nv_bfloat16>(float lo, float hi) {
  __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&h);
}

// The transpose of an 8x8 matrix of 16-bit words held one register per lane, lane (g, c) holding row g,
// columns 2c..2c+1 (the layout of one 8x8 quarter of an mma fragment): the result holds row g of the
// transpose, i.e. column g, rows 2c..2c+1 of the input. Turns an accumulator's (g, 2c..) pair into a B
// operand's (k=2c.., n=g) one.
__device__ __forceinline__ uint32_t movmatrix_trans(uint32_t x) {
  uint32_t y;
  asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(y) : "r"(x));
  return y;
}

// The two elements of a packed register as floats (exact).
template <class T>
__device__ __forceinline__ float2 unpack2(uint32_t r);

template <>
__device__ __forceinline__ float2 unpack2<__half>(uint32_t r) {
  return __half22float2(*reinterpret_cast<const __half2*>(&r));
}
template <>
__device__ __forceinline__ float2 unpack2<__nv_bfloat16>(uint32_t r) {
  return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&r));
}

}  // namespace flashgate::ptx
