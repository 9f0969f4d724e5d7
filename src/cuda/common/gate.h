// The forget-gate term of SPEC §3: s[i,j] += Gc[i] - Gc[j], with Gc the inclusive prefix sum of g over the
// sequence (per query head). A pre-kernel writes Gc once per call (fp32, into the workspace); tiled kernels
// then need only two loads per score row/column instead of a sum.
#pragma once

#include <cstdint>

#include "cuda/common/attention_params.h"

struct CUstream_st;

namespace flashgate::cuda {

// Floats of workspace the gate prefix sums take: [B][HQ][T].
inline int64_t gate_prefix_elements(const AttentionParams& p) { return p.has_gate ? p.B * p.HQ * p.T : 0; }

// gc[(b*HQ + h)*T + t] = g[b, seq_start, h] + ... + g[b, t, h] within t's sequence, fp32, for every
// sequence and query head (p.gc must point at gate_prefix_elements(p) floats). Stream-ordered, no sync.
void launch_gate_prefix_sum(const AttentionParams& p, float* gc, CUstream_st* stream);

// out[(b*HQ + h)*T + t] = g[b, t, h] as fp32: a slice pair's cumulative gate (given whole, attention_forward_slice)
// in the layout the kernels read.
void launch_gate_transpose(const TokenHeadTensor& g, int64_t B, int64_t T, int64_t HQ, float* out,
                           CUstream_st* stream);

}  // namespace flashgate::cuda
