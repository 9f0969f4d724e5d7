// Element types of the kernels: conversions to and from fp32, and the ElementType -> CUDA type map.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "common/o_residual.h"
#include "cuda/common/element_type.h"
#include "cuda/ptx/mma.h"

namespace flashgate::cuda {

template <class T>
__device__ __forceinline__ float to_float(T x);
template <>
__device__ __forceinline__ float to_float<float>(float x) { return x; }
template <>
__device__ __forceinline__ float to_float<__half>(__half x) { return __half2float(x); }
template <>
__device__ __forceinline__ float to_float<__nv_bfloat16>(__nv_bfloat16 x) { return __bfloat162float(x); }

template <class T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ float from_float<float>(float x) { return x; }
template <>
__device__ __forceinline__ __half from_float<__half>(float x) { return __float2half_rn(x); }
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

// The factor the backward's P carries (folded into exp2's argument) into dV's MMA operand (dV = P^T dO), undone
// when dV is stored; dS, E and the mass are made from P times the inverse. fp16 (kOn): a row whose mass the sink
// holds has every P below fp16's normal range (2^-14), where it would keep a few bits; P <= 1, so P * 2^15 stays
// below fp16's largest value. bf16 has fp32's exponent range; `kWhere` lets a kernel that never takes a sink keep
// its code (every use below folds away where the scale is off).
template <class T, bool kWhere = true>
struct PScale {
  static constexpr bool kOn = kWhere && std::is_same_v<T, __half>;
  static constexpr float kLog2 = kOn ? 15.f : 0.f;
  static constexpr float kInv = kOn ? 1.f / 32768.f : 1.f;

  // x + log2 of the factor (off: x itself; x + 0 would stay an instruction, since -0 + 0 is +0).
  static __device__ __forceinline__ float plus_log2(float x) {
    if constexpr (kOn) return x + kLog2;
    else return x;
  }
  // (dP - D) / factor from dP and D / factor, so that the scaled P times it is dS.
  static __device__ __forceinline__ float dp_minus_d(float dp, float d_over_factor) {
    if constexpr (kOn) return fmaf(dp, kInv, -d_over_factor);
    else return dp - d_over_factor;
  }
};

// o's rounding residual (common/o_residual.h) in T's format; fp32 keeps none (its codes are 0).
template <class T>
inline constexpr bool kKeepsResidual = std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>;
template <class T>
inline constexpr residual::Format kResidualFormat = std::is_same_v<T, __half> ? residual::kF16 : residual::kBf16;

template <class T>
__device__ __forceinline__ int8_t residual_code(float exact, float rounded) {
  if constexpr (kKeepsResidual<T>) return residual::encode(exact, rounded, kResidualFormat<T>);
  else return 0;
}
template <class T>
__device__ __forceinline__ float residual_value(int8_t code, float rounded) {
  if constexpr (kKeepsResidual<T>) return residual::decode(code, rounded, kResidualFormat<T>);
  else return 0.f;
}

// The codes of two adjacent output values (`exact` fp32, `rounded` the pair as stored: T's two 16-bit values) as one
// 16-bit pair, the first in the low byte. bf16 takes a shorter route to residual::encode's result: a value's fp32
// bits are its bf16 bits shifted up, and with a shift of 8 a code is byte 1 of d + 128 once that lies in
// [-127 * 256, 127 * 256 + 255], which a max and the saturating 16-bit pack ensure (4.5 instructions a code against
// 6.5: the consumers' epilogue is on the Hopper forward's critical path).
template <class T>
__device__ __forceinline__ uint16_t residual_code_pair(float2 exact, uint32_t rounded) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    const auto biased = [](float x, uint32_t rounded_bits) {
      const int d = static_cast<int>(residual::bits_of(x) - rounded_bits + 128u);
      return d > -127 * 256 ? d : -127 * 256;
    };
    uint32_t both;  // the second's saturated to 16 bits in the high half, the first's in the low one
    asm("cvt.pack.sat.s16.s32 %0, %1, %2;\n"
        : "=r"(both)
        : "r"(biased(exact.y, rounded & 0xFFFF0000u)), "r"(biased(exact.x, rounded << 16)));
    return static_cast<uint16_t>(__byte_perm(both, 0u, 0x31));
  } else {
    const float2 r = ptx::unpack2<T>(rounded);
    const int8_t c0 = residual_code<T>(exact.x, r.x), c1 = residual_code<T>(exact.y, r.y);
    return static_cast<uint16_t>(static_cast<uint8_t>(c0) | static_cast<uint8_t>(c1) << 8);
  }
}

// Stores the residual codes of two adjacent output values (`exact` fp32, `rounded` the pair as stored) at dst[0..1]:
// one 16-bit store where dst is 2-byte aligned (`pair`), else `n` (1 or 2) byte stores.
template <class T>
__device__ __forceinline__ void store_residual_pair(int8_t* dst, float2 exact, uint32_t rounded, bool pair, int n = 2) {
  const uint16_t codes = residual_code_pair<T>(exact, rounded);
  if (pair && n == 2) {
    *reinterpret_cast<uint16_t*>(dst) = codes;
  } else {
    dst[0] = static_cast<int8_t>(codes & 0xFFu);
    if (n == 2) dst[1] = static_cast<int8_t>(codes >> 8);
  }
}

// A value of a float tensor whose dtype is only known at run time (gates may come as fp32, fp16 or bf16).
__device__ __forceinline__ float load_as_float(const void* base, int64_t index, ElementType dtype) {
  switch (dtype) {
    case ElementType::f16: return __half2float(static_cast<const __half*>(base)[index]);
    case ElementType::bf16: return __bfloat162float(static_cast<const __nv_bfloat16*>(base)[index]);
    default: return static_cast<const float*>(base)[index];
  }
}

// Calls f(T{}) with T the CUDA element type of `dtype` (f16, bf16 or f32).
template <class F>
decltype(auto) with_element_type(ElementType dtype, F&& f) {
  switch (dtype) {
    case ElementType::f16: return f(__half{});
    case ElementType::bf16: return f(__nv_bfloat16{});
    default: return f(float{});
  }
}

}  // namespace flashgate::cuda
