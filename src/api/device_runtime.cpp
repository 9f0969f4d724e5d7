#include "api/device_runtime.h"

#include <string>

#include "flashgate/error.h"
#include "common/host_dtype.h"

#ifdef FLASHGATE_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace flashgate::detail {

namespace {

// cudaError_t values that mean "no usable GPU here", spelled out so that a build without CUDA (whose messages
// tests check) names them too.
constexpr int kCudaSuccess = 0, kCudaErrorInsufficientDriver = 35, kCudaErrorNoDevice = 100;
#ifdef FLASHGATE_WITH_CUDA
static_assert(kCudaSuccess == cudaSuccess && kCudaErrorInsufficientDriver == cudaErrorInsufficientDriver &&
              kCudaErrorNoDevice == cudaErrorNoDevice);
#endif

// CUDA's name and description of `status` ("cudaErrorNoDevice: no CUDA-capable device is detected").
std::string cuda_reason(int status) {
#ifdef FLASHGATE_WITH_CUDA
  const auto e = static_cast<cudaError_t>(status);
  return std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
#else
  switch (status) {
    case kCudaErrorInsufficientDriver: return "cudaErrorInsufficientDriver";
    case kCudaErrorNoDevice: return "cudaErrorNoDevice";
  }
  return "CUDA status " + std::to_string(status);
#endif
}

bool means_no_device(int status) { return status == kCudaErrorNoDevice || status == kCudaErrorInsufficientDriver; }

}  // namespace

std::string cuda_error_message(int status, const char* what) {
  const std::string reason = cuda_reason(status);
  if (means_no_device(status))
    return std::string("flashgate: CUDA error in ") + what + ": no CUDA device is available (" + reason + ")";
  return std::string("flashgate: CUDA error in ") + what + ": " + reason;
}

void check_cuda(int status, const char* what) {
  if (status != kCudaSuccess) throw Error(ErrorKind::runtime, "", cuda_error_message(status, what));
}

bool cuda_device_present() { return cuda_device_unavailable().empty(); }

std::string cuda_device_unavailable() {
#ifdef FLASHGATE_WITH_CUDA
  int n = 0;
  const cudaError_t status = cudaGetDeviceCount(&n);
  if (status != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" status
    return "no CUDA device is available (" + cuda_reason(status) + ")";
  }
  return n > 0 ? "" : "no CUDA device is available (the driver reports none)";
#else
  return "no CUDA device is available (this build has no CUDA)";
#endif
}

std::vector<int64_t> read_index_values(const Tensor& t, const char* name) {
  const int64_t n = t.numel();
  std::vector<int64_t> out(static_cast<size_t>(n));
  if (n == 0) return out;
  // Gather along the strides from a host copy of the spanned bytes.
  int64_t span = 1;
  for (int a = 0; a < t.rank; ++a) span += (t.shape[a] - 1) * t.stride[a];
  const size_t esize = dtype_size(t.dtype);
  std::vector<unsigned char> bytes(static_cast<size_t>(span) * esize);
  if (t.device == Device::cuda) {
#ifdef FLASHGATE_WITH_CUDA
    check_cuda(cudaMemcpy(bytes.data(), t.data, bytes.size(), cudaMemcpyDeviceToHost), name);
#else
    throw Error(ErrorKind::unsupported, name, std::string("flashgate: ") + name +
                                                  ": a CUDA tensor in a build without CUDA");
#endif
  } else {
    std::memcpy(bytes.data(), t.data, bytes.size());
  }
  int64_t idx[kMaxRank] = {0, 0, 0, 0};
  for (int64_t e = 0; e < n; ++e) {
    int64_t off = 0;
    for (int a = 0; a < t.rank; ++a) off += idx[a] * t.stride[a];
    out[static_cast<size_t>(e)] = host::load_index(bytes.data(), t.dtype, off);
    for (int a = t.rank - 1; a >= 0; --a) {
      if (++idx[a] < t.shape[a]) break;
      idx[a] = 0;
    }
  }
  return out;
}

}  // namespace flashgate::detail
