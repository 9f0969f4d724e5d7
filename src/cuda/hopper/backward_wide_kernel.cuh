// The Hopper backward's wide buckets (sm_90a): dK, dV of one key tile (BN keys) and one kv head for K and V up to
// 256 or 512 (a pair of CTAs, each with half of the head dims), or K up to 192 with V up to 128; fp16/bf16, both
// modes; dQ added into the fp32 accumulator; with kRowSums (a gate or a sink) also the row sums E (and, with a gate,
// the mass) and the gate's column sums of dS. Its shape is backward.h's DkdvWideTile.
//
// Warpgroup 0 produces exactly as in the narrow kernel (backward_roles.cuh: bwd_detail::produce, stage_terms); where
// the bucket stages dQ (DkdvWideTile::kStagedDq) its warp 3 adds the consumers' staged dQ (bwd_detail::write_dq),
// and in deterministic mode warp 2 hands out the turns. Warpgroups 1 and 2 consume: the split consumers
// (backward_wide_split.cuh) at 256 / 256 and 512 / 512, the block consumers (backward_wide_blocks.cuh) at 192 / 128;
// their buffers are backward_wide_buffers.cuh's.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/backward_params.h"
#include "cuda/common/cuda_check.h"
#include "cuda/common/element.h"
#include "cuda/hopper/backward.h"
#include "cuda/hopper/backward_roles.cuh"
#include "cuda/hopper/backward_wide_blocks.cuh"
#include "cuda/hopper/backward_wide_buffers.cuh"
#include "cuda/hopper/backward_wide_split.cuh"
#include "cuda/ptx/cluster.h"
#include "cuda/ptx/warpgroup.h"

namespace flashgate::cuda::hopper {

#if defined(__CUDACC__)
// One CTA per (key tile, kv head), the tiles most query rows see first (deterministic mode: lightest first, or
// heaviest first where it adds dQ in ascending order, BackwardParams::dq_ascending); a
// cluster of two per item where the bucket pairs CTAs.
template <class T, int kK, int kV, bool kRowSums, bool kUp = false>
__global__ void __launch_bounds__(DkdvWideTile<kK, kV>::kThreads, 1)
    dkdv_wide_kernel(const __grid_constant__ DkdvParams p, const __grid_constant__ TileSchedule keys) {
#if FG_HOPPER_BWD_BODY
  using Tile = DkdvWideTile<kK, kV>;
  using Buffers = bwd_wide::Buffers<kK, kV>;
  constexpr bool kPaired = Tile::kPair == 2;
  // Deterministic mode's ascending order walks the query heads innermost: the split consumers keep the row sums'
  // per-head column sums for it (Tile::kAscendingGroup) in a variant of their own (kUp), whose walk is known at
  // compile time (the row-sum consumers have no registers for both walks).
  constexpr bwd_detail::Walks kWalks =
      !kRowSums ? bwd_detail::Walks::kEither : kUp ? bwd_detail::Walks::kUp : bwd_detail::Walks::kDown;
  static_assert(!kUp || (kRowSums && Tile::kSplit && Tile::kPair == 1),
                "the ascending row-sum variant is the 256 / 256 split consumers' (the pairs' spills 80 bytes)");
  extern __shared__ unsigned char raw[];
  __shared__ alignas(8) uint64_t bars[Buffers::kBarriers];
  const Buffers buf{{}, {bars}, ptx::swizzle_aligned(raw)};
  const int64_t item = blockIdx.x / Tile::kPair;  // both CTAs of a pair take the same item (or both return)
  if (!bwd_detail::key_work<Tile::BN, Tile::BM, kWalks>(p.b, keys, item).valid) return;

  if (threadIdx.x == 0) buf.init(kRowSums);
  // A pair: the other CTA's barriers are initialised before anything arrives on them.
  if constexpr (kPaired) ptx::cluster_sync();
  else __syncthreads();

  // A pair's threads all leave through a cluster barrier, which keeps each CTA's shared memory alive while the other
  // may still write into it.
  const auto leave = [] {
    if constexpr (kPaired) ptx::cluster_sync();
  };

  // Nothing stays live across setmaxnreg (ptxas would spill it): each role derives its work afterwards.
  if (threadIdx.x < 128) {
    ptx::setmaxnreg_dec<Tile::kProducerRegs>();
    const bwd_detail::KeyWork w = bwd_detail::key_work<Tile::BN, Tile::BM, kWalks>(p.b, keys, item);
    const int warp = threadIdx.x / 32;
    if (w.steps == 0) return leave();  // nobody would wait for its copies
    const int col0 = kPaired ? Tile::kCtaK * static_cast<int>(ptx::cluster_rank()) : 0;
    if (warp == 0 && ptx::elect_one()) bwd_detail::produce<T>(p, buf, w, 0, 0, col0);
    else if (warp == 1) bwd_detail::stage_terms<PScale<T, kRowSums>>(p.b, buf, w, 0);  // Consumer::Scale
    else if (warp == 2 && p.b.dq_order) bwd_detail::take_turns<true>(p.b, buf, w, 0, Buffers::kReleasers * Tile::kPair);
    else if (warp == 3 && Tile::kStagedDq) bwd_detail::write_dq(p.b, buf, w, 0);
    return leave();
  }

  ptx::setmaxnreg_inc<Tile::kConsumerRegs>();
  const bwd_detail::KeyWork w = bwd_detail::key_work<Tile::BN, Tile::BM, kWalks>(p.b, keys, item);
  const int me = ptx::warpgroup_index() - 1;
  const int rank = kPaired ? static_cast<int>(ptx::cluster_rank()) : 0;
  if constexpr (Tile::kSplit) bwd_wide::consume_split<T, kK, kV, kRowSums>(p, w, buf, me, rank);
  else if (me == 0) bwd_wide::consume_blocks<T, kK, kV, 0>(p, w, buf);
  else bwd_wide::consume_blocks<T, kK, kV, 1>(p, w, buf);
  leave();
#endif
}

template <class T, int kK, int kV>
void launch_dkdv_wide(const DkdvParams& p, const TileSchedule& keys, CUstream_st* stream) {
  using Tile = DkdvWideTile<kK, kV>;
  const int64_t ctas = keys.num_tiles * p.b.a.H;
  if (ctas == 0) return;
  auto kernel = dkdv_wide_kernel<T, kK, kV, false>;
  if constexpr (Tile::kServesRowSums) {
    if (p.b.needs_row_sums()) kernel = dkdv_wide_kernel<T, kK, kV, true>;
    if constexpr (Tile::kPair == 1)
      if (p.b.needs_row_sums() && p.b.dq_ascending) kernel = dkdv_wide_kernel<T, kK, kV, true, true>;
  }
  FLASHGATE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            static_cast<int>(Tile::smem_bytes())));
  if constexpr (Tile::kPair == 2) {  // clusters of the pair's two CTAs
    cudaLaunchAttribute cluster[1] = {};
    cluster[0].id = cudaLaunchAttributeClusterDimension;
    cluster[0].val.clusterDim.x = 2, cluster[0].val.clusterDim.y = 1, cluster[0].val.clusterDim.z = 1;
    cudaLaunchConfig_t config = {};
    config.gridDim = dim3(static_cast<unsigned>(ctas * 2)), config.blockDim = dim3(Tile::kThreads);
    config.dynamicSmemBytes = Tile::smem_bytes(), config.stream = stream;
    config.attrs = cluster, config.numAttrs = 1;
    FLASHGATE_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, p, keys));
  } else {
    kernel<<<static_cast<unsigned>(ctas), Tile::kThreads, Tile::smem_bytes(), stream>>>(p, keys);
  }
  FLASHGATE_CHECK_LAUNCH("hopper dkdv_wide_kernel");
}
#endif  // __CUDACC__

}  // namespace flashgate::cuda::hopper
