// The output's rounding residual (ForwardArgs::o_residual), one rule for the CPU and CUDA backends.
//
// Why: the backward's dS = P (dP - D) cancels where one key holds most of a row's mass, down to the size of D's
// error, and D = round(o)·do errs by o's rounding (2^-9 relative in bf16): more than SPEC §7 allows on such rows.
// The forward keeps, per element, r = o - round(o) (o its fp32 value) as an int8 in units of 2^-8 of round(o)'s
// ulp: |r| <= half an ulp = 128 units, so codes saturate at +-127 within a unit of a tie (then off by up to one). The backward's D then sees o to
// 8 more bits than its dtype holds, below the error of the fp32 sums that make o.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define FG_RESIDUAL_FN __host__ __device__ __forceinline__
#else
#define FG_RESIDUAL_FN inline
#endif

namespace flashgate::residual {

// A storage format's significand bits after the leading one, and its smallest normal exponent (whose ulp its
// subnormals share).
struct Format {
  int mantissa_bits;
  int min_exponent;
};
inline constexpr Format kBf16{7, -126};
inline constexpr Format kF16{10, -14};

FG_RESIDUAL_FN uint32_t bits_of(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  uint32_t b;
  std::memcpy(&b, &x, 4);
  return b;
#endif
}

FG_RESIDUAL_FN float pow2(int e) {  // 2^e, e in -126..127
  const uint32_t b = static_cast<uint32_t>(e + 127) << 23;
#if defined(__CUDA_ARCH__)
  return __uint_as_float(b);
#else
  float f;
  std::memcpy(&f, &b, 4);
  return f;
#endif
}

// log2 of a code's unit next to the representable value `rounded`: its ulp's exponent minus 8. Below -126 (bf16
// values under 2^-111) the residual is not kept: nothing D sums can see it.
FG_RESIDUAL_FN int unit_exponent(float rounded, Format f) {
  int e = static_cast<int>((bits_of(rounded) >> 23) & 0xFF) - 127;
  if (e < f.min_exponent) e = f.min_exponent;
  return e - f.mantissa_bits - 8;
}

// The code of `exact` (fp32) stored as `rounded` (its nearest value of the format, as a float).
FG_RESIDUAL_FN int8_t encode(float exact, float rounded, Format f) {
  const int k = unit_exponent(rounded, f);
  if (k < -126) return 0;
  float c = (exact - rounded) * pow2(-k);  // exact: the two are within an ulp of each other
  c = c < -127.f ? -127.f : (c > 127.f ? 127.f : c);
#if defined(__CUDA_ARCH__)
  return static_cast<int8_t>(__float2int_rn(c));
#else
  return static_cast<int8_t>(std::lrint(c));
#endif
}

// The residual a code stands for next to `rounded`.
FG_RESIDUAL_FN float decode(int8_t code, float rounded, Format f) {
  const int k = unit_exponent(rounded, f);
  return k < -126 ? 0.f : static_cast<float>(code) * pow2(k);
}

}  // namespace flashgate::residual
