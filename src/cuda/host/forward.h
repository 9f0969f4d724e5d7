// The portable forward's host side: planning (tiled mma.sync bucket or the simple SIMT kernel), workspace
// sizing and carving, and the launch sequence on the caller's stream (no allocation, no synchronisation); and the
// forward of a slice pair on the same tiled kernels.
#pragma once

#include <cstddef>
#include <string>

#include "api/problem.h"
#include "flashgate/ops.h"

namespace flashgate::host {

size_t forward_workspace(const ForwardArgs&, const detail::AttentionProblem&);
void launch_forward(const ForwardArgs&, const detail::AttentionProblem&, const Launch&);

// A slice pair (context parallelism): the tiled kernels over the key slice, fp16 / bf16, dense.
std::string slice_forward_refusal(const SliceForwardArgs&, const detail::SliceProblem&);
size_t slice_forward_workspace(const SliceForwardArgs&, const detail::SliceProblem&);
void launch_slice_forward(const SliceForwardArgs&, const detail::SliceProblem&, const Launch&);

}  // namespace flashgate::host
