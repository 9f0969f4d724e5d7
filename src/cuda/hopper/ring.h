// Rings of shared-memory stages handed between a producer and its consumers by mbarrier pairs (full: the
// producer's copies landed; empty: the consumers are done with them). Items are numbered over a CTA's whole life:
// item b sits in stage b % kStages, and each stage's barriers complete one phase per trip around the ring.
#pragma once

#include <cstdint>

#include "cuda/ptx/tma.h"

namespace flashgate::cuda::hopper {

#if defined(__CUDACC__)
template <int kStages>
struct Ring {
  static_assert(kStages == 1 || kStages == 2 || kStages == 4, "32-bit item counts wrap consistently");
  static constexpr int kS = kStages;

  // Item b's stage, and the parity of the phase that fills (or, one trip on, frees) it.
  __device__ __forceinline__ static int stage(uint32_t b) { return static_cast<int>(b % kStages); }
  __device__ __forceinline__ static uint32_t parity(uint32_t b) { return (b / kStages) & 1; }
  // Before writing item b into its stage: wait until the consumers freed what item b - kStages left there. On
  // the first trip this is the phase before a fresh barrier's first, which counts as complete.
  __device__ __forceinline__ static void wait_free(uint64_t* empty, uint32_t b) {
    ptx::barrier_wait(empty, parity(b) ^ 1);
  }
  // A consumer warp is done reading a buffer (every lane: the warp converges before its one arrival).
  __device__ __forceinline__ static void release(uint64_t* bar) {
    __syncwarp();
    if (threadIdx.x % 32 == 0) ptx::barrier_arrive(bar);
  }
};
#endif  // __CUDACC__

}  // namespace flashgate::cuda::hopper
