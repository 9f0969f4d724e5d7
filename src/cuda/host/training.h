// Portable (sm80+) training kernels: attention forward and backward (SPEC §3-§4), and a slice pair's forward and backward.
#pragma once

#include <cstddef>
#include <string>

#include "api/problem.h"
#include "flashgate/ops.h"

namespace flashgate::host {

// "" when these kernels serve the request, else why not.
std::string cannot_run(const ForwardArgs&, const detail::AttentionProblem&);
std::string cannot_run(const BackwardArgs&, const detail::AttentionProblem&);
std::string cannot_run(const SliceForwardArgs&, const detail::SliceProblem&);
std::string cannot_run(const SliceBackwardArgs&, const detail::SliceProblem&);  // slice_backward.cpp

size_t workspace(const ForwardArgs&, const detail::AttentionProblem&);
size_t workspace(const BackwardArgs&, const detail::AttentionProblem&);
size_t workspace(const SliceForwardArgs&, const detail::SliceProblem&);
size_t workspace(const SliceBackwardArgs&, const detail::SliceProblem&);

void run(const ForwardArgs&, const detail::AttentionProblem&, const Launch&);
void run(const BackwardArgs&, const detail::AttentionProblem&, const Launch&);
void run(const SliceForwardArgs&, const detail::SliceProblem&, const Launch&);
void run(const SliceBackwardArgs&, const detail::SliceProblem&, const Launch&);

}  // namespace flashgate::host
