// The Hopper forward's interface (host-includable): its params, its tile and its launcher; the kernel is
// forward_kernel.cuh.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <cstdint>

#include "cuda/common/attention_params.h"
#include "cuda/common/tile_scheduler.h"

struct CUstream_st;

namespace flashgate::cuda::hopper {

// What the forward kernel receives: the shared params and the tensor maps of q, k and v ([B][heads][T][D]
// viewed innermost first: D, T, heads, B; boxes of 64 dims x 128 rows).
struct ForwardParams {
  AttentionParams a;
  CUtensorMap q_map, k_map, v_map;
};

template <int kD>
struct ForwardTile {
  static constexpr int BM = 128, BN = 128, kStages = 2, kBlocks = kD / 64;
  static constexpr int kThreads = 384;
  static constexpr uint32_t kQBytes = BM * kD * 2, kKBytes = BN * kD * 2, kVBytes = BN * kD * 2;
  static constexpr size_t smem_bytes() { return kQBytes + kStages * (kKBytes + kVBytes) + 1024; }
  static_assert(kD == 64 || kD == 128, "head dims of the Hopper forward");
};

// Launches the forward of head dim kD (K == V == kD) over `sched` (tile_rows 128). Defined per (T, kD) in
// forward_instances.cu.
template <class T, int kD>
void launch_forward(const ForwardParams& p, const TileSchedule& sched, CUstream_st* stream);

}  // namespace flashgate::cuda::hopper
