// Vector reductions into global memory (sm_90+): red.global.add.v2.f32 / .v4.f32, i.e. two or four unordered
// fp32 atomic adds to 8 or 16 consecutive bytes in one instruction. An MMA accumulator fragment holds its
// value pairs in consecutive registers, so a pair goes out as it is; four values need a lane exchange.
#pragma once

namespace flashgate::ptx {

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
// dst[0..1] += (x, y); dst 8-byte aligned global memory.
__device__ __forceinline__ void red_add_v2_f32(float* dst, float x, float y) {
  asm volatile("red.relaxed.gpu.global.add.v2.f32 [%0], {%1, %2};\n" ::"l"(dst), "f"(x), "f"(y) : "memory");
}

// The same where `pred` holds. The predicate goes into the PTX so that a run of them stays one branch-free
// block with one address (immediate offsets) instead of a branch per reduction.
__device__ __forceinline__ void red_add_v2_f32(float* dst, float x, float y, bool pred) {
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %3, 0;\n @p red.relaxed.gpu.global.add.v2.f32 [%0], {%1, %2};\n}\n" ::"l"(dst),
      "f"(x), "f"(y), "r"(static_cast<int>(pred))
      : "memory");
}

// dst[0..3] += v where pred; dst 16-byte aligned global memory.
__device__ __forceinline__ void red_add_v4_f32(float* dst, float4 v, bool pred) {
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %5, 0;\n @p red.relaxed.gpu.global.add.v4.f32 [%0], {%1, %2, %3, %4};\n}\n" ::"l"(dst),
      "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w), "r"(static_cast<int>(pred))
      : "memory");
}
#endif

}  // namespace flashgate::ptx
