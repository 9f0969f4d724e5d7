// fp8 e4m3 pairs to f16 pairs. Every e4m3 value (subnormals included) is an f16 value, so the conversion is
// exact. sm_89+ has it as one instruction (cvt.rn.f16x2.e4m3x2); older devices take a bit trick: the e4m3
// bits placed into an f16 make x * 2^-8 (the exponent biases differ by 8), and one f16x2 multiply by 2^8
// restores x. NaN (0x7f/0xff) is only exact on the instruction path; the serving kernels never convert a
// byte they did not load (unused slots are zero-filled).
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

namespace flashgate::ptx {

namespace detail {
// byte_perm selectors of the emulated path: bytes 0, 1 (lo pair) or 2, 3 (hi pair) into bits 8-15 of each half.
constexpr uint32_t kLoPairSelector = 0x1404u, kHiPairSelector = 0x3424u;

// e4m3 bytes `sel` of w (a byte_perm selector placing them in bits 8-15 of each half) as f16x2.
__device__ __forceinline__ uint32_t e4m3x2_to_f16x2_emulated(uint32_t w, uint32_t sel) {
  const uint32_t x = __byte_perm(w, 0u, sel);
  const uint32_t scaled = (x & 0x80008000u) | ((x >> 1) & 0x3F803F80u);  // x * 2^-8, exact
  __half2 h = *reinterpret_cast<const __half2*>(&scaled);
  h = __hmul2(h, __half2half2(__ushort_as_half(0x5C00)));  // * 2^8
  return *reinterpret_cast<uint32_t*>(&h);
}
}  // namespace detail

// Bytes 0 (low half) and 1 (high half) of w as f16x2.
__device__ __forceinline__ uint32_t e4m3x2_lo_to_f16x2(uint32_t w) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  uint32_t d;
  asm("{\n .reg .b16 lo, hi;\n mov.b32 {lo, hi}, %1;\n cvt.rn.f16x2.e4m3x2 %0, lo;\n}\n" : "=r"(d) : "r"(w));
  return d;
#else
  return detail::e4m3x2_to_f16x2_emulated(w, detail::kLoPairSelector);
#endif
}

// Bytes 2 (low half) and 3 (high half) of w as f16x2.
__device__ __forceinline__ uint32_t e4m3x2_hi_to_f16x2(uint32_t w) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  uint32_t d;
  asm("{\n .reg .b16 lo, hi;\n mov.b32 {lo, hi}, %1;\n cvt.rn.f16x2.e4m3x2 %0, hi;\n}\n" : "=r"(d) : "r"(w));
  return d;
#else
  return detail::e4m3x2_to_f16x2_emulated(w, detail::kHiPairSelector);
#endif
}

}  // namespace flashgate::ptx
