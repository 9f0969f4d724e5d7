// The CPU backend behind the dispatch interface.
#include <string>

#include "api/backend.h"
#include "cpu/reference.h"

namespace flashgate::detail {
namespace {

template <class Args>
std::string host_only(const Args& a) {
  return a.q.device == Device::cpu ? "" : "the cpu backend needs every tensor in host memory";
}

class CpuBackend final : public BackendImpl {
 public:
  Backend id() const override { return Backend::cpu; }
  std::string cannot_run(const ForwardArgs& a, const AttentionProblem&) const override { return host_only(a); }
  std::string cannot_run(const BackwardArgs& a, const AttentionProblem&) const override { return host_only(a); }
  std::string cannot_run(const DecodeArgs& a, const DecodeProblem&) const override { return host_only(a); }
  std::string cannot_run(const PagedArgs& a, const PagedProblem&) const override { return host_only(a); }
  void run(const ForwardArgs& a, const AttentionProblem& p, const Launch&) const override { cpu::attention_forward(a, p); }
  void run(const BackwardArgs& a, const AttentionProblem& p, const Launch&) const override { cpu::attention_backward(a, p); }
  void run(const DecodeArgs& a, const DecodeProblem& p, const Launch&) const override { cpu::decode(a, p); }
  void run(const PagedArgs& a, const PagedProblem& p, const Launch&) const override { cpu::paged_attention(a, p); }
  std::string cannot_run(const SliceForwardArgs& a, const SliceProblem&) const override { return host_only(a); }
  std::string cannot_run(const SliceBackwardArgs& a, const SliceProblem&) const override { return host_only(a); }
  void run(const SliceForwardArgs& a, const SliceProblem& p, const Launch&) const override {
    cpu::attention_forward_slice(a, p);
  }
  void run(const SliceBackwardArgs& a, const SliceProblem& p, const Launch&) const override {
    cpu::attention_backward_slice(a, p);
  }
};

}  // namespace

const BackendImpl& cpu_backend() {
  static const CpuBackend backend;
  return backend;
}

}  // namespace flashgate::detail
