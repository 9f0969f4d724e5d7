// The output's rounding residual (ForwardArgs::o_residual), one rule for the CPU and CUDA backends.
//
// Why: the backward's dS = P (dP - D) cancels where one key holds most of a row's mass, down to the size of D's
// error, and D = round(o)·do errs by o's rounding (2^-9 relative in bf16): more than SPEC §7 allows on such rows.
// The forward keeps, per element, r = o - round(o) (o its fp32 value) as an int8 in units of 2^-8 of o's ulp:
// |r| <= half an ulp = 128 units, so codes saturate at +-127 within a unit of a tie (then off by up to one). fp16
// outputs below fp16's normal range (2^-14) keep less: their ulp is wider than the codes reach. The backward's D
// then sees o to 8 more bits than its dtype holds, below the error of the fp32 sums that make o.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define FG_RESIDUAL_FN __host__ __device__ __forceinline__
#else
#define FG_RESIDUAL_FN inline
#endif

namespace flashgate::residual {

// A storage format: its significand bits after the leading one.
struct Format {
  int mantissa_bits;
};
inline constexpr Format kBf16{7};
inline constexpr Format kF16{10};

// A value's bits as another type of the same size (C++17 has no std::bit_cast; memcpy is one on host and device).
template <class To, class From>
FG_RESIDUAL_FN To bit_cast(From x) {
  static_assert(sizeof(To) == sizeof(From), "bit_cast keeps the size");
  To y;
  std::memcpy(&y, &x, sizeof y);
  return y;
}

FG_RESIDUAL_FN uint32_t bits_of(float x) { return bit_cast<uint32_t>(x); }
FG_RESIDUAL_FN float pow2(int e) { return bit_cast<float>(static_cast<uint32_t>(e + 127) << 23); }  // e in -126..127

// A code is d = bits(exact) - bits(rounded), the magnitudes' difference counted in fp32 ulps of exact's binade (the
// bit patterns of one sign count fp32 ulps, across binades too), in units of 2^-8 of the format's ulp there
// (2^(23 - mantissa_bits - 8) fp32 ulps), rounded to nearest and clamped to -127..127: a few integer operations
// on bits the kernels hold anyway. Its value takes rounded's sign.
FG_RESIDUAL_FN int8_t encode(float exact, float rounded, Format f) {
  const int shift = 15 - f.mantissa_bits;  // 8 (bf16), 5 (fp16)
  const int d = static_cast<int>(bits_of(exact) - bits_of(rounded));
  const int c = (d + (1 << (shift - 1))) >> shift;
  return static_cast<int8_t>(c < -127 ? -127 : (c > 127 ? 127 : c));
}

// log2 of a code's unit: 2^-8 of the format's ulp in exact's binade, which is rounded's except where exact was
// rounded up onto a power of two (the code is then negative), one binade lower.
FG_RESIDUAL_FN int unit_exponent(int8_t code, float rounded, Format f) {
  const uint32_t b = bits_of(rounded);
  int e = static_cast<int>((b >> 23) & 0xFF) - 127;
  const uint32_t mantissa = (b >> (23 - f.mantissa_bits)) & ((1u << f.mantissa_bits) - 1);
  if (mantissa == 0 && code < 0) e -= 1;
  return e - f.mantissa_bits - 8;
}

// The residual a code stands for next to `rounded`; 0 below fp32's normal range (values under 2^-111 in bf16,
// which nothing D sums can see).
FG_RESIDUAL_FN float decode(int8_t code, float rounded, Format f) {
  const int k = unit_exponent(code, rounded, f);
  if (k < -126) return 0.f;
  const float v = static_cast<float>(code) * pow2(k);
  return (bits_of(rounded) >> 31) ? -v : v;
}

}  // namespace flashgate::residual
