// Placeholder until the serving kernels land: the cuda backend declines these ops.
#include "cuda/portable/serving.h"

namespace flashgate::portable {
static const char* kNotYet = "the portable serving kernels are not built yet";
std::string cannot_run(const DecodeArgs&, const detail::DecodeProblem&) { return kNotYet; }
std::string cannot_run(const PagedArgs&, const detail::PagedProblem&) { return kNotYet; }
size_t workspace(const DecodeArgs&, const detail::DecodeProblem&) { return 0; }
size_t workspace(const PagedArgs&, const detail::PagedProblem&) { return 0; }
void run(const DecodeArgs&, const detail::DecodeProblem&, const Launch&) {}
void run(const PagedArgs&, const detail::PagedProblem&, const Launch&) {}
}  // namespace flashgate::portable
