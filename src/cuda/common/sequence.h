// Where sequence n lives: dense batch entry n, or packed segment n of cu_seqlens. Offsets read from GPU
// memory are clamped into [0, T] and made non-decreasing so that a bad cu_seqlens is never dereferenced
// out of range (SPEC §8), whatever it holds.
#pragma once

#include <cstdint>

#include "cuda/common/attention_params.h"

namespace flashgate::cuda {

struct SequenceSpan {
  int64_t batch = 0;  // batch index of the tensors (0 when packed)
  int64_t start = 0;  // token index of local position 0
  int len = 0;        // local positions 0 .. len-1
};

__device__ __forceinline__ int64_t cu_seqlens_at(const void* cu, int bytes, int64_t i) {
  return bytes == 8 ? static_cast<const int64_t*>(cu)[i] : static_cast<const int32_t*>(cu)[i];
}

__device__ __forceinline__ int64_t clamp_token(int64_t x, int64_t lo, int64_t hi) {
  return x < lo ? lo : (x > hi ? hi : x);
}

__device__ __forceinline__ SequenceSpan sequence_span(const AttentionParams& p, int64_t n) {
  SequenceSpan s;
  if (!p.packed) {
    s.batch = n;
    s.len = static_cast<int>(p.T);
    return s;
  }
  const int64_t begin = clamp_token(cu_seqlens_at(p.cu_seqlens, p.cu_seqlens_bytes, n), 0, p.T);
  const int64_t end = clamp_token(cu_seqlens_at(p.cu_seqlens, p.cu_seqlens_bytes, n + 1), begin, p.T);
  s.start = begin;
  s.len = static_cast<int>(end - begin);
  return s;
}

}  // namespace flashgate::cuda
