// Reading and writing a checked host tensor view through its strides and dtype, in double. The reference
// converts at this boundary only: everything inside it is fp64.
#pragma once

#include <cstdint>

#include "common/host_dtype.h"
#include "common/o_residual.h"
#include "flashgate/tensor.h"

namespace flashgate::cpu {

class HostTensor {
 public:
  HostTensor() = default;
  explicit HostTensor(const Tensor& t) : t_(t) {}

  bool present() const { return t_.defined(); }
  DType dtype() const { return t_.dtype; }

  // Element offset of an index (one index per leading axis; missing trailing indices are 0).
  template <class... I>
  int64_t offset(I... idx) const {
    int64_t off = 0;
    int axis = 0;
    ((off += static_cast<int64_t>(idx) * t_.stride[axis++]), ...);
    return off;
  }

  template <class... I>
  double get(I... idx) const { return host::load(t_.data, t_.dtype, offset(idx...)); }

  template <class... I>
  void set(double x, I... idx) const { host::store(t_.data, t_.dtype, offset(idx...), x); }

  template <class... I>
  int64_t index(I... idx) const { return host::load_index(t_.data, t_.dtype, offset(idx...)); }

  // n elements of the contiguous last axis starting at the row addressed by the leading indices.
  template <class... I>
  void load_row(double* dst, int64_t n, I... lead) const {
    const int64_t base = offset(lead...);
    switch (t_.dtype) {  // one switch per row, not per element
      case DType::f64: return convert_in(static_cast<const double*>(t_.data) + base, dst, n, [](double x) { return x; });
      case DType::f32: return convert_in(static_cast<const float*>(t_.data) + base, dst, n, [](float x) { return double(x); });
      case DType::bf16: return convert_in(static_cast<const uint16_t*>(t_.data) + base, dst, n, host::bf16_to_double);
      case DType::f16: return convert_in(static_cast<const uint16_t*>(t_.data) + base, dst, n, host::half_to_double);
      case DType::e4m3: return convert_in(static_cast<const uint8_t*>(t_.data) + base, dst, n, host::e4m3_to_double);
      default:
        for (int64_t e = 0; e < n; ++e) dst[e] = host::load(t_.data, t_.dtype, base + e);
    }
  }

  template <class... I>
  void store_row(const double* src, int64_t n, I... lead) const {
    const int64_t base = offset(lead...);
    for (int64_t e = 0; e < n; ++e) host::store(t_.data, t_.dtype, base + e, src[e]);
  }

 private:
  template <class T, class Convert>
  static void convert_in(const T* src, double* dst, int64_t n, Convert convert) {
    for (int64_t e = 0; e < n; ++e) dst[e] = convert(src[e]);
  }

  Tensor t_;
};

// The rounding residual codes (common/o_residual.h) of output row (b, t, h), stored in o as its dtype rounded `exact`.
inline void store_residual_row(const HostTensor& o, const HostTensor& codes, const double* exact, int64_t n, int64_t b,
                               int64_t t, int64_t h) {
  const residual::Format format = o.dtype() == DType::f16 ? residual::kF16 : residual::kBf16;
  for (int64_t d = 0; d < n; ++d) {
    const float stored = static_cast<float>(o.get(b, t, h, d));
    codes.set(residual::encode(static_cast<float>(exact[d]), stored, format), b, t, h, d);
  }
}

}  // namespace flashgate::cpu
