#include "cuda/host/hopper_maps.h"

#include "cuda/host/attention_params.h"

namespace flashgate::host {

cuda::TensorMapShape token_head_map(const Tensor& t, int rows) {
  cuda::TensorMapShape s;
  s.rank = 4;
  s.dims[0] = static_cast<uint64_t>(t.shape[3]), s.dims[1] = static_cast<uint64_t>(t.shape[1]);
  s.dims[2] = static_cast<uint64_t>(t.shape[2]), s.dims[3] = static_cast<uint64_t>(t.shape[0]);
  const int64_t packed[4] = {1, t.shape[3], t.shape[3] * t.shape[2], t.shape[3] * t.shape[2] * t.shape[1]};
  const int axis_of[4] = {3, 1, 2, 0};  // map dim -> tensor axis
  for (int i = 1; i < 4; ++i) {
    const int axis = axis_of[i];
    s.strides[i] = static_cast<uint64_t>(t.shape[axis] > 1 ? t.stride[axis] : packed[i]);
  }
  s.box[0] = 64, s.box[1] = static_cast<uint32_t>(rows), s.box[2] = 1, s.box[3] = 1;
  return s;
}

bool token_head_map_ready(const Tensor& t) {
  return cuda::tensor_map_aligned(t.data, cuda::element_type(t.dtype), token_head_map(t, 64));
}

}  // namespace flashgate::host
