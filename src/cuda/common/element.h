// Element types of the kernels: conversions to and from fp32, and the ElementType -> CUDA type map.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "cuda/common/element_type.h"

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
