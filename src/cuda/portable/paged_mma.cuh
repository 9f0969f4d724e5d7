// Host side of one mma instantiation: shared-memory shape, occupancy and launch (paged_launch.h), included
// by the paged_mma_<kind>.cu files that instantiate the head-dim lists.
#pragma once

#include <cuda_runtime.h>

#include <atomic>

#include "cuda/common/cuda_check.h"
#include "cuda/portable/paged_kernel.cuh"
#include "cuda/portable/paged_launch.h"

namespace flashgate::cuda {

namespace paged_detail {

constexpr int kMaxDevices = 64;

// Raises a kernel's dynamic shared memory limit to `bytes` on `device` once (the attribute is per device
// context; raising it again costs a driver call on every launch otherwise).
template <class Kernel>
void ensure_smem_limit(Kernel kernel, int bytes, int device, std::atomic<int> (&granted)[kMaxDevices]) {
  if (device < 0 || device >= kMaxDevices) device = 0;
  if (granted[device].load(std::memory_order_relaxed) >= bytes) return;
  FLASHGATE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  granted[device].store(bytes, std::memory_order_relaxed);
}

}  // namespace paged_detail

template <CacheKind C, int KP, int VP, int ROWS>
struct PagedMmaState {
  static inline std::atomic<int> smem_granted[paged_detail::kMaxDevices] = {};
  static inline std::atomic<int> occupancy[paged_detail::kMaxDevices][5] = {};  // by stage count; 0: unknown
};

template <CacheKind C, int KP, int VP, int ROWS>
PagedKernelShape PagedMma<C, KP, VP, ROWS>::shape() {
  using Tile = PagedTile<C, KP, VP, ROWS>;
  PagedKernelShape s;
  s.stage_bytes = Tile::kStageBytes;
  s.fixed_bytes = Tile::kFixedBytes;
  s.reduce_bytes = Tile::kReduceBytes;
  s.keys_per_stage = Tile::KS;
  s.heads_in_turn = Tile::kHeadsInTurn;
  s.target_ctas_per_sm = Tile::kMinBlocksPerSM;
  s.shallow_ring = Tile::kShallowRing;
  s.split_ctas_per_sm = Tile::kSplitCtasPerSM;
  return s;
}

template <CacheKind C, int KP, int VP, int ROWS>
int PagedMma<C, KP, VP, ROWS>::occupancy(int stages, int device) {
  using Tile = PagedTile<C, KP, VP, ROWS>;
  using State = PagedMmaState<C, KP, VP, ROWS>;
  const int slot = device >= 0 && device < paged_detail::kMaxDevices ? device : 0;
  const int depth = stages < 0 ? 0 : (stages > 4 ? 4 : stages);
  if (const int known = State::occupancy[slot][depth].load(std::memory_order_relaxed)) return known;
  const int bytes = Tile::smem_bytes(stages);
  paged_detail::ensure_smem_limit(paged_mma_kernel<Tile>, bytes, device, State::smem_granted);
  int blocks = 0;
  FLASHGATE_CUDA_CHECK(
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, paged_mma_kernel<Tile>, Tile::kThreads, bytes));
  if (blocks > 0) State::occupancy[slot][depth].store(blocks, std::memory_order_relaxed);
  return blocks;
}

template <CacheKind C, int KP, int VP, int ROWS>
void PagedMma<C, KP, VP, ROWS>::launch(const ServingParams& p, int stages, CUstream_st* stream) {
  using Tile = PagedTile<C, KP, VP, ROWS>;
  const int bytes = Tile::smem_bytes(stages);
  int device = 0;
  FLASHGATE_CUDA_CHECK(cudaGetDevice(&device));
  paged_detail::ensure_smem_limit(paged_mma_kernel<Tile>, bytes, device, PagedMmaState<C, KP, VP, ROWS>::smem_granted);
  const int head_groups = (p.H + p.heads_per_cta - 1) / p.heads_per_cta;
  const dim3 grid(static_cast<unsigned>(p.row_blocks), static_cast<unsigned>(head_groups),
                  static_cast<unsigned>(p.num_splits));
  paged_mma_kernel<Tile><<<grid, Tile::kThreads, bytes, stream>>>(p, stages);
  FLASHGATE_CHECK_LAUNCH("paged_mma_kernel");
}

}  // namespace flashgate::cuda

// Explicit instantiation of one (kind, KP, VP, rows) entry of the lists in paged_launch.h.
#define FLASHGATE_PAGED_INSTANTIATE(kind, kp, vp, rows) \
  template struct flashgate::cuda::PagedMma<flashgate::cuda::CacheKind::kind, kp, vp, rows>;
