// Host-side launchers of the backward's pre and post passes, which every GPU generation shares (kernels in
// backward_prep.cu and backward_post.cu). All are stream-ordered, never synchronise, and check their launch.
#pragma once

#include <cuda_runtime_api.h>

#include "cuda/common/backward_params.h"

namespace flashgate::cuda::bwd {

// ---- backward_prep.cu: D = o·do and a contiguous lse copy, per (b, query head, t) row; clears p.dq_acc where set.
void launch_prepare_rows(const BackwardParams& p, cudaStream_t stream);

// ---- backward_post.cu
// dq[b,t,h,:] = scale * dq_acc (default-mode MMA path); sms: the device's multiprocessors (one wave of blocks).
void launch_dq_convert(const BackwardParams& p, int sms, cudaStream_t stream);
// dk, dv = the fixed-order sum of the head-part partials (head_parts > 1).
void launch_dkv_reduce(const BackwardParams& p, cudaStream_t stream);
// dg = per-sequence suffix sum of dGc[t] = (E_t - D_t mass_t) - colsum_t.
void launch_gate_grad(const BackwardParams& p, cudaStream_t stream);
// dsink[h] = -sum over every row of head h of exp(sink[h] - lse_i) E_i (fixed order).
void launch_sink_grad(const BackwardParams& p, cudaStream_t stream);

// ---- backward_post.cu, a slice pair (attention_backward_slice)
// From the MMA path's sums: dgate_q = E - D mass per row (G_q[i] enters s[i, j] with +1) and dgate_k = -colsum per
// key and query head (G_k[j] with -1) with a gate; the rows' sink parts (slice_sink_part) into s.dsink_rows with a sink.
void launch_slice_grads(const BackwardParams& p, const SliceBackwardParams& s, cudaStream_t stream);
// dsink[h] = the sum of s.dsink_rows over head h's rows of every batch entry, in a fixed order (both paths).
void launch_slice_dsink(const SliceBackwardParams& s, cudaStream_t stream);

}  // namespace flashgate::cuda::bwd
