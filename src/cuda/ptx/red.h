// Vector reductions into global memory (sm_90+): red.global.add.v4.f32, four unordered fp32 atomic adds to
// 16 consecutive bytes in one instruction. An MMA accumulator fragment holds its four values in
// consecutive registers, so a fragment goes out as it is (dq_acc's layout, backward_params.h).
#pragma once

namespace flashgate::ptx {

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
// dst[0..3] += v; dst 16-byte aligned global memory.
__device__ __forceinline__ void red_add_v4_f32(float* dst, float4 v) {
  asm volatile("red.relaxed.gpu.global.add.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"l"(dst), "f"(v.x), "f"(v.y), "f"(v.z),
               "f"(v.w)
               : "memory");
}
#endif

}  // namespace flashgate::ptx
