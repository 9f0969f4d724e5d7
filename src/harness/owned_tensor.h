// Owning tensors for the CLI, the tests and the benchmarks: allocation on host or GPU, random fills,
// poisoning, copies, and reading values back as doubles. Not part of the library's public API.
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "flashgate/tensor.h"

namespace flashgate::harness {

using Rng = std::mt19937_64;

// The engine of chunk `chunk` of a parallel random fill whose caller drew `base` from its own rng: chunks
// draw independently, so the values depend on the seed alone, not on the thread count.
inline Rng chunk_engine(uint64_t base, int64_t chunk) {
  return Rng(base ^ (static_cast<uint64_t>(chunk) * 0x9E3779B97F4A7C15ull));
}

// A seed that differs run to run (fresh inputs), or FLASHGATE_SEED when set (to reproduce a failure).
uint64_t fresh_seed();

// Host or device memory, freed on destruction.
class Buffer {
 public:
  Buffer() = default;
  Buffer(Device device, size_t bytes);
  void* data() const { return ptr_.get(); }
  size_t bytes() const { return bytes_; }
  Device device() const { return device_; }

 private:
  std::shared_ptr<void> ptr_;
  size_t bytes_ = 0;
  Device device_ = Device::cpu;
};

// A tensor with its own storage. `row_pad` adds that many unused elements after every last-axis row,
// which gives non-contiguous strides (the head axis stays contiguous).
class OwnedTensor {
 public:
  OwnedTensor() = default;
  OwnedTensor(DType dtype, std::vector<int64_t> shape, Device device = Device::cpu, int64_t row_pad = 0);

  const Tensor& view() const { return view_; }
  bool defined() const { return view_.defined(); }
  int64_t numel() const { return view_.numel(); }

  // Fills (host tensors only; copy to the device afterwards).
  void fill_normal(Rng& rng, double mean = 0.0, double stddev = 1.0);
  void fill_uniform(Rng& rng, double lo, double hi);
  void fill_log_sigmoid_normal(Rng& rng);  // g = logsigmoid(N(0,1)), the usual forget gate
  void fill(double value);
  void fill_index(const std::vector<int64_t>& values);  // int tensors, in logical order
  // Every byte of the storage (padding too) set to a NaN pattern, so unwritten outputs show.
  void poison();

  // A copy on `device` with the same shape and strides.
  OwnedTensor to(Device device) const;
  // Elements in logical (row-major) order, as doubles; copies from the GPU first if needed.
  std::vector<double> values() const;
  // Sets elements from logical-order doubles (rounded to the dtype); host tensors only.
  void set_values(const std::vector<double>& values);
  // All bytes of the storage, padding included (to check that nothing was written).
  std::vector<unsigned char> raw_bytes() const;

 private:
  Buffer buffer_;
  Tensor view_;
};

// Copies `src` into `dst` (same dtype, shape and strides; any devices).
void copy(const OwnedTensor& src, OwnedTensor& dst);

// Waits for all queued GPU work (no-op without CUDA).
void device_synchronize();

// "NVIDIA H200 (sm_90, 132 SMs)" for the current GPU, or "" without one.
std::string gpu_description();

}  // namespace flashgate::harness
