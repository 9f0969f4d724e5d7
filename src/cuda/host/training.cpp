// The portable training kernels behind the cuda backend: the forward (forward.h) serves the whole
// contract (fp16/bf16 tiled mma.sync kernels, fp32 and small-shared-memory GPUs on a SIMT kernel).
#include <limits>

#include "cuda/host/backward.h"
#include "cuda/host/forward.h"
#include "cuda/host/training.h"

namespace flashgate::host {

std::string cannot_run(const ForwardArgs&, const detail::AttentionProblem& p) {
  // Positions inside a sequence are 32-bit in the kernels.
  if (p.T > std::numeric_limits<int>::max()) return "sequences longer than 2^31 - 1 tokens are not supported";
  return "";
}
size_t workspace(const ForwardArgs& a, const detail::AttentionProblem& p) { return forward_workspace(a, p); }
void run(const ForwardArgs& a, const detail::AttentionProblem& p, const Launch& l) { launch_forward(a, p, l); }

// ---- backward: the backward kernels (backward.h) ------------------------------------------------------------
std::string cannot_run(const BackwardArgs& a, const detail::AttentionProblem& p) { return backward_refusal(a, p); }
size_t workspace(const BackwardArgs& a, const detail::AttentionProblem& p) { return backward_workspace(a, p); }
void run(const BackwardArgs& a, const detail::AttentionProblem& p, const Launch& l) { launch_backward(a, p, l); }

// ---- slice pairs: the forward's tiled kernels (forward.h); the backward in slice_backward.cpp -------------------
std::string cannot_run(const SliceForwardArgs& a, const detail::SliceProblem& p) { return slice_forward_refusal(a, p); }
size_t workspace(const SliceForwardArgs& a, const detail::SliceProblem& p) { return slice_forward_workspace(a, p); }
void run(const SliceForwardArgs& a, const detail::SliceProblem& p, const Launch& l) { launch_slice_forward(a, p, l); }

}  // namespace flashgate::host
