// A slice pair's backward on the cuda backend (context parallelism): the SIMT kernels of the portable backward
// (backward_simt.cu) over the pair's rows and keys, with lse and D of the merged rows given. Correct rather than
// fast so far: every score is recomputed by a warp, once per row and once per key (and the key kernel, holding six
// rows of up to 512 columns a lane, spills a few words).
#include <cuda_runtime_api.h>

#include <string>

#include "cuda/common/backward_params.h"
#include "cuda/common/workspace.h"
#include "cuda/host/attention_params.h"
#include "cuda/host/training.h"
#include "cuda/portable/backward_kernels.h"

namespace flashgate::host {
namespace {

cuda::bwd::SliceBackwardParams slice_backward_params(const SliceBackwardArgs& a, const detail::SliceProblem& sp) {
  cuda::bwd::SliceBackwardParams p;
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

size_t carve(const detail::SliceProblem& sp, void* base, cuda::bwd::SliceBackwardParams* p) {
  cuda::WorkspaceCarver w(base);
  float* rows = w.take<float>(sp.has_sink ? sp.B * sp.HQ * sp.Tq : 0);
  if (p) p->dsink_rows = rows;
  return w.bytes();
}

}  // namespace

std::string cannot_run(const SliceBackwardArgs& a, const detail::SliceProblem& p) {
  return cuda::slice_refusal(a.q, p);
}

size_t workspace(const SliceBackwardArgs&, const detail::SliceProblem& p) { return carve(p, nullptr, nullptr); }

void run(const SliceBackwardArgs& a, const detail::SliceProblem& sp, const Launch& launch) {
  cuda::bwd::SliceBackwardParams p = slice_backward_params(a, sp);
  carve(sp, launch.workspace, &p);
  cuda::bwd::launch_simt_slice_backward(p, launch.stream);
}

}  // namespace flashgate::host
