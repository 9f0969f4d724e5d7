// The public entry points: check the arguments, choose a backend, size the workspace, run.
#include <cstdlib>
#include <string>

#include "api/backend.h"
#include "api/check.h"
#include "api/device_runtime.h"
#include "flashgate/error.h"
#include "flashgate/ops.h"

namespace flashgate {

const char* backend_name(Backend b) {
  switch (b) {
    case Backend::automatic: return "auto";
    case Backend::cpu: return "cpu";
    case Backend::cuda: return "cuda";
    case Backend::hopper: return "hopper";
  }
  return "?";
}

Backend parse_backend(const std::string& name, const char* what) {
  if (name == "auto" || name == "automatic" || name.empty()) return Backend::automatic;
  if (name == "cpu") return Backend::cpu;
  if (name == "cuda") return Backend::cuda;
  if (name == "hopper") return Backend::hopper;
  throw Error(ErrorKind::invalid_argument, what,
              std::string("flashgate: ") + what + ": unknown backend '" + name +
                  "' (expected auto, cpu, cuda or hopper)");
}

const char* version() { return "0.1.0"; }

bool cuda_available() { return detail::cuda_backend() != nullptr && detail::cuda_device_present(); }

namespace detail {

void* BackendImpl::allocate_scratch(size_t, CUstream_st*) const { return nullptr; }
void BackendImpl::free_scratch(void*, CUstream_st*) const {}
// Unreachable: cannot_run refuses the slice ops on every backend that does not override these.
void BackendImpl::run(const SliceForwardArgs&, const SliceProblem&, const Launch&) const {
  throw Error(ErrorKind::unsupported, "backend", std::string("flashgate: ") + kSlicesElsewhere);
}
void BackendImpl::run(const SliceBackwardArgs&, const SliceProblem&, const Launch&) const {
  throw Error(ErrorKind::unsupported, "backend", std::string("flashgate: ") + kSlicesElsewhere);
}

namespace {

// The explicit choice wins; FLASHGATE_BACKEND stands in for `auto`.
Backend requested_backend(Backend asked) {
  if (asked != Backend::automatic) return asked;
  const char* env = std::getenv("FLASHGATE_BACKEND");
  return env ? parse_backend(env, "FLASHGATE_BACKEND") : Backend::automatic;
}

const BackendImpl* find_backend(Backend b) {
  switch (b) {
    case Backend::cpu: return &cpu_backend();
    case Backend::cuda: return cuda_backend();
    case Backend::hopper: return hopper_backend();
    case Backend::automatic: break;
  }
  return nullptr;
}

template <class Args>
Device device_of(const Args& a) { return a.q.device; }

// Picks the backend for one call: a forced one must serve the request; `auto` takes the first that
// does among those living on the tensors' device, fastest first.
template <class Args, class Problem>
const BackendImpl& choose_backend(const char* op, const Args& args, const Problem& p, Backend asked) {
  const Backend want = requested_backend(asked);
  if (want != Backend::automatic) {
    const BackendImpl* b = find_backend(want);
    if (!b)
      throw Error(ErrorKind::unsupported, "backend",
                  std::string("flashgate: ") + op + ": backend '" + backend_name(want) +
                      "' is not built into this library");
    const std::string why = b->cannot_run(args, p);
    if (!why.empty())
      throw Error(ErrorKind::unsupported, "backend",
                  std::string("flashgate: ") + op + ": backend '" + backend_name(want) +
                      "' cannot run this request: " + why);
    return *b;
  }
  if (device_of(args) == Device::cpu) return cpu_backend();
  std::string reasons;
  for (Backend c : {Backend::hopper, Backend::cuda}) {
    const BackendImpl* b = find_backend(c);
    if (!b) continue;
    const std::string why = b->cannot_run(args, p);
    if (why.empty()) return *b;
    reasons += std::string(" ") + backend_name(c) + ": " + why + ";";
  }
  throw Error(ErrorKind::unsupported, "backend",
              std::string("flashgate: ") + op + ": no backend can run this request on cuda tensors:" +
                  (reasons.empty() ? std::string(" this library was built without CUDA") : reasons));
}

template <class Args, class Problem>
void run_op(const char* op, const Args& args, const Problem& p, const Launch& launch) {
  const BackendImpl& b = choose_backend(op, args, p, launch.backend);
  const size_t need = b.workspace(args, p);
  if (need <= launch.workspace_bytes) {
    b.run(args, p, launch);
    return;
  }
  if (launch.workspace != nullptr || launch.workspace_bytes != 0)
    throw Error(ErrorKind::invalid_argument, "workspace",
                std::string("flashgate: ") + op + ": workspace of " + std::to_string(launch.workspace_bytes) +
                    " bytes is too small, this call needs " + std::to_string(need) +
                    " (see workspace_size)");
  Launch with_scratch = launch;
  with_scratch.workspace = b.allocate_scratch(need, launch.stream);
  with_scratch.workspace_bytes = need;
  try {
    b.run(args, p, with_scratch);
  } catch (...) {
    b.free_scratch(with_scratch.workspace, launch.stream);
    throw;
  }
  b.free_scratch(with_scratch.workspace, launch.stream);
}

template <class Args, class Problem>
bool serves(const Args& args, const Problem& p, Backend b) {
  if (b == Backend::automatic) return false;
  if (b != Backend::cpu && device_of(args) != Device::cuda) return false;
  const BackendImpl* impl = find_backend(b);
  return impl != nullptr && impl->cannot_run(args, p).empty();
}

template <class Args, class Problem>
size_t workspace_of(const char* op, const Args& args, const Problem& p, Backend asked) {
  return choose_backend(op, args, p, asked).workspace(args, p);
}

}  // namespace
}  // namespace detail

void attention_forward(const ForwardArgs& a, const Launch& l) {
  detail::run_op("attention_forward", a, detail::check_forward(a), l);
}
void attention_backward(const BackwardArgs& a, const Launch& l) {
  detail::run_op("attention_backward", a, detail::check_backward(a), l);
}
void attention_forward_slice(const SliceForwardArgs& a, const Launch& l) {
  detail::run_op("attention_forward_slice", a, detail::check_forward_slice(a), l);
}
void attention_backward_slice(const SliceBackwardArgs& a, const Launch& l) {
  detail::run_op("attention_backward_slice", a, detail::check_backward_slice(a), l);
}
void decode(const DecodeArgs& a, const Launch& l) { detail::run_op("decode", a, detail::check_decode(a), l); }
void paged_attention(const PagedArgs& a, const Launch& l) {
  detail::run_op("paged_attention", a, detail::check_paged(a), l);
}

size_t workspace_size(const ForwardArgs& a, Backend b) {
  return detail::workspace_of("attention_forward", a, detail::check_forward(a), b);
}
size_t workspace_size(const BackwardArgs& a, Backend b) {
  return detail::workspace_of("attention_backward", a, detail::check_backward(a), b);
}
size_t workspace_size(const DecodeArgs& a, Backend b) {
  return detail::workspace_of("decode", a, detail::check_decode(a), b);
}
size_t workspace_size(const PagedArgs& a, Backend b) {
  return detail::workspace_of("paged_attention", a, detail::check_paged(a), b);
}
size_t workspace_size(const SliceForwardArgs& a, Backend b) {
  return detail::workspace_of("attention_forward_slice", a, detail::check_forward_slice(a), b);
}
size_t workspace_size(const SliceBackwardArgs& a, Backend b) {
  return detail::workspace_of("attention_backward_slice", a, detail::check_backward_slice(a), b);
}

Backend resolve_backend(const ForwardArgs& a, Backend b) {
  return detail::choose_backend("attention_forward", a, detail::check_forward(a), b).id();
}
Backend resolve_backend(const BackwardArgs& a, Backend b) {
  return detail::choose_backend("attention_backward", a, detail::check_backward(a), b).id();
}
Backend resolve_backend(const DecodeArgs& a, Backend b) {
  return detail::choose_backend("decode", a, detail::check_decode(a), b).id();
}
Backend resolve_backend(const PagedArgs& a, Backend b) {
  return detail::choose_backend("paged_attention", a, detail::check_paged(a), b).id();
}
Backend resolve_backend(const SliceForwardArgs& a, Backend b) {
  return detail::choose_backend("attention_forward_slice", a, detail::check_forward_slice(a), b).id();
}
Backend resolve_backend(const SliceBackwardArgs& a, Backend b) {
  return detail::choose_backend("attention_backward_slice", a, detail::check_backward_slice(a), b).id();
}

bool backend_serves(const ForwardArgs& a, Backend b) { return detail::serves(a, detail::check_forward(a), b); }
bool backend_serves(const BackwardArgs& a, Backend b) { return detail::serves(a, detail::check_backward(a), b); }
bool backend_serves(const DecodeArgs& a, Backend b) { return detail::serves(a, detail::check_decode(a), b); }
bool backend_serves(const PagedArgs& a, Backend b) { return detail::serves(a, detail::check_paged(a), b); }
bool backend_serves(const SliceForwardArgs& a, Backend b) {
  return detail::serves(a, detail::check_forward_slice(a), b);
}
bool backend_serves(const SliceBackwardArgs& a, Backend b) {
  return detail::serves(a, detail::check_backward_slice(a), b);
}

}  // namespace flashgate
