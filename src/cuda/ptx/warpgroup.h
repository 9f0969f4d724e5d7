// Warp specialisation on sm_90a: register reallocation between warpgroups and named barriers.
#pragma once

#include <cstdint>

namespace flashgate::ptx {

// setmaxnreg: a warpgroup gives registers back (dec) or takes them (inc) so producers run lean and consumers
// hold their accumulators. Every warp of the warpgroup must execute it; kRegs is a multiple of 8 in 24..256.
// It takes effect only when the kernel has a register cap at entry (__launch_bounds__(threads, 1)).
template <int kRegs>
__device__ __forceinline__ void setmaxnreg_dec() {
  static_assert(kRegs % 8 == 0 && kRegs >= 24 && kRegs <= 256, "setmaxnreg count");
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}
template <int kRegs>
__device__ __forceinline__ void setmaxnreg_inc() {
  static_assert(kRegs % 8 == 0 && kRegs >= 24 && kRegs <= 256, "setmaxnreg count");
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}

// Named barriers (ids 1..15; 0 is __syncthreads): `threads` (a multiple of 32) arrive, the syncing ones wait.
// Two consumer warpgroups hand each other turns with them (ping-pong) without stopping the producer.
__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_barrier_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// The same for warps that reach the barrier from different instructions (two warpgroups that run code of their
// own): barrier.sync and barrier.arrive without .aligned, which bar.sync and bar.arrive imply.
__device__ __forceinline__ void named_barrier_sync_any(int id, int threads) {
  asm volatile("barrier.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_barrier_arrive_any(int id, int threads) {
  asm volatile("barrier.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// The warpgroup of this thread (128 threads) and its rank inside it, uniform per warp.
__device__ __forceinline__ int warpgroup_index() { return __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x) / 128, 0); }
__device__ __forceinline__ int warpgroup_thread() { return static_cast<int>(threadIdx.x) % 128; }

// One lane of the warp, chosen by the hardware (elect.sync): the lane that issues a TMA copy or an arrive.
__device__ __forceinline__ bool elect_one() {
  uint32_t pred = 0;
  asm volatile(
      "{\n.reg .b32 lane;\n.reg .pred p;\nelect.sync lane|p, 0xffffffff;\nselp.u32 %0, 1, 0, p;\n}\n"
      : "=r"(pred));
  return pred != 0;
}

}  // namespace flashgate::ptx
