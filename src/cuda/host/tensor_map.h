// TMA tensor maps for the Hopper kernels, encoded on the host through the driver's cuTensorMapEncodeTiled,
// which is looked up at run time (cudaGetDriverEntryPoint): the library has no link-time dependency on libcuda.
#pragma once

#include <cuda.h>

#include <cstdint>

#include "cuda/common/element_type.h"

namespace flashgate::cuda {

// A strided tensor of up to 4 dims, innermost first: dims[0] elements are contiguous, dims[i] is `strides[i]`
// elements apart (i >= 1). Copies move boxes of `box[0..rank)` elements, with 128-byte swizzling (box[0] of a
// 16-bit type is then at most 64) and zeros for elements outside the tensor.
struct TensorMapShape {
  int rank = 2;
  uint64_t dims[4] = {1, 1, 1, 1};
  uint64_t strides[4] = {1, 1, 1, 1};  // elements; strides[0] is 1
  uint32_t box[4] = {1, 1, 1, 1};
};

// Raises flashgate::Error when the driver cannot encode it (alignment: base and strides in bytes must be
// multiples of 16).
CUtensorMap make_tensor_map(const void* base, ElementType type, const TensorMapShape& shape);

// Whether a tensor of this base and these strides can be described by a tensor map (16-byte alignment).
bool tensor_map_aligned(const void* base, ElementType type, const TensorMapShape& shape);

}  // namespace flashgate::cuda
