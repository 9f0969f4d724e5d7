// A device buffer holding a copy of a host vector (every CUDA call checked), for the primitive-level GPU tests.
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <vector>

namespace fgtest {

// Device buffer holding a host vector, and back.
template <class T>
struct DeviceVector {
  T* ptr = nullptr;
  size_t n = 0;
  explicit DeviceVector(const std::vector<T>& host) : n(host.size()) {
    EXPECT_EQ(cudaMalloc(&ptr, n * sizeof(T)), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(ptr, host.data(), n * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  }
  ~DeviceVector() { cudaFree(ptr); }
  std::vector<T> get() const {
    std::vector<T> host(n);
    EXPECT_EQ(cudaMemcpy(host.data(), ptr, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    return host;
  }
};

}  // namespace fgtest
