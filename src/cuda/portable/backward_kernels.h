// Host-side launchers of the portable backward kernels (each defined in its own .cu). All are stream-ordered,
// never synchronise, and check their launch. The pre/post passes are common/backward_passes.h.
#pragma once

#include <cuda_runtime_api.h>

#include "cuda/common/tile_scheduler.h"
#include "cuda/common/backward_params.h"
#include "cuda/portable/backward_tiles.h"

namespace flashgate::cuda::bwd {

// ---- backward_simt.cu: the fp32 (and small-shared-memory) path; writes dq, dk, dv, E, mass and colsum.
void launch_simt_backward(const BackwardParams& p, cudaStream_t stream);
// The same path for a slice pair: dq, dk, dv, the cumulative gates' gradients and dsink (SliceBackwardParams).
void launch_simt_slice_backward(const SliceBackwardParams& p, cudaStream_t stream);

// ---- backward_dkdv_*.cu / backward_dq_*.cu: the MMA kernels, T = __half or __nv_bfloat16, kD = bucket.
// `slices`: column slices over the grid (see TileConfig); `stages`: 1 or 2 buffers of the per-step tiles
// (the shared memory is dkdv_smem_bytes / dq_smem_bytes of it).
// kRowSums: the gate/sink variant of the dK/dV kernel (BackwardParams::needs_row_sums; launch_dkdv picks).
template <class T, int kD, bool kRowSums>
void launch_dkdv_mma(const BackwardParams& p, const TileSchedule& keys, int slices, int stages,
                     cudaStream_t stream);
// d_only: the dq kernel only sums D = sum_j P dP / sum_j P per row into p.D (BackwardParams::exact_D's pre-pass).
template <class T, int kD>
void launch_dq_mma(const BackwardParams& p, const TileSchedule& queries, int slices, int stages, bool d_only,
                   cudaStream_t stream);

}  // namespace flashgate::cuda::bwd
