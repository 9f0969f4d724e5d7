// Carving one caller-given workspace buffer into aligned pieces. Sizing and carving run the same sequence
// of `take` calls (once with base == nullptr to measure), so the two can never disagree.
#pragma once

#include <cstddef>
#include <cstdint>

namespace flashgate::cuda {

class WorkspaceCarver {
 public:
  static constexpr size_t kAlign = 256;
  explicit WorkspaceCarver(void* base = nullptr) : base_(static_cast<char*>(base)) {}

  // `count` elements of T (nullptr when count == 0, or while measuring).
  template <class T>
  T* take(int64_t count) {
    if (count <= 0) return nullptr;
    const size_t offset = used_;
    used_ += (static_cast<size_t>(count) * sizeof(T) + kAlign - 1) / kAlign * kAlign;
    return base_ ? reinterpret_cast<T*>(base_ + offset) : nullptr;
  }
  size_t bytes() const { return used_; }

 private:
  char* base_;
  size_t used_ = 0;
};

}  // namespace flashgate::cuda
