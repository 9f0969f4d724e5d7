// Non-owning tensor views: what every flashgate op takes and writes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>

namespace flashgate {

// Element types. f64 is accepted by the CPU backend only (the fp64 reference mode used by tests);
// e4m3 only for paged KV caches; i32/i64 only for index tensors; i8 only for the output's rounding residual
// (ForwardArgs::o_residual).
enum class DType : int { f16, bf16, f32, f64, e4m3, i32, i64, i8 };

enum class Device : int { cpu, cuda };

constexpr int kMaxRank = 4;

size_t dtype_size(DType);
const char* dtype_name(DType);
const char* device_name(Device);

// A view of memory owned by the caller. `rank == 0 && data == nullptr` means "not given" (optional
// arguments); a present tensor has rank 1..4. Strides are in elements and may be anything except that
// the last axis must be contiguous (stride 1) wherever it has more than one element.
struct Tensor {
  void* data = nullptr;
  DType dtype = DType::f32;
  Device device = Device::cpu;
  int device_index = 0;
  int rank = 0;
  int64_t shape[kMaxRank] = {0, 0, 0, 0};
  int64_t stride[kMaxRank] = {0, 0, 0, 0};

  bool defined() const { return rank > 0 || data != nullptr; }
  int64_t numel() const;
  int64_t size(int axis) const { return shape[axis]; }
};

// A contiguous (row-major) view of `data` with the given shape.
Tensor make_tensor(void* data, DType dtype, std::initializer_list<int64_t> shape,
                   Device device = Device::cpu, int device_index = 0);

// The same view with explicit strides (in elements).
Tensor make_strided_tensor(void* data, DType dtype, std::initializer_list<int64_t> shape,
                           std::initializer_list<int64_t> stride, Device device = Device::cpu,
                           int device_index = 0);

}  // namespace flashgate
