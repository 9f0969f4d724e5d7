// A build without CUDA has only the CPU backend.
#include "api/backend.h"

namespace flashgate::detail {
const BackendImpl* cuda_backend() { return nullptr; }
const BackendImpl* hopper_backend() { return nullptr; }
}  // namespace flashgate::detail
