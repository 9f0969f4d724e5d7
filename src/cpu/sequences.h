// Where each sequence of a problem lives: the batch rows of a dense problem, or the segments of an
// offsets tensor (cu_seqlens of packed attention and decode, cu_seqlens_q of paged attention).
#pragma once

#include <cstdint>
#include <vector>

#include "api/problem.h"
#include "cpu/host_tensor.h"

namespace flashgate::cpu {

struct Sequence {
  int64_t batch = 0;   // index on the batch axis (0 when packed)
  int64_t start = 0;   // first token on the time axis
  int64_t length = 0;
};

// The N segments of an offsets tensor [N+1] (values already checked).
inline std::vector<Sequence> segments(const Tensor& offsets) {
  const HostTensor cu(offsets);
  std::vector<Sequence> seqs(static_cast<size_t>(offsets.shape[0] - 1));
  for (size_t n = 0; n < seqs.size(); ++n) {
    seqs[n].start = cu.index(n);
    seqs[n].length = cu.index(n + 1) - seqs[n].start;
  }
  return seqs;
}

// The sequences of attention_forward / attention_backward.
inline std::vector<Sequence> attention_sequences(const Tensor& cu_seqlens, const detail::AttentionProblem& p) {
  if (p.packed) return segments(cu_seqlens);
  std::vector<Sequence> seqs(static_cast<size_t>(p.B));
  for (int64_t b = 0; b < p.B; ++b) seqs[b] = {b, 0, p.T};
  return seqs;
}

}  // namespace flashgate::cpu
