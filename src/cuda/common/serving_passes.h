// The serving passes every GPU generation shares: the split-KV merge and decode's gate terms (host-side
// launchers; the kernels live in split_merge.cu and decode_gate.cu).
#pragma once

#include <cstdint>

#include "cuda/common/element_type.h"
#include "cuda/common/serving_params.h"

struct CUstream_st;

namespace flashgate::cuda {

// Combines p.num_splits partials per (query row, query head) into o, with the sink. `dependent`: launched as
// a programmatic dependent of the split kernel (sm_90+), so its start overlaps that kernel's tail.
void launch_paged_merge(const ServingParams& p, bool dependent, CUstream_st* stream);

// decode's gate: out[h * T + t] = log2(e) * mul * (g[t+1, h] + ... + g[end-1, h]) within t's sequence
// (the gate term Gc[L-1] - Gc[t] of SPEC §5, summed from the end so near keys keep full precision).
struct DecodeGateArgs {
  const void* g = nullptr;
  ElementType g_dtype = ElementType::f32;
  int64_t g_token_stride = 0, g_head_stride = 1;
  const void* cu = nullptr;
  int cu_bytes = 4;
  int64_t cu_stride = 1;
  int64_t num_seqs = 0, T = 0;
  int HQ = 0;
  float mul = 1.f;  // scale with gate_scale, else 1
};
void launch_decode_gate_bias(const DecodeGateArgs& a, float* out, CUstream_st* stream);

}  // namespace flashgate::cuda
