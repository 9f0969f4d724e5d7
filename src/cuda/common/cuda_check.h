// CUDA error checks that raise flashgate::Error (ErrorKind::runtime) through detail::check_cuda.
#pragma once

#include <cuda_runtime_api.h>

#include "api/device_runtime.h"

// Checks the status of one CUDA runtime call, naming the call in the error.
#define FLASHGATE_CUDA_CHECK(call) ::flashgate::detail::check_cuda(static_cast<int>(call), #call)

// After every kernel launch: a bad configuration (too much shared memory, a grid too large) shows up here,
// not at the next unrelated call.
#define FLASHGATE_CHECK_LAUNCH(kernel_name) \
  ::flashgate::detail::check_cuda(static_cast<int>(cudaGetLastError()), "launch of " kernel_name)
