// The few CUDA runtime services the API layer needs, behind plain C++ (stubs in a build without CUDA).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "flashgate/tensor.h"

struct CUstream_st;

namespace flashgate::detail {

bool cuda_device_present();

// Element values of an index tensor (int32/int64, any device), as int64. A CUDA tensor is copied to the
// host, which synchronises: used for `validate` only.
std::vector<int64_t> read_index_values(const Tensor& t, const char* name);

// Throws flashgate::Error(runtime) naming `what` when `status` (a cudaError_t) is not success.
void check_cuda(int status, const char* what);

}  // namespace flashgate::detail
