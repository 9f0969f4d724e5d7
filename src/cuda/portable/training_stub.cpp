// Placeholder until the training kernels land: the cuda backend declines these ops.
#include "cuda/portable/training.h"

namespace flashgate::portable {
static const char* kNotYet = "the portable training kernels are not built yet";
std::string cannot_run(const ForwardArgs&, const detail::AttentionProblem&) { return kNotYet; }
std::string cannot_run(const BackwardArgs&, const detail::AttentionProblem&) { return kNotYet; }
size_t workspace(const ForwardArgs&, const detail::AttentionProblem&) { return 0; }
size_t workspace(const BackwardArgs&, const detail::AttentionProblem&) { return 0; }
void run(const ForwardArgs&, const detail::AttentionProblem&, const Launch&) {}
void run(const BackwardArgs&, const detail::AttentionProblem&, const Launch&) {}
}  // namespace flashgate::portable
