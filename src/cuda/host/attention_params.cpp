#include "cuda/host/attention_params.h"

#include <algorithm>
#include <cmath>

#include "cuda/common/gate.h"
#include "cuda/common/workspace.h"

namespace flashgate::cuda {

ElementType element_type(DType d) {
  switch (d) {
    case DType::f16: return ElementType::f16;
    case DType::bf16: return ElementType::bf16;
    case DType::e4m3: return ElementType::e4m3;
    default: return ElementType::f32;
  }
}

int row_copy_width(const Tensor& t) {
  const int64_t esize = static_cast<int64_t>(dtype_size(t.dtype));
  int width = 16;
  auto fits = [&](int64_t bytes) {
    while (width > 1 && bytes % width != 0) width /= 2;
  };
  fits(static_cast<int64_t>(reinterpret_cast<uintptr_t>(t.data)));
  // Every axis but the contiguous last one moves whole rows; an axis of extent 1 never moves.
  for (int a = 0; a + 1 < t.rank; ++a)
    if (t.shape[a] > 1) fits(t.stride[a] * esize);
  return width;
}

TokenHeadTensor token_head_view(const Tensor& t) {
  TokenHeadTensor v;
  v.data = t.data;
  v.dtype = element_type(t.dtype);
  if (t.defined()) {
    v.batch_stride = t.stride[0];
    v.token_stride = t.stride[1];
    v.head_stride = t.stride[2];
  }
  return v;
}

AttentionParams make_attention_params(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                                      const Tensor& sink, const Tensor& cu_seqlens,
                                      const detail::AttentionProblem& p) {
  AttentionParams r;
  r.q = token_head_view(q);
  r.k = token_head_view(k);
  r.v = token_head_view(v);
  r.g = token_head_view(g);
  r.sink = static_cast<const float*>(sink.data);
  if (cu_seqlens.defined()) {
    r.cu_seqlens = cu_seqlens.data;
    r.cu_seqlens_bytes = static_cast<int>(dtype_size(cu_seqlens.dtype));
  }
  r.B = p.B, r.T = p.T, r.HQ = p.HQ, r.H = p.H, r.group = p.group(), r.num_seqs = p.num_seqs;
  r.K = static_cast<int>(p.K), r.V = static_cast<int>(p.V);
  r.dtype = element_type(q.dtype);
  r.scale = p.scale;
  r.scale_log2 = static_cast<float>(static_cast<double>(p.scale) * 1.4426950408889634);
  // A window of T or more hides no key (i - j < T always): normalise it to "none" so kernels keep ints.
  r.window = (p.window < 0 || p.window >= p.T) ? -1 : static_cast<int>(p.window);
  r.has_gate = p.has_gate, r.has_sink = p.has_sink, r.packed = p.packed;
  r.q_width = row_copy_width(q), r.k_width = row_copy_width(k), r.v_width = row_copy_width(v);
  return r;
}

AttentionParams make_attention_params(const ForwardArgs& a, const detail::AttentionProblem& p) {
  AttentionParams r = make_attention_params(a.q, a.k, a.v, a.g, a.sink, a.cu_seqlens, p);
  r.o = token_head_view(a.o);
  r.o_width = row_copy_width(a.o);
  r.o_residual = token_head_view(a.o_residual);
  r.o_residual_width = row_copy_width(a.o_residual);
  r.lse = token_head_view(a.lse);
  r.has_lse = p.has_lse;
  return r;
}

std::string slice_refusal(const Tensor& q, const detail::SliceProblem& p) {
  if (q.dtype != DType::f16 && q.dtype != DType::bf16) return "slices take fp16 or bf16 here (fp32: cpu backend)";
  const int64_t limit = int64_t{1} << 30;
  if (p.Tq >= limit || p.Tk >= limit) return "slices of 2^30 tokens or more are not supported";
  // The kernels read a key count of 0 as the queries' own keys (AttentionParams::Tk); an empty key slice leaves
  // every row seeing nothing, which the cpu backend gives.
  if (p.Tk == 0) return "takes key slices of one token or more (k and v of 0 tokens: the cpu backend)";
  return "";
}

AttentionParams make_slice_params(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& sink,
                                  const detail::SliceProblem& sp) {
  detail::AttentionProblem p;
  p.B = sp.B, p.T = sp.Tq, p.HQ = sp.HQ, p.H = sp.H, p.K = sp.K, p.V = sp.V, p.num_seqs = sp.B;
  p.scale = sp.scale, p.window = sp.window;
  p.has_gate = sp.has_gate, p.has_sink = sp.has_sink, p.has_lse = true;
  AttentionParams r = make_attention_params(q, k, v, Tensor{}, sink, Tensor{}, p);
  const SlicePositions at = slice_positions(sp);
  r.has_lse = true;
  r.Tk = sp.Tk, r.key_end = static_cast<int>(sp.Tk);
  r.key_shift = at.shift, r.window = at.window;
  return r;
}

AttentionParams make_slice_forward_params(const SliceForwardArgs& a, const detail::SliceProblem& p) {
  AttentionParams r = make_slice_params(a.q, a.k, a.v, a.sink, p);
  r.o = token_head_view(a.o), r.o_width = row_copy_width(a.o);
  r.o_residual = token_head_view(a.o_residual), r.o_residual_width = row_copy_width(a.o_residual);
  r.lse = token_head_view(a.lse);
  return r;
}

SlicePositions slice_positions(const detail::SliceProblem& p) {
  int64_t shift = p.q_start - p.k_start, window = p.window;
  if (shift > p.Tk) {
    if (window >= 0) window = std::max<int64_t>(0, window - (shift - p.Tk));
    shift = p.Tk;
  }
  shift = std::max(shift, -p.Tq);
  SlicePositions r;
  r.shift = static_cast<int>(shift);
  r.window = (window < 0 || window > p.Tq - 1 + shift) ? -1 : static_cast<int>(window);
  return r;
}

SliceGates carve_slice_gates(const detail::SliceProblem& sp, void* base) {
  WorkspaceCarver w(base);
  SliceGates s;
  if (sp.has_gate) s.gc = w.take<float>(sp.B * sp.HQ * sp.Tq), s.gc_k = w.take<float>(sp.B * sp.HQ * sp.Tk);
  s.bytes = w.bytes();
  return s;
}

void stage_slice_gates(AttentionParams& p, const Tensor& gate_q, const Tensor& gate_k, const detail::SliceProblem& sp,
                       const SliceGates& gates, CUstream_st* stream) {
  if (!sp.has_gate) return;
  launch_gate_transpose(token_head_view(gate_q), sp.B, sp.Tq, sp.HQ, gates.gc, stream);
  launch_gate_transpose(token_head_view(gate_k), sp.B, sp.Tk, sp.HQ, gates.gc_k, stream);
  p.gc = gates.gc, p.gc_k = gates.gc_k;
}

}  // namespace flashgate::cuda
