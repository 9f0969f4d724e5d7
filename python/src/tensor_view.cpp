#include "tensor_view.h"

#include <cstdint>
#include <string>

#include "flashgate/error.h"

namespace flashgate::python {
namespace {

// DLPack type codes (dlpack.h): the first three are stable since DLPack 0.1; kDLFloat8_e4m3fn is 10 since
// DLPack 1.1 (spelled out so that older nanobind headers, which lack the name, build too).
constexpr uint8_t kDLInt = 0, kDLFloat = 2, kDLBfloat = 4, kDLFloat8_e4m3fn = 10;

constexpr DType kAllTypes[] = {DType::f16, DType::bf16, DType::f32, DType::f64, DType::e4m3, DType::i32, DType::i64, DType::i8};

bool from_dlpack_dtype(const nb::dlpack::dtype& t, DType* out) {
  if (t.lanes != 1) return false;
  if (t.code == kDLFloat && t.bits == 16) *out = DType::f16;
  else if (t.code == kDLFloat && t.bits == 32) *out = DType::f32;
  else if (t.code == kDLFloat && t.bits == 64) *out = DType::f64;
  else if (t.code == kDLBfloat && t.bits == 16) *out = DType::bf16;
  else if (t.code == kDLFloat8_e4m3fn && t.bits == 8) *out = DType::e4m3;
  else if (t.code == kDLInt && t.bits == 32) *out = DType::i32;
  else if (t.code == kDLInt && t.bits == 64) *out = DType::i64;
  else if (t.code == kDLInt && t.bits == 8) *out = DType::i8;
  else return false;
  return true;
}

std::string dlpack_dtype_str(const nb::dlpack::dtype& t) {
  static const char* names[] = {"int", "uint", "float", "opaque", "bfloat", "complex", "bool"};
  const std::string kind = t.code < 7 ? names[t.code] : "code" + std::to_string(t.code) + "_";
  return kind + std::to_string(t.bits) + (t.lanes != 1 ? "x" + std::to_string(t.lanes) : "");
}

bool parse_dtype_name(const std::string& name, DType* out) {
  for (DType d : kAllTypes)
    if (name == dtype_name(d)) {
      *out = d;
      return true;
    }
  return false;
}

std::string python_type_name(nb::handle obj) { return nb::type_name(obj.type()).c_str(); }

// Splits `obj` into the array part and an optional dtype name (the (tensor, "dtype") form).
nb::handle split_override(nb::handle obj, nb::handle* dtype_name_out) {
  *dtype_name_out = nb::handle();
  if (nb::isinstance<nb::tuple>(obj)) {
    nb::tuple pair = nb::borrow<nb::tuple>(obj);
    if (pair.size() == 2 && nb::isinstance<nb::str>(pair[1])) {
      *dtype_name_out = pair[1];
      return pair[0];
    }
  }
  return obj;
}

}  // namespace

void TensorScope::fail_type(const char* name, const std::string& rule) const {
  throw Error(ErrorKind::wrong_type, name, std::string("flashgate: ") + op_ + ": " + name + ": " + rule);
}

void TensorScope::fail_value(const char* name, const std::string& rule) const {
  throw Error(ErrorKind::invalid_argument, name, std::string("flashgate: ") + op_ + ": " + name + ": " + rule);
}

template <class Array>
Tensor TensorScope::view(const Array& a, const char* name, nb::handle dtype_override) {
  Tensor t;
  const nb::dlpack::dtype dl = a.dtype();
  if (dtype_override.is_valid()) {
    const std::string wanted = nb::borrow<nb::str>(dtype_override).c_str();
    if (!parse_dtype_name(wanted, &t.dtype))
      fail_type(name, "unknown dtype name '" + wanted +
                          "' (expected float16, bfloat16, float32, float64, float8_e4m3fn, int32 or int64)");
    if (dl.lanes != 1 || dl.bits != 8 * dtype_size(t.dtype))
      fail_type(name, "cannot read " + dlpack_dtype_str(dl) + " elements as " + wanted +
                          " (the element sizes differ)");
  } else if (!from_dlpack_dtype(dl, &t.dtype)) {
    fail_type(name, "unsupported dtype " + dlpack_dtype_str(dl) +
                        " (expected float16, bfloat16, float32, float64, float8_e4m3fn, int32 or int64)");
  }

  switch (a.device_type()) {
    case nb::device::cpu::value:
    case nb::device::cuda_host::value: t.device = Device::cpu; break;
    case nb::device::cuda::value:
    case nb::device::cuda_managed::value: t.device = Device::cuda; break;
    default: fail_type(name, "tensors must live in host or CUDA memory, got DLPack device type " +
                                 std::to_string(a.device_type()));
  }
  t.device_index = t.device == Device::cuda ? a.device_id() : 0;

  if (a.ndim() > static_cast<size_t>(kMaxRank))
    fail_value(name, "has " + std::to_string(a.ndim()) + " axes, at most 4 are supported");
  t.rank = static_cast<int>(a.ndim());
  for (int i = 0; i < t.rank; ++i) {
    t.shape[i] = static_cast<int64_t>(a.shape(i));
    t.stride[i] = a.stride(i);
  }
  t.data = const_cast<void*>(static_cast<const void*>(a.data()));
  // A 0-d tensor (a scalar scale) has no axes but is present.
  if (t.data == nullptr && t.rank == 0) fail_value(name, "has a null data pointer");
  return t;
}

Tensor TensorScope::input(nb::handle obj, const char* name) {
  if (!obj.is_valid() || obj.is_none()) return Tensor{};
  nb::handle dtype_override;
  nb::handle array = split_override(obj, &dtype_override);
  nb::ndarray<nb::ro> a;
  if (!nb::try_cast(array, a))
    fail_type(name, "expected a DLPack tensor (numpy/torch/cupy/jax array or DLPack capsule) or None, got " +
                        python_type_name(array));
  inputs_.push_back(a);
  return view(a, name, dtype_override);
}

Tensor TensorScope::output(nb::handle obj, const char* name) {
  if (!obj.is_valid() || obj.is_none()) return Tensor{};
  nb::handle dtype_override;
  nb::handle array = split_override(obj, &dtype_override);
  nb::ndarray<> a;
  if (!nb::try_cast(array, a)) {
    nb::ndarray<nb::ro> readonly;
    if (nb::try_cast(array, readonly)) fail_value(name, "is an output and must be writable, got a read-only array");
    fail_type(name, "expected a writable DLPack tensor (numpy/torch/cupy array or DLPack capsule), got " +
                        python_type_name(array));
  }
  outputs_.push_back(a);
  return view(a, name, dtype_override);
}

Buffer TensorScope::buffer(nb::handle obj, const char* name) {
  nb::ndarray<> a;
  if (!nb::try_cast(obj, a))
    fail_type(name, "expected a writable DLPack tensor (e.g. a uint8 buffer), got " + python_type_name(obj));
  outputs_.push_back(a);
  Buffer b;
  int64_t expected = 1;
  for (size_t i = a.ndim(); i-- > 0;) {
    if (a.shape(i) > 1 && a.stride(i) != expected) fail_value(name, "must be contiguous");
    expected *= static_cast<int64_t>(a.shape(i));
  }
  b.data = a.data();
  b.bytes = a.nbytes();
  const bool on_gpu = a.device_type() == nb::device::cuda::value || a.device_type() == nb::device::cuda_managed::value;
  b.device = on_gpu ? Device::cuda : Device::cpu;
  b.device_index = on_gpu ? a.device_id() : 0;
  return b;
}

}  // namespace flashgate::python
