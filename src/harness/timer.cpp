#include "harness/timer.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "api/device_runtime.h"

#ifdef FLASHGATE_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace flashgate::harness {

Timing time_calls(Device device, int warmup, int iterations, const std::function<void()>& fn) {
  for (int i = 0; i < warmup; ++i) fn();
  std::vector<double> ms;
  ms.reserve(iterations);
#ifdef FLASHGATE_WITH_CUDA
  if (device == Device::cuda) {
    cudaEvent_t start, stop;
    detail::check_cuda(cudaEventCreate(&start), "cudaEventCreate");
    detail::check_cuda(cudaEventCreate(&stop), "cudaEventCreate");
    detail::check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    for (int i = 0; i < iterations; ++i) {
      detail::check_cuda(cudaEventRecord(start), "cudaEventRecord");
      fn();
      detail::check_cuda(cudaEventRecord(stop), "cudaEventRecord");
      detail::check_cuda(cudaEventSynchronize(stop), "cudaEventSynchronize");
      float t = 0;
      detail::check_cuda(cudaEventElapsedTime(&t, start, stop), "cudaEventElapsedTime");
      ms.push_back(t);
    }
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
  }
#endif
  if (device == Device::cpu) {
    for (int i = 0; i < iterations; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      fn();
      ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
  }
  Timing t;
  t.iterations = static_cast<int>(ms.size());
  if (ms.empty()) return t;
  std::sort(ms.begin(), ms.end());
  t.median_ms = ms[ms.size() / 2];
  t.min_ms = ms.front();
  return t;
}

}  // namespace flashgate::harness
