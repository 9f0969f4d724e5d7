// Portable (sm80+) attention backward, SPEC §4: the entry points that training.cpp calls.
//
// Design (FlashAttention-2 style, recompute instead of storing P):
//
//   pre      backward_prep.cu    D[i] = o[i]·do[i] (fp32, from the stored output), a contiguous copy of lse,
//                                the gate prefix sums Gc (common/gate.h), zeroed accumulators, tile maps.
//   main     backward_dkdv.cuh   key-major MMA kernel, one CTA per (key tile, kv head[, head part][, column
//                                slice]). K/V tiles stay in shared memory; the CTA loops over the G query
//                                heads of its kv head (GQA reduction without per-head copies) and over the
//                                query tiles that can see its keys (causal + window bound the range; fully
//                                hidden tiles are never touched). Per query tile it recomputes S = QK^T,
//                                P = exp(s - lse), dP = dO V^T, dS = P (dP - D), accumulates dV += P^T dO and
//                                dK += dS^T Q in registers, and (default mode) adds dQ += dS K into an fp32
//                                workspace with 16-byte vector atomics (in MMA fragment order: dq_acc_offset), and
//                                with a gate or a sink only (the kRowSums variant) E[i] = sum_j P dP and
//                                mass[i] = sum_j P into fp32 row buffers. Q/dO tiles stream in through
//                                TileStream. Step shapes follow FlashAttention-2 (128 keys x 128 rows
//                                at D64, 128 x 64 at D128, 64 x 64 at D256; TileConfig in backward_params.h)
//                                with 32-row warp tiles; the step's lse/D/Gc terms ride in shared memory with
//                                Q/dO so the dK/dV accumulators and S/dP fit 255 registers.
//            backward_dq.cuh     deterministic mode only: query-major MMA kernel, one CTA per (query tile,
//                                query head[, slice]), looping over key tiles in a fixed order; writes dq,
//                                E and mass without atomics; the key-major kernel then runs without its dQ/E
//                                part.
//   post     backward_post.cu    dq fp32 -> dtype (default mode), the fixed-order sum of per-part dk/dv
//                                partials (when GQA heads were split over CTAs), dg = per-sequence suffix sum
//                                of dGc, dsink = -sum_i exp(sink - lse_i) E_i.
//
// A slice pair (attention_backward_slice, host/slice_backward.cpp) runs the same dK/dV kernels (portable or Hopper)
// in default mode over its Tk keys with its rows shifted against them (AttentionParams::Tk, key_shift, gc_k), lse
// and D given, and launch_slice_grads in place of the gate and sink passes.
//
// Numerics: fp32 accumulation everywhere; P and dS are rounded to the input dtype only as MMA operands (fp16 P with a
// factor of 2^15 where a sink can come, so that rows whose mass the sink holds keep P's bits: PScale, element.h).
// dS = P (dP - D) uses D = o·do from the stored output (FlashAttention's way), except for K <= 16 and where every
// row sees at most 64 keys (BackwardParams::exact_D; docs/decisions.md): there one key can hold a row's mass, dS
// cancels to the size of o's rounding, and too few rows or columns average it out (K1 V1 bf16 missed SPEC §7 for 8.5%
// of seeds). Those take D = sum_j P dP / sum_j P (with the sink's share in the mass) from a query-major pre-pass
// (the dq kernel with d_only): normalised by the same recomputed P, a row whose mass sits on one key gets dS ~ 0.
// The sink gradient uses the fp32 expectation E_i = sum_j P dP accumulated while P and dP are recomputed, never
// round(o)·do (SPEC §4).
// The gate's dGc[t] = sum_j dS[t,j] - sum_i dS[i,t]: the key side is a column sum of the fp32 dS (per
// query head) in the key-major kernel; the query side is E_t - D_t mass_t with mass_t = sum_j P[t,j]
// accumulated next to E. Both sides must see the same D and P: dg is a suffix sum, and a row far below t
// then contributes (E - D mass) - (E - D mass) = 0 instead of its o-rounding error E - D (or the
// mismatch between the forward's lse and the recomputed P, ~1e-4 per row with long gated sequences). What
// stays is D - E itself (o's rounding, in every row's sum over its earlier keys): ~0.0027 relative RMS of dg in
// bf16, past SPEC §7 on small problems; exact D removes it at 27-30% of the gated backward (docs/perf-notes.md,
// the backward's gate gradient).
//
// Head dims: one instantiation per (dtype, bucket) with bucket = 64/128/256/512 >= max(K, V) rounded up to
// 16; smaller dims run masked inside the bucket (zero-filled columns, skipped MMA steps). The dK/dV kernel
// has a second variant for dims that fill the bucket (kFull): no column guards, so its GEMMs are
// straight-line code whose ldmatrix the compiler overlaps with the MMAs. The register
// accumulators cover `slice` columns of dK/dV (dq); wider heads are split over the grid by column slice
// and recompute S/dP per slice. fp32 inputs (and GPUs whose shared memory is too small for a bucket's
// tiles) take a SIMT path (backward_simt.cu): a warp per query row (dq, E) and a warp per key row (dk, dv,
// dGc column sums), correct rather than fast, deterministic by construction.
//
// No host synchronisation (CUDA-graph safe); every launch is checked; scratch comes only from
// launch.workspace (backward_workspace bytes).
#pragma once

#include <cstddef>
#include <string>

#include "api/problem.h"
#include "cuda/common/backward_params.h"
#include "cuda/common/tile_scheduler.h"
#include "cuda/host/device_facts.h"
#include "cuda/portable/backward_tiles.h"
#include "flashgate/ops.h"

namespace flashgate::host {

// The portable dK/dV kernel's plan for p (the one place for this rule; the whole-sequence and the slice backward
// share it): the head-dim bucket and its tiles, column slices, stages (two buffers where shared memory allows,
// else one), and p.head_parts, the CTAs that share a kv head's query heads (split only while the grid would leave
// SMs idle). fits: the tiles fit the device and the grid one axis (else p.head_parts = 1).
struct DkdvPlan {
  bool fits = false;
  int bucket = 0;
  cuda::bwd::TileSizes tiles;
  int slices = 1, stages = 0;
};
DkdvPlan plan_dkdv(cuda::bwd::BackwardParams& p, const DeviceFacts& dev);
// The portable dK/dV kernel of plan's bucket for p's dtype (fp16 / bf16), with the row sums where p needs them.
void launch_portable_dkdv(const cuda::bwd::BackwardParams& p, const DkdvPlan& plan, const cuda::TileSchedule& keys,
                          CUstream_st* stream);

// The dK/dV kernel family of a backward: the portable one (every GPU from sm_80) or, on sm_90 for the requests
// hopper_backward_refusal accepts, the Hopper one (the `hopper` backend's backward). The passes around it are
// the same.
enum class DkdvKernels { portable, hopper };

// "" when the portable backward serves the request, else why not.
std::string backward_refusal(const BackwardArgs&, const detail::AttentionProblem&);

// "" when the backward with the Hopper dK/dV kernel serves the request, else why not.
std::string hopper_backward_refusal(const BackwardArgs&, const detail::AttentionProblem&);

// Workspace bytes launch_backward needs for these arguments on the current device.
size_t backward_workspace(const BackwardArgs&, const detail::AttentionProblem&, DkdvKernels = DkdvKernels::portable);

// Runs the backward on launch.stream using launch.workspace (>= backward_workspace bytes).
void launch_backward(const BackwardArgs&, const detail::AttentionProblem&, const Launch&,
                     DkdvKernels = DkdvKernels::portable);

// A slice pair's backward (slice_backward.cpp) with the Hopper dK/dV kernel: "" when it serves the request (the
// `hopper` backend's slice backward), its workspace and its launch; training.h's entry points run the portable one.
std::string hopper_slice_backward_refusal(const SliceBackwardArgs&, const detail::SliceProblem&);
size_t slice_backward_workspace(const SliceBackwardArgs&, const detail::SliceProblem&, DkdvKernels);
void launch_slice_backward(const SliceBackwardArgs&, const detail::SliceProblem&, const Launch&, DkdvKernels);

}  // namespace flashgate::host
