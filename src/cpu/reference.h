// The CPU backend: the fp64 reference for the whole contract (SPEC §3-§6). Readable first; blocked and
// multithreaded enough that the GPU tests can lean on it. Arguments arrive checked (src/api).
#pragma once

#include "api/problem.h"
#include "flashgate/ops.h"

namespace flashgate::cpu {

void attention_forward(const ForwardArgs&, const detail::AttentionProblem&);
void attention_backward(const BackwardArgs&, const detail::AttentionProblem&);
void decode(const DecodeArgs&, const detail::DecodeProblem&);
void paged_attention(const PagedArgs&, const detail::PagedProblem&);
void attention_forward_slice(const SliceForwardArgs&, const detail::SliceProblem&);
void attention_backward_slice(const SliceBackwardArgs&, const detail::SliceProblem&);

}  // namespace flashgate::cpu
