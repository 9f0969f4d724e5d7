#include "flashgate/tensor.h"

#include "flashgate/error.h"

namespace flashgate {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::f16: case DType::bf16: return 2;
    case DType::f32: case DType::i32: return 4;
    case DType::f64: case DType::i64: return 8;
    case DType::e4m3: case DType::i8: return 1;
  }
  return 0;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::f16: return "float16";
    case DType::bf16: return "bfloat16";
    case DType::f32: return "float32";
    case DType::f64: return "float64";
    case DType::e4m3: return "float8_e4m3fn";
    case DType::i32: return "int32";
    case DType::i64: return "int64";
    case DType::i8: return "int8";
  }
  return "?";
}

const char* device_name(Device d) { return d == Device::cpu ? "cpu" : "cuda"; }

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int i = 0; i < rank; ++i) n *= shape[i];
  return n;
}

static Tensor make(void* data, DType dtype, std::initializer_list<int64_t> shape, Device device, int index) {
  if (shape.size() > static_cast<size_t>(kMaxRank))
    throw Error(ErrorKind::invalid_argument, "shape", "flashgate: a tensor has at most 4 axes");
  Tensor t;
  t.data = data;
  t.dtype = dtype;
  t.device = device;
  t.device_index = index;
  t.rank = static_cast<int>(shape.size());
  int i = 0;
  for (int64_t s : shape) t.shape[i++] = s;
  int64_t stride = 1;
  for (int a = t.rank - 1; a >= 0; --a) {
    t.stride[a] = stride;
    stride *= t.shape[a];
  }
  return t;
}

Tensor make_tensor(void* data, DType dtype, std::initializer_list<int64_t> shape, Device device, int index) {
  return make(data, dtype, shape, device, index);
}

Tensor make_strided_tensor(void* data, DType dtype, std::initializer_list<int64_t> shape,
                           std::initializer_list<int64_t> stride, Device device, int index) {
  if (stride.size() != shape.size())
    throw Error(ErrorKind::invalid_argument, "stride", "flashgate: stride and shape have different lengths");
  Tensor t = make(data, dtype, shape, device, index);
  int i = 0;
  for (int64_t s : stride) t.stride[i++] = s;
  return t;
}

}  // namespace flashgate
