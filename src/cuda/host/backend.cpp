// The CUDA backends behind the dispatch interface: `cuda` (the portable sm80+ kernels) and, where built, `hopper`
// (the sm_90a kernels). Common refusals live here; each kernel family adds its own through its host module.
#include <cuda_runtime_api.h>

#include <string>

#include "api/backend.h"
#include "api/device_runtime.h"
#include "cuda/host/backward.h"
#include "cuda/host/hopper_forward.h"
#include "cuda/host/serving.h"
#include "cuda/host/training.h"
#include "flashgate/error.h"

namespace flashgate::detail {
namespace {

// Device compute capability (major*10+minor) of device `index`, cached per device.
int compute_capability(int index) {
  static int cached[64] = {};
  if (index < 0 || index >= 64) return 0;
  if (cached[index] == 0) {
    int major = 0, minor = 0;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, index) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, index) != cudaSuccess) {
      cudaGetLastError();
      return 0;
    }
    cached[index] = major * 10 + minor;
  }
  return cached[index];
}

template <class Args>
std::string common_refusal(const Args& a) {
  if (a.q.device != Device::cuda) return "the cuda backend needs tensors in GPU memory";
  if (a.q.dtype == DType::f64) return "float64 runs on the cpu backend only";
  const int cc = compute_capability(a.q.device_index);
  if (cc < 80) return "needs an sm80 or newer GPU (found compute capability " + std::to_string(cc) + ")";
  return "";
}

template <class Args, class Problem>
std::string refusal(const Args& a, const Problem& p) {
  std::string why = common_refusal(a);
  return why.empty() ? host::cannot_run(a, p) : why;
}

class CudaBackend final : public BackendImpl {
 public:
  Backend id() const override { return Backend::cuda; }
  std::string cannot_run(const ForwardArgs& a, const AttentionProblem& p) const override { return refusal(a, p); }
  std::string cannot_run(const BackwardArgs& a, const AttentionProblem& p) const override { return refusal(a, p); }
  std::string cannot_run(const DecodeArgs& a, const DecodeProblem& p) const override { return refusal(a, p); }
  std::string cannot_run(const PagedArgs& a, const PagedProblem& p) const override { return refusal(a, p); }
  std::string cannot_run(const SliceForwardArgs& a, const SliceProblem& p) const override { return refusal(a, p); }
  std::string cannot_run(const SliceBackwardArgs& a, const SliceProblem& p) const override { return refusal(a, p); }

  size_t workspace(const ForwardArgs& a, const AttentionProblem& p) const override { return host::workspace(a, p); }
  size_t workspace(const SliceForwardArgs& a, const SliceProblem& p) const override { return host::workspace(a, p); }
  size_t workspace(const SliceBackwardArgs& a, const SliceProblem& p) const override { return host::workspace(a, p); }
  size_t workspace(const BackwardArgs& a, const AttentionProblem& p) const override { return host::workspace(a, p); }
  size_t workspace(const DecodeArgs& a, const DecodeProblem& p) const override { return host::workspace(a, p); }
  size_t workspace(const PagedArgs& a, const PagedProblem& p) const override { return host::workspace(a, p); }

  void run(const ForwardArgs& a, const AttentionProblem& p, const Launch& l) const override { host::run(a, p, l); }
  void run(const BackwardArgs& a, const AttentionProblem& p, const Launch& l) const override { host::run(a, p, l); }
  void run(const DecodeArgs& a, const DecodeProblem& p, const Launch& l) const override { host::run(a, p, l); }
  void run(const PagedArgs& a, const PagedProblem& p, const Launch& l) const override { host::run(a, p, l); }
  void run(const SliceForwardArgs& a, const SliceProblem& p, const Launch& l) const override { host::run(a, p, l); }
  void run(const SliceBackwardArgs& a, const SliceProblem& p, const Launch& l) const override { host::run(a, p, l); }

  void* allocate_scratch(size_t bytes, CUstream_st* stream) const override {
    void* ptr = nullptr;
    check_cuda(cudaMallocAsync(&ptr, bytes, stream), "cudaMallocAsync (workspace)");
    return ptr;
  }
  void free_scratch(void* ptr, CUstream_st* stream) const override {
    if (ptr) check_cuda(cudaFreeAsync(ptr, stream), "cudaFreeAsync (workspace)");
  }
};

}  // namespace

const BackendImpl* cuda_backend() {
  static const CudaBackend backend;
  return &backend;
}

#if defined(FLASHGATE_WITH_HOPPER)
namespace {

// The `hopper` backend: the sm_90a kernels of src/cuda/hopper. It serves the training forward and backward for the
// shapes its kernels take (host/hopper_forward.cpp, host/hopper_backward.cpp); `auto` tries it before the portable
// kernels.
class HopperBackend final : public BackendImpl {
 public:
  using BackendImpl::workspace;  // the ops it does not serve keep the base's (never asked: cannot_run refuses)
  Backend id() const override { return Backend::hopper; }

  std::string cannot_run(const ForwardArgs& a, const AttentionProblem& p) const override {
    std::string why = hopper_refusal(a);
    return why.empty() ? host::hopper_forward_refusal(a, p) : why;
  }
  std::string cannot_run(const BackwardArgs& a, const AttentionProblem& p) const override {
    std::string why = hopper_refusal(a);
    return why.empty() ? host::hopper_backward_refusal(a, p) : why;
  }
  std::string cannot_run(const SliceForwardArgs& a, const SliceProblem& p) const override {
    std::string why = hopper_refusal(a);
    return why.empty() ? host::hopper_slice_forward_refusal(a, p) : why;
  }
  std::string cannot_run(const SliceBackwardArgs& a, const SliceProblem& p) const override {
    std::string why = hopper_refusal(a);
    return why.empty() ? host::hopper_slice_backward_refusal(a, p) : why;
  }
  std::string cannot_run(const DecodeArgs& a, const DecodeProblem&) const override { return later(a); }
  std::string cannot_run(const PagedArgs& a, const PagedProblem&) const override { return later(a); }

  size_t workspace(const ForwardArgs& a, const AttentionProblem& p) const override {
    return host::hopper_forward_workspace(a, p);
  }
  size_t workspace(const BackwardArgs& a, const AttentionProblem& p) const override {
    return host::backward_workspace(a, p, host::DkdvKernels::hopper);
  }
  size_t workspace(const SliceForwardArgs& a, const SliceProblem& p) const override {
    return host::hopper_slice_forward_workspace(a, p);
  }
  size_t workspace(const SliceBackwardArgs& a, const SliceProblem& p) const override {
    return host::slice_backward_workspace(a, p, host::DkdvKernels::hopper);
  }
  void run(const ForwardArgs& a, const AttentionProblem& p, const Launch& l) const override {
    host::launch_hopper_forward(a, p, l);
  }
  void run(const SliceForwardArgs& a, const SliceProblem& p, const Launch& l) const override {
    host::launch_hopper_slice_forward(a, p, l);
  }
  void run(const SliceBackwardArgs& a, const SliceProblem& p, const Launch& l) const override {
    host::launch_slice_backward(a, p, l, host::DkdvKernels::hopper);
  }
  void run(const BackwardArgs& a, const AttentionProblem& p, const Launch& l) const override {
    host::launch_backward(a, p, l, host::DkdvKernels::hopper);
  }
  // cannot_run refuses these, so dispatch never calls them; say so should that ever change.
  void run(const DecodeArgs& a, const DecodeProblem&, const Launch&) const override { refuse(a); }
  void run(const PagedArgs& a, const PagedProblem&, const Launch&) const override { refuse(a); }

  void* allocate_scratch(size_t bytes, CUstream_st* stream) const override {
    return cuda_backend()->allocate_scratch(bytes, stream);
  }
  void free_scratch(void* ptr, CUstream_st* stream) const override { cuda_backend()->free_scratch(ptr, stream); }

 private:
  template <class Args>
  static std::string hopper_refusal(const Args& a) {
    std::string why = common_refusal(a);
    if (!why.empty()) return why;
    const int cc = compute_capability(a.q.device_index);
    if (cc != 90) return "needs an sm_90 GPU (found compute capability " + std::to_string(cc) + ")";
    return "";
  }
  template <class Args>
  static void refuse(const Args& a) {
    throw Error(ErrorKind::unsupported, "backend", "flashgate: backend 'hopper': " + later(a));
  }
  template <class Args>
  static std::string later(const Args& a) {
    std::string why = hopper_refusal(a);
    return why.empty() ? "runs the training forward and backward only so far" : why;
  }
};

}  // namespace

const BackendImpl* hopper_backend() {
  static const HopperBackend backend;
  return &backend;
}
#else
// This build has no Hopper kernels (FLASHGATE_HOPPER off): the portable ones serve every call.
const BackendImpl* hopper_backend() { return nullptr; }
#endif

}  // namespace flashgate::detail
