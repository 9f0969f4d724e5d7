// The portable training kernels behind the cuda backend: the forward (forward.h) serves the whole
// contract (fp16/bf16 tiled mma.sync kernels, fp32 and small-shared-memory GPUs on a SIMT kernel).
#include <limits>

#include "cuda/portable/forward.h"
#include "cuda/portable/training.h"

namespace flashgate::portable {

std::string cannot_run(const ForwardArgs&, const detail::AttentionProblem& p) {
  // Positions inside a sequence are 32-bit in the kernels.
  if (p.T > std::numeric_limits<int>::max()) return "sequences longer than 2^31 - 1 tokens are not supported";
  return "";
}
size_t workspace(const ForwardArgs& a, const detail::AttentionProblem& p) { return forward_workspace(a, p); }
void run(const ForwardArgs& a, const detail::AttentionProblem& p, const Launch& l) { launch_forward(a, p, l); }

// ---- backward: owned by the backward kernels (backward.h) once they land ----------------------------------
static const char* kBackwardNotYet = "the portable backward kernels are not built yet";
std::string cannot_run(const BackwardArgs&, const detail::AttentionProblem&) { return kBackwardNotYet; }
size_t workspace(const BackwardArgs&, const detail::AttentionProblem&) { return 0; }
void run(const BackwardArgs&, const detail::AttentionProblem&, const Launch&) {}

}  // namespace flashgate::portable
