// CUDA status checks for launch code. Kernels and their launchers stay free of the public API: a failed call
// goes to raise_cuda_error, which the host layer defines (host/cuda_errors.cpp: it throws flashgate::Error
// naming the call).
#pragma once

#include <cuda_runtime_api.h>

namespace flashgate::cuda {

[[noreturn]] void raise_cuda_error(int status, const char* what);

inline void check_cuda_status(int status, const char* what) {
  if (status != 0) raise_cuda_error(status, what);
}

}  // namespace flashgate::cuda

// Checks the status of one CUDA runtime call, naming the call in the error.
#define FLASHGATE_CUDA_CHECK(call) ::flashgate::cuda::check_cuda_status(static_cast<int>(call), #call)

// After every kernel launch: a bad configuration (too much shared memory, a grid too large) shows up here,
// not at the next unrelated call.
#define FLASHGATE_CHECK_LAUNCH(kernel_name) \
  ::flashgate::cuda::check_cuda_status(static_cast<int>(cudaGetLastError()), "launch of " kernel_name)
