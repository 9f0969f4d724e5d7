// The portable forward's host side: planning (tiled mma.sync bucket or the simple SIMT kernel), workspace
// sizing and carving, and the launch sequence on the caller's stream (no allocation, no synchronisation).
#pragma once

#include <cstddef>

#include "api/problem.h"
#include "flashgate/ops.h"

namespace flashgate::host {

size_t forward_workspace(const ForwardArgs&, const detail::AttentionProblem&);
void launch_forward(const ForwardArgs&, const detail::AttentionProblem&, const Launch&);

}  // namespace flashgate::host
