// The plain parameter struct of the attention kernels (forward and backward): pointers, 64-bit element
// strides, sizes, scale and the feature flags. Built once on the host from the checked arguments
// (make_attention_params) and passed by value to every kernel.
#pragma once

#include <cstdint>

#include "api/problem.h"
#include "cuda/common/host_device.h"
#include "flashgate/ops.h"

namespace flashgate::cuda {

// A [B, T, heads, dim] tensor (or a [B, T, heads] one: lse, g) as base pointer + element strides.
// For packed input B == 1 and `t` is the global token index.
struct TokenHeadTensor {
  void* data = nullptr;
  int64_t batch_stride = 0, token_stride = 0, head_stride = 0;
  DType dtype = DType::f32;

  FG_HOST_DEVICE int64_t offset(int64_t b, int64_t t, int64_t h) const {
    return b * batch_stride + t * token_stride + h * head_stride;
  }
  template <class T>
  FG_HOST_DEVICE T* row(int64_t b, int64_t t, int64_t h) const {
    return static_cast<T*>(data) + offset(b, t, h);
  }
};

// Widest byte width (16, 8, 4 or 2) that every row start of a tensor is aligned to. Tile loaders need 16;
// inputs below it are repacked (row_repack.h), outputs below it are stored element by element.
int row_copy_width(const Tensor& t);

struct AttentionParams {
  TokenHeadTensor q, k, v, o;
  TokenHeadTensor lse;    // fp32, dim axis absent; data == nullptr when not requested
  TokenHeadTensor g;      // the caller's gate (fp32/fp16/bf16); kernels read gc instead
  const float* sink = nullptr;          // [HQ] or nullptr
  const void* cu_seqlens = nullptr;     // [N+1] int32/int64, nullptr when dense
  int cu_seqlens_bytes = 0;             // 4 or 8 (0 when dense)
  const float* gc = nullptr;            // workspace: inclusive gate prefix sums, [B][HQ][T] fp32 (see gc_row)

  int64_t B = 0, T = 0, HQ = 0, H = 0, group = 1, num_seqs = 0;
  int K = 0, V = 0;
  DType dtype = DType::bf16;            // of q, k, v, o
  float scale = 0, scale_log2 = 0;      // scale and scale * log2(e) (exp2-domain softmax)
  int window = -1;                      // -1: none; a window >= T is stored as -1 (it hides nothing)
  bool has_gate = false, has_sink = false, has_lse = false, packed = false;
  // Row alignment in bytes (row_copy_width) of q, k, v and o.
  int q_width = 16, k_width = 16, v_width = 16, o_width = 16;

  // Gate prefix sums of batch b, query head h, indexed by the token index (global when packed).
  FG_HOST_DEVICE const float* gc_row(int64_t b, int64_t h) const { return gc + (b * HQ + h) * T; }
};

// Fills the params of a forward (o, lse) from checked arguments; `gc` is set by the caller once the
// workspace is carved.
AttentionParams make_attention_params(const ForwardArgs& a, const detail::AttentionProblem& p);
// The part shared with the backward: q, k, v, g, sink, cu_seqlens, sizes, scale and window.
AttentionParams make_attention_params(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                                      const Tensor& sink, const Tensor& cu_seqlens,
                                      const detail::AttentionProblem& p);

// The view of a [B,T,heads,dim] or [B,T,heads] tensor.
TokenHeadTensor token_head_view(const Tensor& t);

}  // namespace flashgate::cuda
