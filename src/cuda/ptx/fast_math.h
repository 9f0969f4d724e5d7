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

// 2^x on the FMA and integer pipes, for kernels bound by MUFU's rate (16 a cycle an SM against 128 FMAs): x splits
// into j + f with j = round(x) (the 1.5 * 2^23 shift) and f in [-0.5, 0.5]; a cubic gives 2^f (relative error
// 7.5e-5, below bf16's and fp16's rounding of P) and j goes into the exponent by an integer add. x is clamped at
// -126, so scores of -inf give 2^-126 instead of 0: harmless beside a row sum of at least 1, and a row that saw
// no score at all is told by its max (finish_row), not by its sum.
__device__ __forceinline__ float exp2_fma(float x) {
  constexpr float kShift = 12582912.f;  // 1.5 * 2^23: adding it rounds to an integer in the low mantissa bits
  x = fmaxf(x, -126.f);
  const float t = x + kShift;
  const float f = x - (t - kShift);
  float p = fmaf(0x1.c3f6e2p-5f, f, 0x1.f0ddf0p-3f);
  p = fmaf(p, f, 0x1.62f31ap-1f);
  p = fmaf(p, f, 0x1.fff694p-1f);
  return __int_as_float(__float_as_int(p) + (__float_as_int(t) << 23));
}

}  // namespace flashgate::ptx
