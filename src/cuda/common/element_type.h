// The element types the kernels see, free of the public API (the host layer maps flashgate::DType onto it).
#pragma once

namespace flashgate::cuda {

enum class ElementType : int { f32, f16, bf16, e4m3 };

constexpr int element_size(ElementType t) {
  return t == ElementType::f32 ? 4 : t == ElementType::e4m3 ? 1 : 2;
}

}  // namespace flashgate::cuda
