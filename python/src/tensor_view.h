// Python objects -> flashgate::Tensor views, through DLPack (nanobind's ndarray import).
//
// An argument is one of
//   None                              -> an absent (optional) tensor
//   a DLPack producer or capsule      -> numpy, torch, cupy, jax arrays, or `torch.utils.dlpack.to_dlpack(t)`
//   (tensor, "dtype name")            -> the same bytes read as another dtype of equal element size; how
//                                        float8_e4m3fn (and numpy's ml_dtypes bfloat16) travel where the
//                                        producer cannot export that dtype through DLPack.
// The views borrow the producer's memory: a TensorScope keeps every imported tensor alive until the call ends.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstddef>
#include <string>
#include <vector>

#include "flashgate/tensor.h"

namespace flashgate::python {

namespace nb = nanobind;

// Raw bytes of a caller-given workspace.
struct Buffer {
  void* data = nullptr;
  size_t bytes = 0;
  Device device = Device::cpu;
  int device_index = 0;
};

class TensorScope {
 public:
  explicit TensorScope(const char* op) : op_(op) {}

  Tensor input(nb::handle obj, const char* name);
  // Outputs must be writable (a read-only numpy array or DLPack export is refused).
  Tensor output(nb::handle obj, const char* name);
  // Any dtype, contiguous: scratch memory.
  Buffer buffer(nb::handle obj, const char* name);

  const char* op() const { return op_; }
  [[noreturn]] void fail_type(const char* name, const std::string& rule) const;
  [[noreturn]] void fail_value(const char* name, const std::string& rule) const;

 private:
  template <class Array>
  Tensor view(const Array& array, const char* name, nb::handle dtype_override);

  const char* op_;
  std::vector<nb::ndarray<nb::ro>> inputs_;
  std::vector<nb::ndarray<>> outputs_;
};

}  // namespace flashgate::python
