// A slice pair's backward on the CUDA backends (context parallelism). Three paths, picked per call:
//
//   Hopper the `hopper` backend (sm_90, what hopper_dkdv_refusal accepts): the MMA path below with the Hopper dK/dV
//         kernels (src/cuda/hopper/backward*.cuh) in place of the portable one, over the same workspace; a sink
//         without a gate takes their row-sum variant where they do not sum dsink's parts (for PScale's fp16 factor).
//   MMA   fp16 / bf16 with q, k, v and dout rows on 16-byte boundaries and tiles that fit the device (plan_dkdv): the
//         portable backward's key-major dK/dV kernel (backward_dkdv.cuh, default mode, its kSlicePair variant) over
//         the pair's Tk keys with its rows shifted against them, as the slice forward runs the tiled forward
//         (AttentionParams::Tk, key_shift, gc_k; the mask and the key ranges from visibility.h's slice forms). lse
//         and D are the given merged rows' (transposed into the row workspace; no D pass, no o), the cumulative
//         gates' rows and keys transposed as in the forward. The kernel writes dk, dv (or head-part partials), adds
//         dQ into the fp32 accumulator and, with a gate, the row sums E and mass and the per-head column sums of dS.
//         Then dq from its accumulator, the head parts' fixed-order sum, and launch_slice_grads: dgate_q = E - D
//         mass, dgate_k = -colsum, the rows' sink parts -exp(sink - lse) D, summed per head in a fixed order
//         (launch_slice_dsink).
//   SIMT  the rest, and where a test forces it (cuda::slice_backward_overrides): backward_simt.cu's slice kernels,
//         a warp per row and per key recomputing every score (deterministic; the key kernel spills a few words).
//
// The MMA path's dQ, E and mass are sums of unordered fp32 atomics (not bit-reproducible run to run); the gate terms
// are anchored at a key of each tile (anchored_gate_term), so that large cumulative gates keep P's precision.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

#include "cuda/common/backward_params.h"
#include "cuda/common/backward_passes.h"
#include "cuda/common/cuda_check.h"
#include "cuda/common/gate.h"
#include "cuda/common/tile_scheduler.h"
#include "cuda/common/workspace.h"
#include "cuda/host/attention_params.h"
#include "cuda/host/backward.h"
#include "cuda/host/device_facts.h"
#include "cuda/host/hopper_backward.h"
#include "cuda/host/overrides.h"
#include "cuda/host/training.h"
#include "cuda/portable/backward_kernels.h"
#include "flashgate/error.h"

namespace flashgate::cuda {

SliceBackwardOverrides& slice_backward_overrides() {
  static SliceBackwardOverrides o;
  return o;
}

namespace {
thread_local const char* last_path = "";
}  // namespace

const char* last_slice_backward_path() { return last_path; }

}  // namespace flashgate::cuda

namespace flashgate::host {
namespace {

using cuda::bwd::BackwardParams;
using cuda::bwd::SliceBackwardParams;

SliceBackwardParams simt_params(const SliceBackwardArgs& a, const detail::SliceProblem& sp) {
  SliceBackwardParams p;
  p.q = cuda::token_head_view(a.q), p.k = cuda::token_head_view(a.k), p.v = cuda::token_head_view(a.v);
  p.dout = cuda::token_head_view(a.dout), p.lse = cuda::token_head_view(a.lse), p.D = cuda::token_head_view(a.D);
  p.gate_q = cuda::token_head_view(a.gate_q), p.gate_k = cuda::token_head_view(a.gate_k);
  p.dq = cuda::token_head_view(a.dq), p.dk = cuda::token_head_view(a.dk), p.dv = cuda::token_head_view(a.dv);
  p.dgate_q = cuda::token_head_view(a.dgate_q), p.dgate_k = cuda::token_head_view(a.dgate_k);
  p.sink = static_cast<const float*>(a.sink.data);
  p.dsink = static_cast<float*>(a.dsink.data);
  p.B = sp.B, p.Tq = sp.Tq, p.Tk = sp.Tk, p.HQ = sp.HQ, p.H = sp.H, p.group = sp.group();
  p.K = static_cast<int>(sp.K), p.V = static_cast<int>(sp.V);
  const cuda::SlicePositions at = cuda::slice_positions(sp);
  p.shift = at.shift, p.window = at.window;
  p.scale = sp.scale;
  p.dtype = cuda::element_type(a.q.dtype);
  p.has_gate = sp.has_gate, p.has_sink = sp.has_sink;
  return p;
}

int round16(int64_t x) { return static_cast<int>((x + 15) / 16 * 16); }

// The MMA path's parameters: the pair's rows (T = Tq, dense) against its Tk keys, default mode, row sums E and mass
// for a gate only (the sink's gradient needs just the given lse and D).
BackwardParams mma_params(const SliceBackwardArgs& a, const detail::SliceProblem& sp) {
  BackwardParams p;
  p.a = cuda::make_slice_params(a.q, a.k, a.v, a.sink, sp);
  p.dout = cuda::token_head_view(a.dout);
  p.dq = cuda::token_head_view(a.dq), p.dk = cuda::token_head_view(a.dk), p.dv = cuda::token_head_view(a.dv);
  p.dsink = static_cast<float*>(a.dsink.data);
  p.do_width = cuda::row_copy_width(a.dout);
  p.dq_width = cuda::row_copy_width(a.dq);
  p.dk_width = cuda::row_copy_width(a.dk);
  p.dv_width = cuda::row_copy_width(a.dv);
  p.K16 = round16(sp.K), p.V16 = round16(sp.V);
  p.need_E = sp.has_gate;
  return p;
}

struct SlicePlan {
  bool mma = false;
  bool hopper = false;  // the MMA path with the Hopper dK/dV kernel
  DkdvPlan kv;
};

// The MMA path where it can run (its loaders copy 16-byte chunks; the tiles must fit), with the Hopper dK/dV kernel
// where asked and it serves the pair, else the SIMT kernels.
SlicePlan make_plan(const SliceBackwardArgs& a, BackwardParams& p, DkdvKernels kernels) {
  SlicePlan plan;
  p.head_parts = 1;
  if (cuda::slice_backward_overrides().force_simt || p.a.dtype == cuda::ElementType::f32) return plan;
  for (const Tensor* t : {&a.q, &a.k, &a.v, &a.dout})
    if (cuda::row_copy_width(*t) < 16) return plan;
  const DeviceFacts dev = device_facts(a.q.device_index);
  plan.kv = plan_dkdv(p, dev);
  plan.mma = plan.kv.fits;
#if defined(FLASHGATE_WITH_HOPPER)
  if (plan.mma && kernels == DkdvKernels::hopper && hopper_dkdv_refusal(dkdv_tensors(a), p, dev).empty()) {
    plan.hopper = true;
    p.head_parts = 1;
    if (p.a.has_sink && !hopper_dkdv_sums_sink(p)) p.need_E = true;  // the row-sum variant's P factor (unused E)
    plan.kv.tiles.key_tile = hopper_dkdv_key_rows(p);  // after need_E: the row sums choose the wide variant's tiles
  }
#else
  (void)kernels;
#endif
  return plan;
}

// Carves the workspace (sizes only when the carver has no base): the SIMT path's per-row sink parts (which the MMA
// path's launch_slice_grads fills too), then the MMA path's row and key vectors, dq accumulator and head parts.
void carve(const detail::SliceProblem& sp, const SlicePlan& plan, cuda::WorkspaceCarver& w, BackwardParams& p,
           SliceBackwardParams& s, float** gc, float** gc_k) {
  const int64_t rows = sp.B * sp.HQ * sp.Tq, keys = sp.B * sp.HQ * sp.Tk;
  s.dsink_rows = w.take<float>(sp.has_sink ? rows : 0);
  if (!plan.mma) return;
  p.lse = w.take<float>(rows);
  p.D = w.take<float>(rows);
  if (p.need_E) p.E = w.take<float>(rows);
  if (sp.has_gate) {
    *gc = w.take<float>(rows), *gc_k = w.take<float>(keys);
    p.mass = w.take<float>(rows);
    p.colsum = w.take<float>(keys);
  }
  if (plan.hopper) p.next_item = w.take<unsigned>(1);
  p.dq_acc = w.take<float>(p.a.B * p.a.HQ * cuda::bwd::dq_acc_rows_per_head(p.a) * p.K16);
  if (p.head_parts > 1) {
    const int64_t kv_rows = p.head_parts * sp.B * sp.H * sp.Tk;
    p.dk_part = w.take<float>(kv_rows * p.K16);
    p.dv_part = w.take<float>(kv_rows * p.V16);
  }
}

template <class T>
void zero_async(T* ptr, int64_t count, cudaStream_t stream) {
  if (ptr && count > 0)
    FLASHGATE_CUDA_CHECK(cudaMemsetAsync(ptr, 0, static_cast<size_t>(count) * sizeof(T), stream));
}

}  // namespace

std::string cannot_run(const SliceBackwardArgs& a, const detail::SliceProblem& p) {
  return cuda::slice_refusal(a.q, p);
}
size_t workspace(const SliceBackwardArgs& a, const detail::SliceProblem& sp) {
  return slice_backward_workspace(a, sp, DkdvKernels::portable);
}
void run(const SliceBackwardArgs& a, const detail::SliceProblem& sp, const Launch& launch) {
  launch_slice_backward(a, sp, launch, DkdvKernels::portable);
}

std::string hopper_slice_backward_refusal(const SliceBackwardArgs& a, const detail::SliceProblem& sp) {
#if defined(FLASHGATE_WITH_HOPPER)
  const std::string why = cuda::slice_refusal(a.q, sp);
  if (!why.empty()) return why;
  BackwardParams p = mma_params(a, sp);
  if (!make_plan(a, p, DkdvKernels::portable).mma)
    return "takes slice pairs with q, k, v and dout rows on 16-byte boundaries whose tiles fit the device";
  return hopper_dkdv_refusal(dkdv_tensors(a), p, device_facts(a.q.device_index));
#else
  (void)a, (void)sp;
  return "the Hopper kernels are not built";
#endif
}

size_t slice_backward_workspace(const SliceBackwardArgs& a, const detail::SliceProblem& sp, DkdvKernels kernels) {
  BackwardParams p = mma_params(a, sp);
  SliceBackwardParams s;
  const SlicePlan plan = make_plan(a, p, kernels);
  cuda::WorkspaceCarver w;
  float *gc = nullptr, *gc_k = nullptr;
  carve(sp, plan, w, p, s, &gc, &gc_k);
  return w.bytes() + cuda::WorkspaceCarver::kAlign;  // room to align the caller's base (run)
}

void launch_slice_backward(const SliceBackwardArgs& a, const detail::SliceProblem& sp, const Launch& launch,
                           DkdvKernels kernels) {
  SliceBackwardParams s = simt_params(a, sp);
  BackwardParams p = mma_params(a, sp);
  const SlicePlan plan = make_plan(a, p, kernels);
  // Carving starts at the caller's base rounded up to kAlign: the dK/dV kernel's 16-byte vector atomics into dq_acc
  // and its cp.async copies of the row terms rely on aligned pieces.
  constexpr size_t kAlign = cuda::WorkspaceCarver::kAlign;
  const size_t pad = (kAlign - reinterpret_cast<uintptr_t>(launch.workspace) % kAlign) % kAlign;
  cuda::WorkspaceCarver w(static_cast<char*>(launch.workspace) + pad);
  float *gc = nullptr, *gc_k = nullptr;
  carve(sp, plan, w, p, s, &gc, &gc_k);
  if (w.bytes() + pad > launch.workspace_bytes)
    throw Error(ErrorKind::invalid_argument, "workspace",
                "flashgate: attention_backward_slice: workspace of " + std::to_string(launch.workspace_bytes) +
                    " bytes is too small, this call needs " + std::to_string(w.bytes() + kAlign));
  const cudaStream_t stream = launch.stream;
  cuda::last_path = plan.hopper ? "hopper" : plan.mma ? "mma" : "simt";
  if (!plan.mma) return cuda::bwd::launch_simt_slice_backward(s, stream);

  const int64_t rows = sp.B * sp.HQ * sp.Tq;
  cuda::launch_gate_transpose(cuda::token_head_view(a.lse), sp.B, sp.Tq, sp.HQ, p.lse, stream);
  cuda::launch_gate_transpose(cuda::token_head_view(a.D), sp.B, sp.Tq, sp.HQ, p.D, stream);
  cuda::stage_slice_gates(p.a, a.gate_q, a.gate_k, sp, cuda::SliceGates{gc, gc_k}, stream);
  zero_async(p.E, rows, stream);
  zero_async(p.mass, rows, stream);
  zero_async(p.dq_acc, cuda::bwd::dq_acc_floats(p.a, p.K16), stream);
  zero_async(p.next_item, 1, stream);
  const cuda::TileSchedule keys = cuda::make_key_tile_schedule(p.a, plan.kv.tiles.key_tile, nullptr);  // dense
#if defined(FLASHGATE_WITH_HOPPER)
  if (plan.hopper) launch_hopper_dkdv(dkdv_tensors(a), p, keys, stream);
  else launch_portable_dkdv(p, plan.kv, keys, stream);
#else
  launch_portable_dkdv(p, plan.kv, keys, stream);
#endif
  cuda::bwd::launch_dq_convert(p, device_facts(a.q.device_index).sms, stream);
  if (p.head_parts > 1) cuda::bwd::launch_dkv_reduce(p, stream);
  cuda::bwd::launch_slice_grads(p, s, stream);
  cuda::bwd::launch_slice_dsink(s, stream);
}

}  // namespace flashgate::host
