// The simple (SIMT) forward: one warp per query row and head, fp32 arithmetic throughout. It is the fp32
// path (SPEC §2: fp32 inputs are accepted, correct rather than fast) and the fallback for fp16/bf16 when a
// GPU lacks the shared memory of a tiled bucket (e.g. K > 256 on a 99 KB-per-block part).
#pragma once

#include "cuda/common/attention_params.h"

struct CUstream_st;

namespace flashgate::cuda {

// p.gc must hold the gate prefix sums when p.has_gate.
void launch_forward_simple(const AttentionParams& p, CUstream_st* stream);

}  // namespace flashgate::cuda
