// Predicated vector reduction into global memory (sm_90+): red.global.add.v4.f32, i.e. four unordered fp32
// atomic adds to 16 consecutive bytes in one instruction, issued only where `pred` holds. The predicate goes
// into the PTX so that a run of them stays one branch-free block: the compiler then keeps one address for
// the run (immediate offsets) instead of rebuilding it inside a branch per reduction.
#pragma once

namespace flashgate::ptx {

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
// dst[0..3] += v where pred; dst 16-byte aligned global memory.
__device__ __forceinline__ void red_add_v4_f32(float* dst, float4 v, bool pred) {
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %5, 0;\n @p red.relaxed.gpu.global.add.v4.f32 [%0], {%1, %2, %3, %4};\n}\n" ::"l"(dst),
      "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w), "r"(static_cast<int>(pred))
      : "memory");
}
#endif

}  // namespace flashgate::ptx
