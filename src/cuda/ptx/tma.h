// Bulk tensor copies (TMA) and the mbarriers they complete on, sm_90. Thin verbs over CCCL's cuda::ptx, which
// has these instructions; the tensor maps themselves are encoded on the host (cuda/host/tensor_map.h) and reach
// a kernel as __grid_constant__ parameters.
#pragma once

#include <cuda/ptx>

#include <cstdint>

namespace flashgate::ptx {

// ---- mbarriers -------------------------------------------------------------------------------------------------

// One thread initialises a barrier that completes a phase when `arrivals` threads have arrived (and every
// expected transaction byte has landed); fence_barrier_init makes the initialisation visible to the copy engine.
__device__ __forceinline__ void barrier_init(uint64_t* bar, int arrivals) {
  ::cuda::ptx::mbarrier_init(bar, static_cast<uint32_t>(arrivals));
}
__device__ __forceinline__ void fence_barrier_init() { ::cuda::ptx::fence_mbarrier_init(::cuda::ptx::sem_release, ::cuda::ptx::scope_cluster); }

// Arrives and announces `bytes` that copies will deliver to this phase (the producer, once per stage).
__device__ __forceinline__ void barrier_arrive_expect(uint64_t* bar, uint32_t bytes) {
  ::cuda::ptx::mbarrier_arrive_expect_tx(::cuda::ptx::sem_release, ::cuda::ptx::scope_cta, ::cuda::ptx::space_shared, bar,
                                       bytes);
}
// A plain arrival (a consumer releasing a stage).
__device__ __forceinline__ void barrier_arrive(uint64_t* bar) { (void)::cuda::ptx::mbarrier_arrive(bar); }

// Waits for the phase of parity `phase` (0, 1, 0, ... as the ring wraps) to complete.
__device__ __forceinline__ void barrier_wait(uint64_t* bar, uint32_t phase) {
  while (!::cuda::ptx::mbarrier_try_wait_parity(bar, phase)) {
  }
}

// ---- copies ---------------------------------------------------------------------------------------------------

// Copies the box at `coords` (innermost first, 2 to 4 of them) of `map` into shared memory `dst`; completes on
// `bar` (whose phase must expect the box's bytes).
template <int kRank>
__device__ __forceinline__ void tma_load(void* dst, const void* map, const int32_t (&coords)[kRank], uint64_t* bar) {
  static_assert(kRank >= 2 && kRank <= 4, "tensor map rank");
  ::cuda::ptx::cp_async_bulk_tensor(::cuda::ptx::space_cluster, ::cuda::ptx::space_global, dst, map, coords, bar);
}

// Shared memory written by ordinary stores becomes visible to the copy engine and the tensor cores (async proxy):
// every writing thread fences before the barrier that hands the buffer over.
__device__ __forceinline__ void fence_async_shared() { ::cuda::ptx::fence_proxy_async(::cuda::ptx::space_shared); }

}  // namespace flashgate::ptx
