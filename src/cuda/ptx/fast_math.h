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

}  // namespace flashgate::ptx
