#include "api/device_runtime.h"

#include <string>

#include "flashgate/error.h"
#include "common/host_dtype.h"

#ifdef FLASHGATE_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace flashgate::detail {

void check_cuda(int status, const char* what) {
#ifdef FLASHGATE_WITH_CUDA
  if (status != cudaSuccess)
    throw Error(ErrorKind::runtime, "",
                std::string("flashgate: CUDA error in ") + what + ": " +
                    cudaGetErrorString(static_cast<cudaError_t>(status)));
#else
  if (status != 0) throw Error(ErrorKind::runtime, "", std::string("flashgate: CUDA error in ") + what);
#endif
}

bool cuda_device_present() {
#ifdef FLASHGATE_WITH_CUDA
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" status
    return false;
  }
  return n > 0;
#else
  return false;
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
