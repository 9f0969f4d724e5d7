// Fast transcendental approximations the softmax needs, as single PTX instructions.
#pragma once

namespace flashgate::ptx {

// 2^x with MUFU.EX2, flushing subnormal results to zero (ex2.approx.ftz: ~2 ulp). exp2f without fast-math
// adds a denormal fix-up around the same instruction; softmax probabilities below 2^-126 are zero anyway.
// ex2(-inf) = +0, so masked scores need no special case.
__device__ __forceinline__ float exp2_ftz(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// 2^x on the FP32 pipe instead of MUFU, for the softmax's x <= 0: x = n + f with n = round(x) (by the 1.5 * 2^23
// shift, so n lands in the low bits of the sum) and f in [-0.5, 0.5]; 2^f by a degree-4 polynomial (fitted for
// relative error, under 3e-6 in fp32), 2^n added to its exponent. Below -125, -inf included, it gives 0, as
// exp2_ftz nearly does (masked scores and empty rows must sum to exactly 0). A softmax sends a share of its
// exponentials here when MUFU (16 a cycle per SM, against 128 FMAs) would bound it.
__device__ __forceinline__ float exp2_fma(float x) {
  constexpr float kShift = 12582912.f;  // 1.5 * 2^23: adding it rounds to an integer
  const float r = fmaxf(x, -125.f);
  const float shifted = r + kShift;
  const float f = r - (shifted - kShift);
  float p = fmaf(0.009570113383233547f, f, 0.05591786280274391f);
  p = fmaf(p, f, 0.240247443318367f);
  p = fmaf(p, f, 0.6931217908859253f);
  p = fmaf(p, f, 0.9999992847442627f);
  const int n = __float_as_int(shifted) - __float_as_int(kShift);
  const float y = __int_as_float(__float_as_int(p) + static_cast<int>(static_cast<unsigned>(n) << 23));
  return x < -125.f ? 0.f : y;
}

}  // namespace flashgate::ptx
