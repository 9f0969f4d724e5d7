// Tensor maps of the Hopper kernels' token-major tensors ([B, T, heads, D]), one rule for forward and backward.
#pragma once

#include "cuda/host/tensor_map.h"
#include "flashgate/tensor.h"

namespace flashgate::host {

// `t` as a 4-D tensor map (D, T, heads, B) with boxes of 64 dims x `rows` rows (zeros past D fill a bucket's
// padding). Axes of extent 1 take the stride of a packed layout: theirs is never used, and TMA wants every stride
// 16-byte aligned.
cuda::TensorMapShape token_head_map(const Tensor& t, int rows);

// Whether `t` can be described by such a map (16-byte aligned base and strides).
bool token_head_map_ready(const Tensor& t);

}  // namespace flashgate::host
