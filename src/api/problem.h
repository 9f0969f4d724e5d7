// What argument checking hands to a backend: the op's sizes and features, already validated.
// One plain struct per op family; the tensors themselves stay in the public args structs.
#pragma once

#include <cstdint>

#include "flashgate/ops.h"

namespace flashgate::detail {

constexpr int64_t kMaxHeadDim = 512;        // q/k and v head dims of every op
constexpr int64_t kMaxPagedKeyDim = 576;    // paged keys (MLA-style K=576, V=512)
constexpr int64_t kNoWindow = -1;

// attention_forward / attention_backward (SPEC §3-§4).
struct AttentionProblem {
  int64_t B = 0, T = 0, HQ = 0, H = 0, K = 0, V = 0;
  int64_t num_seqs = 0;  // N when packed, else B
  bool packed = false;
  float scale = 0;
  int64_t window = kNoWindow;
  bool has_gate = false, has_sink = false, has_lse = false, has_o_residual = false;
  int64_t group() const { return HQ / H; }
};

// attention_forward_slice / attention_backward_slice (context parallelism).
struct SliceProblem {
  int64_t B = 0, Tq = 0, Tk = 0, HQ = 0, H = 0, K = 0, V = 0;
  int64_t q_start = 0, k_start = 0;
  float scale = 0;
  int64_t window = kNoWindow;
  bool has_gate = false, has_sink = false;
  int64_t group() const { return HQ / H; }
};

// decode (SPEC §5).
struct DecodeProblem {
  int64_t N = 0, T = 0, HQ = 0, H = 0, K = 0, V = 0;
  float scale = 0;
  int64_t window = kNoWindow;
  bool has_gate = false, has_sink = false, gate_scale = false;
  int64_t group() const { return HQ / H; }
};

enum class ScaleMode { none, per_tensor, per_token };

// paged_attention (SPEC §6).
struct PagedProblem {
  int64_t N = 0, total_q = 0, HQ = 0, H = 0, K = 0, V = 0;
  int64_t num_blocks = 0, block_size = 0, max_blocks = 0;
  float scale = 0;
  int64_t window = kNoWindow;
  int64_t max_q = 0;  // the caller's max_seqlen_q (0: not given)
  bool has_sink = false;
  bool fp8 = false;
  ScaleMode k_scale = ScaleMode::none, v_scale = ScaleMode::none;
  int64_t group() const { return HQ / H; }
};

}  // namespace flashgate::detail
