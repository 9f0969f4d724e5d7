// The error hook the kernels' launch code calls (common/cuda_check.h): a failed CUDA call becomes a
// flashgate::Error naming the call.
#include <stdexcept>

#include "api/device_runtime.h"
#include "cuda/common/cuda_check.h"

namespace flashgate::cuda {

void raise_cuda_error(int status, const char* what) {
  detail::check_cuda(status, what);
  throw std::logic_error("raise_cuda_error called with a success status");  // unreachable for status != 0
}

}  // namespace flashgate::cuda
