// The Hopper backward's wide buckets (sm_90a): dK, dV of one key tile (BN keys) and one kv head for K and V up to
// 256 (without the row sums a key pair: two CTAs on adjacent key tiles) or 512 (a pair of CTAs, each with half of the
// head dims), or K up to 192 with V up to 128; fp16/bf16, both modes; dQ added into the fp32 accumulator; with
// kRowSums (a gate or a sink) also the row sums E (and, with a gate, the mass) and the gate's column sums of dS. Its
// shape is backward.h's DkdvWideTile.
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
namespace bwd_wide {

// A key pair's CTA `key_rank` holds the item's keys BN key_rank.. (its own K, V, dK, dV): the item's work seen from it.
template <class Tile>
__device__ __forceinline__ bwd_detail::KeyWork own_keys(bwd_detail::KeyWork w, int key_rank) {
  w.j0 += Tile::BN * key_rank;
  return w;
}

// A key pair's extra load an item: the other tile's keys, this CTA's half of K's columns (the ones of its dQ).
template <class T, class Buf>
struct OtherKeys {
  static constexpr uint32_t kBytes = Buf::Tile::kKOtherBytes;
  const DkdvParams& p;
  const Buf& buf;
  const bwd_detail::KeyWork& w;  // the CTA's
  int key_rank;
  __device__ __forceinline__ void operator()(uint64_t* bar) const {
    using Tile = typename Buf::Tile;
    const int32_t row = static_cast<int32_t>(w.seq.start + w.j0 + (key_rank == 0 ? Tile::BN : -Tile::BN));
    for (int c = 0; c < Tile::kDqColumns / 64; ++c)
      ptx::tma_load(buf.template k_other<T>() + c * Tile::BN * 64, &p.k_map,
                    {Tile::kDqColumns * key_rank + c * 64, row, static_cast<int32_t>(w.hk),
                     static_cast<int32_t>(w.seq.batch)},
                    bar);
  }
};

}  // namespace bwd_wide

// One CTA per (key tile, kv head), the tiles most query rows see first (deterministic mode: lightest first, or
// heaviest first where it adds dQ in ascending order, BackwardParams::dq_ascending); a cluster of two per item where
// the bucket pairs CTAs (head-dim halves) or key tiles.
template <class T, int kK, int kV, bool kRowSums, bool kUp = false>
__global__ void __launch_bounds__(DkdvWideTile<kK, kV>::kThreads, 1)
    dkdv_wide_kernel(const __grid_constant__ DkdvParams p, const __grid_constant__ TileSchedule keys) {
#if FG_HOPPER_BWD_BODY
  using Tile = DkdvWideTile<kK, kV, kRowSums>;
  using Buffers = bwd_wide::Buffers<kK, kV, kRowSums>;
  constexpr bool kClustered = Tile::kCluster == 2;
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
  const int64_t item = blockIdx.x / Tile::kCluster;  // a cluster's CTAs take the same item (or all return)
  const auto item_work = [&] { return bwd_detail::key_work<Tile::kItemKeys, Tile::BM, kWalks>(p.b, keys, item); };
  if (!item_work().valid) return;

  if (threadIdx.x == 0) buf.init(kRowSums);
  // A cluster: the other CTA's barriers are initialised before anything arrives on them.
  if constexpr (kClustered) ptx::cluster_sync();
  else __syncthreads();

  // A cluster's threads all leave through a cluster barrier, which keeps each CTA's shared memory alive while the
  // other may still write into it.
  const auto leave = [] {
    if constexpr (kClustered) ptx::cluster_sync();
  };

  // Nothing stays live across setmaxnreg (ptxas would spill it): each role derives its work afterwards.
  if (threadIdx.x < 128) {
    ptx::setmaxnreg_dec<Tile::kProducerRegs>();
    const bwd_detail::KeyWork iw = item_work();
    const int cta = kClustered ? static_cast<int>(ptx::cluster_rank()) : 0;
    const int key_rank = Tile::kKeyPair == 2 ? cta : 0;
    const bwd_detail::KeyWork w = bwd_wide::own_keys<Tile>(iw, key_rank);
    const int warp = threadIdx.x / 32;
    if (w.steps == 0) return leave();  // nobody would wait for its copies
    const int col0 = Tile::kPair == 2 ? Tile::kCtaK * cta : 0;
    if (warp == 0 && ptx::elect_one()) {
      if constexpr (Tile::kKeyPair == 2)
        bwd_detail::produce<T>(p, buf, w, 0, 0, col0, bwd_wide::OtherKeys<T, Buffers>{p, buf, w, key_rank});
      else
        bwd_detail::produce<T>(p, buf, w, 0, 0, col0);
    } else if (warp == 1) {
      bwd_detail::stage_terms<PScale<T, kRowSums>>(p.b, buf, w, 0);  // Consumer::Scale
    } else if (warp == 2 && p.b.dq_order) {
      bwd_detail::take_turns<true>(p.b, buf, iw, 0, Buffers::kReleasers * Tile::kCluster);
    } else if (warp == 3 && Tile::kStagedDq) {
      bwd_detail::write_dq(p.b, buf, w, 0, Tile::kDqColumns * key_rank);
    }
    return leave();
  }

  ptx::setmaxnreg_inc<Tile::kConsumerRegs>();
  const int cta = kClustered ? static_cast<int>(ptx::cluster_rank()) : 0;
  const bwd_detail::KeyWork w = bwd_wide::own_keys<Tile>(item_work(), Tile::kKeyPair == 2 ? cta : 0);
  const int me = ptx::warpgroup_index() - 1;
  if constexpr (Tile::kSplit) bwd_wide::consume_split<T, kK, kV, kRowSums>(p, w, buf, me, cta);
  else if (me == 0) bwd_wide::consume_blocks<T, kK, kV, 0>(p, w, buf);
  else bwd_wide::consume_blocks<T, kK, kV, 1>(p, w, buf);
  leave();
#endif
}

// The kernel variant's launch: clusters of two where the variant pairs CTAs.
template <class T, int kK, int kV, bool kRowSums, bool kUp = false>
void launch_dkdv_wide_variant(const DkdvParams& p, const TileSchedule& keys, CUstream_st* stream) {
  using Tile = DkdvWideTile<kK, kV, kRowSums>;
  if (keys.tile_rows != Tile::kItemKeys)  // the host's schedule (hopper_dkdv_key_rows) and the variant disagree
    cuda::raise_cuda_error(cudaErrorInvalidValue, "hopper dkdv_wide_kernel: key tiles of another variant's rows");
  const int64_t ctas = keys.num_tiles * p.b.a.H * Tile::kCluster;
  if (ctas == 0) return;
  const auto kernel = dkdv_wide_kernel<T, kK, kV, kRowSums, kUp>;
  FLASHGATE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            static_cast<int>(Tile::smem_bytes())));
  if constexpr (Tile::kCluster == 2) {
    cudaLaunchAttribute cluster[1] = {};
    cluster[0].id = cudaLaunchAttributeClusterDimension;
    cluster[0].val.clusterDim.x = 2, cluster[0].val.clusterDim.y = 1, cluster[0].val.clusterDim.z = 1;
    cudaLaunchConfig_t config = {};
    config.gridDim = dim3(static_cast<unsigned>(ctas)), config.blockDim = dim3(Tile::kThreads);
    config.dynamicSmemBytes = Tile::smem_bytes(), config.stream = stream;
    config.attrs = cluster, config.numAttrs = 1;
    FLASHGATE_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, p, keys));
  } else {
    kernel<<<static_cast<unsigned>(ctas), Tile::kThreads, Tile::smem_bytes(), stream>>>(p, keys);
  }
  FLASHGATE_CHECK_LAUNCH("hopper dkdv_wide_kernel");
}

template <class T, int kK, int kV>
void launch_dkdv_wide(const DkdvParams& p, const TileSchedule& keys, CUstream_st* stream) {
  if constexpr (DkdvWideTile<kK, kV>::kServesRowSums) {
    if (p.b.needs_row_sums()) {
      if constexpr (DkdvWideTile<kK, kV, true>::kPair == 1)
        if (p.b.dq_ascending) return launch_dkdv_wide_variant<T, kK, kV, true, true>(p, keys, stream);
      return launch_dkdv_wide_variant<T, kK, kV, true>(p, keys, stream);
    }
  }
  launch_dkdv_wide_variant<T, kK, kV, false>(p, keys, stream);
}
#endif  // __CUDACC__

}  // namespace flashgate::cuda::hopper
