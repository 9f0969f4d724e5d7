// The Hopper forward's host side (sm_90a kernels in src/cuda/hopper/): which requests it serves, its workspace,
// its tensor maps and the launch sequence on the caller's stream.
#pragma once

#include <cstddef>
#include <string>

#include "api/problem.h"
#include "flashgate/ops.h"

namespace flashgate::host {

// "" when the Hopper forward serves the request, else why not.
std::string hopper_forward_refusal(const ForwardArgs&, const detail::AttentionProblem&);
size_t hopper_forward_workspace(const ForwardArgs&, const detail::AttentionProblem&);
void launch_hopper_forward(const ForwardArgs&, const detail::AttentionProblem&, const Launch&);

// The same for a slice pair (attention_forward_slice): the kernels over the pair's keys, rows shifted against them.
std::string hopper_slice_forward_refusal(const SliceForwardArgs&, const detail::SliceProblem&);
size_t hopper_slice_forward_workspace(const SliceForwardArgs&, const detail::SliceProblem&);
void launch_hopper_slice_forward(const SliceForwardArgs&, const detail::SliceProblem&, const Launch&);

}  // namespace flashgate::host
