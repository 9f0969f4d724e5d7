// Host-side launchers of every backward kernel (each defined in its own .cu). All are stream-ordered,
// never synchronise, and check their launch.
#pragma once

#include <cuda_runtime_api.h>

#include "cuda/common/tile_scheduler.h"
#include "cuda/portable/backward_params.h"

namespace flashgate::cuda::bwd {

// ---- backward_prep.cu: D = o·do and a contiguous lse copy, per (b, query head, t) row.
void launch_prepare_rows(const BackwardParams& p, cudaStream_t stream);

// ---- backward_post.cu
// dq[b,t,h,:] = scale * dq_acc (default-mode MMA path).
void launch_dq_convert(const BackwardParams& p, cudaStream_t stream);
// dk, dv = the fixed-order sum of the head-part partials (head_parts > 1).
void launch_dkv_reduce(const BackwardParams& p, cudaStream_t stream);
// dg = per-sequence suffix sum of dGc[t] = (E_t - D_t mass_t) - colsum_t.
void launch_gate_grad(const BackwardParams& p, cudaStream_t stream);
// dsink[h] = -sum over every row of head h of exp(sink[h] - lse_i) E_i (fixed order).
void launch_sink_grad(const BackwardParams& p, cudaStream_t stream);

// ---- backward_simt.cu: the fp32 (and small-shared-memory) path; writes dq, dk, dv, E, mass and colsum.
void launch_simt_backward(const BackwardParams& p, cudaStream_t stream);

// ---- backward_dkdv_*.cu / backward_dq_*.cu: the MMA kernels, T = __half or __nv_bfloat16, kD = bucket.
// `slices`: column slices over the grid (see TileConfig); `stages`: 1 or 2 buffers of the per-step tiles
// (the shared memory is dkdv_smem_bytes / dq_smem_bytes of it).
// kRowSums: the gate/sink variant of the dK/dV kernel (BackwardParams::needs_row_sums; launch_dkdv picks).
template <class T, int kD, bool kRowSums>
void launch_dkdv_mma(const BackwardParams& p, const TileSchedule& keys, int slices, int stages,
                     cudaStream_t stream);
// d_only: the dq kernel only sums E = sum_j P dP per row into p.D (BackwardParams::exact_D's pre-pass).
template <class T, int kD>
void launch_dq_mma(const BackwardParams& p, const TileSchedule& queries, int slices, int stages, bool d_only,
                   cudaStream_t stream);

}  // namespace flashgate::cuda::bwd
