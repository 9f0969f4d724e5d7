// Argument checking: every rule of SPEC §8, in one place. Each function throws flashgate::Error naming
// the argument and the rule, or returns the validated problem. Nothing here writes to any tensor.
#pragma once

#include "api/problem.h"
#include "flashgate/ops.h"

namespace flashgate::detail {

AttentionProblem check_forward(const ForwardArgs&);
AttentionProblem check_backward(const BackwardArgs&);
DecodeProblem check_decode(const DecodeArgs&);
PagedProblem check_paged(const PagedArgs&);
SliceProblem check_forward_slice(const SliceForwardArgs&);
SliceProblem check_backward_slice(const SliceBackwardArgs&);

}  // namespace flashgate::detail
