// Checked arguments -> the kernels' plain params (common/attention_params.h), and the dtype map.
#pragma once

#include <string>

#include "api/problem.h"
#include "cuda/common/attention_params.h"
#include "cuda/common/element_type.h"
#include "flashgate/ops.h"

namespace flashgate::cuda {

ElementType element_type(DType d);

// Widest byte width (16, 8, 4 or 2) that every row start of a tensor is aligned to. Tile loaders need 16;
// inputs below it are repacked (row_repack.h), outputs below it are stored element by element.
int row_copy_width(const Tensor& t);

// The view of a [B,T,heads,dim] or [B,T,heads] tensor.
TokenHeadTensor token_head_view(const Tensor& t);

// Fills the params of a forward (o, lse) from checked arguments; `gc` is set by the caller once the
// workspace is carved.
AttentionParams make_attention_params(const ForwardArgs& a, const detail::AttentionProblem& p);
// The part shared with the backward: q, k, v, g, sink, cu_seqlens, sizes, scale and window.
AttentionParams make_attention_params(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                                      const Tensor& sink, const Tensor& cu_seqlens,
                                      const detail::AttentionProblem& p);

// A slice pair's rows against its keys in the kernels' 32-bit terms: row r at key position r + shift, and the
// window (-1: none). Positions may reach 2^62: rows past every key see by the window alone, measured from
// shift Tk; rows before every key see nothing at any shift below -Tq; a window longer than the largest distance
// hides nothing.
struct SlicePositions {
  int shift = 0, window = -1;
};
SlicePositions slice_positions(const detail::SliceProblem& p);
// A slice pair's parameters (forward and backward): q, k, v and sink as make_attention_params takes a dense batch of
// Tq rows, with the pair's Tk keys, key_shift and window (slice_positions) and lse expected; the caller adds the rest.
AttentionParams make_slice_params(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& sink,
                                  const detail::SliceProblem& p);
// A slice pair's forward params: make_slice_params with the outputs o, o_residual and lse.
AttentionParams make_slice_forward_params(const SliceForwardArgs& a, const detail::SliceProblem& p);
// A slice pair's cumulative gates in the layout the kernels read ([B][HQ][T] fp32: launch_gate_transpose), gate_q's
// into gc (B HQ Tq floats) and gate_k's into gc_k (B HQ Tk), which p then reads (p.gc, p.gc_k). The forward's
// workspace is these two alone: carve_slice_gates carves them from `base` (sizes only when null; none without a gate).
struct SliceGates {
  float *gc = nullptr, *gc_k = nullptr;
  size_t bytes = 0;
};
SliceGates carve_slice_gates(const detail::SliceProblem& sp, void* base);
void stage_slice_gates(AttentionParams& p, const Tensor& gate_q, const Tensor& gate_k, const detail::SliceProblem& sp,
                       const SliceGates& gates, CUstream_st* stream);
// What the cuda backend's slice kernels (forward and backward) cannot take, "" when they can: fp16 / bf16 only,
// slices below 2^30 tokens (a row's key position, row + shift with |shift| <= Tq + Tk, stays 32-bit), and a key
// slice of one token or more.
std::string slice_refusal(const Tensor& q, const detail::SliceProblem& p);

}  // namespace flashgate::cuda
