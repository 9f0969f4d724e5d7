// The few CUDA runtime services the API layer needs, behind plain C++ (stubs in a build without CUDA).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "flashgate/tensor.h"

struct CUstream_st;

namespace flashgate::detail {

bool cuda_device_present();

// Why this process has no usable CUDA device: "" when it has one, else "no CUDA device is available (<reason>)".
std::string cuda_device_unavailable();

// Element values of an index tensor (int32/int64, any device), as int64. A CUDA tensor is copied to the
// host, which synchronises: used for `validate` only.
std::vector<int64_t> read_index_values(const Tensor& t, const char* name);

// The message for CUDA call `what` failing with `status` (a cudaError_t). The statuses that mean the machine
// has no usable GPU (no device; no driver, or one older than the runtime) say "no CUDA device is available"
// and keep CUDA's name for the reason: users read them as a missing GPU, not as a version problem to fix.
std::string cuda_error_message(int status, const char* what);

// Throws flashgate::Error(runtime) with cuda_error_message when `status` (a cudaError_t) is not success.
void check_cuda(int status, const char* what);

}  // namespace flashgate::detail
