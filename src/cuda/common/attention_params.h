// The plain parameter struct of the attention kernels (forward and backward): pointers, 64-bit element
// strides, sizes, scale and the feature flags. Built once on the host from the checked arguments
// (host/attention_params.h) and passed by value to every kernel.
#pragma once

#include <cstdint>

#include "cuda/common/element_type.h"
#include "cuda/common/host_device.h"

namespace flashgate::cuda {

// A [B, T, heads, dim] tensor (or a [B, T, heads] one: lse, g) as base pointer + element strides.
// For packed input B == 1 and `t` is the global token index.
struct TokenHeadTensor {
  void* data = nullptr;
  int64_t batch_stride = 0, token_stride = 0, head_stride = 0;
  ElementType dtype = ElementType::f32;

  FG_HOST_DEVICE int64_t offset(int64_t b, int64_t t, int64_t h) const {
    return b * batch_stride + t * token_stride + h * head_stride;
  }
  template <class T>
  FG_HOST_DEVICE T* row(int64_t b, int64_t t, int64_t h) const {
    return static_cast<T*>(data) + offset(b, t, h);
  }
};

struct AttentionParams {
  TokenHeadTensor q, k, v, o;
  TokenHeadTensor lse;    // fp32, dim axis absent; data == nullptr when not requested
  TokenHeadTensor o_residual;  // int8 like o: its rounding residual (common/o_residual.h); data == nullptr when not
                               // requested
  TokenHeadTensor g;      // the caller's gate (fp32/fp16/bf16); kernels read gc instead
  const float* sink = nullptr;          // [HQ] or nullptr
  const void* cu_seqlens = nullptr;     // [N+1] int32/int64, nullptr when dense
  int cu_seqlens_bytes = 0;             // 4 or 8 (0 when dense)
  const float* gc = nullptr;            // workspace: inclusive gate prefix sums, [B][HQ][T] fp32 (see gc_row)
  // A slice pair (attention_forward_slice; dense): Tk keys per sequence, query row r at key position
  // r + key_shift (q_start - k_start), the keys' cumulative gate in gc_k [B][HQ][Tk]. Tk == 0: the queries' own
  // keys (Tk = T, shift 0, gc_k = gc).
  int64_t Tk = 0;
  int key_shift = 0;
  const float* gc_k = nullptr;
  // Keys at or past this index are masked: a slice pair's Tk, no bound otherwise (a sequence's keys end with its
  // rows). A plain kernel parameter, so that masks in register-bound loops compare against it without a register.
  int key_end = 0x7fffffff;

  int64_t B = 0, T = 0, HQ = 0, H = 0, group = 1, num_seqs = 0;
  int K = 0, V = 0;
  ElementType dtype = ElementType::bf16;  // of q, k, v, o
  float scale = 0, scale_log2 = 0;      // scale and scale * log2(e) (exp2-domain softmax)
  int window = -1;                      // -1: none; a window >= T is stored as -1 (it hides nothing)
  bool has_gate = false, has_sink = false, has_lse = false, packed = false;
  // Row alignment in bytes (16, 8, 4 or 2) of q, k, v and o: tile loaders need 16; inputs below it are
  // repacked (row_repack.h), outputs below it are stored element by element.
  int q_width = 16, k_width = 16, v_width = 16, o_width = 16;
  int o_residual_width = 16;  // the same of o_residual: 2-byte pairs of codes need 2

  // Keys a sequence of len rows attends: a slice pair's Tk, else its own len.
  FG_HOST_DEVICE int key_len(int len) const { return Tk > 0 ? static_cast<int>(Tk) : len; }

  // Gate prefix sums of batch b, query head h, indexed by the token index (global when packed).
  FG_HOST_DEVICE const float* gc_row(int64_t b, int64_t h) const { return gc + (b * HQ + h) * T; }
  // The keys' side of it (slices: gc_k; otherwise gc_row).
  FG_HOST_DEVICE const float* gc_key_row(int64_t b, int64_t h) const {
    return gc_k ? gc_k + (b * HQ + h) * Tk : gc_row(b, h);
  }
};

}  // namespace flashgate::cuda
