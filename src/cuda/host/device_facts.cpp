#include "cuda/host/device_facts.h"

#include <cuda_runtime_api.h>

#include <mutex>

#include "cuda/common/cuda_check.h"

namespace flashgate::host {

DeviceFacts device_facts(int device) {
  static std::mutex mutex;
  static DeviceFacts cache[64];
  static bool known[64] = {};
  const bool cacheable = device >= 0 && device < 64;
  std::lock_guard<std::mutex> lock(mutex);
  if (cacheable && known[device]) return cache[device];
  DeviceFacts f;
  FLASHGATE_CUDA_CHECK(cudaDeviceGetAttribute(&f.sms, cudaDevAttrMultiProcessorCount, device));
  FLASHGATE_CUDA_CHECK(cudaDeviceGetAttribute(&f.smem_per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, device));
  FLASHGATE_CUDA_CHECK(cudaDeviceGetAttribute(&f.smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  FLASHGATE_CUDA_CHECK(cudaDeviceGetAttribute(&f.major, cudaDevAttrComputeCapabilityMajor, device));
  FLASHGATE_CUDA_CHECK(cudaDeviceGetAttribute(&f.l2_bytes, cudaDevAttrL2CacheSize, device));
  if (cacheable) cache[device] = f, known[device] = true;
  return f;
}

}  // namespace flashgate::host
