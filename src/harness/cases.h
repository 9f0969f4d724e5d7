// Random problems for every op, as used by the CLI, the tests and the benchmarks: a config names the
// shapes and features; a case owns inputs (drawn per SPEC §7) and poisoned outputs, and yields the args.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "api/problem.h"
#include "flashgate/ops.h"
#include "harness/owned_tensor.h"

namespace flashgate::harness {

// ---- attention_forward / attention_backward -----------------------------------------------------------
struct AttentionConfig {
  int64_t batch = 1, seqlen = 256, heads = 4, kv_heads = 4, head_dim = 64, v_dim = 64;
  std::vector<int64_t> packed;  // non-empty: packed lengths (batch becomes 1, seqlen their sum)
  DType dtype = DType::bf16;
  bool gate = false, sink = false;
  std::optional<int64_t> window;
  std::optional<float> scale;
  int64_t row_pad = 0;  // >0: every tensor gets padded rows (non-contiguous strides)
  bool deterministic = false;
  bool residual = true;  // fp16 / bf16: keep o's rounding residual for the backward, as the training path does

  int64_t B() const { return packed.empty() ? batch : 1; }
  int64_t T() const;
  std::string describe() const;
  // Visible (i,j) pairs summed over sequences (for FLOP counts): 2*B*HQ*pairs*(K+V) forward.
  double pairs() const;
  // Bytes of host memory that AttentionCase::random allocates, computed before allocating (in double: absurd
  // sizes stay countable), so that the CLI can refuse a problem larger than the machine instead of aborting.
  double host_bytes() const;
};

struct AttentionCase {
  AttentionConfig cfg;
  OwnedTensor q, k, v, g, sink, cu_seqlens;  // inputs
  OwnedTensor o, lse;                        // forward outputs
  OwnedTensor o_residual;                    // o's rounding residual (fp16 / bf16), as the training path keeps it
  OwnedTensor dout;                          // backward input
  OwnedTensor dq, dk, dv, dg, dsink;         // backward outputs

  // Fresh random inputs on the host; outputs poisoned.
  static AttentionCase random(const AttentionConfig& cfg, Rng& rng);
  // A deep copy of every tensor on `device`.
  AttentionCase to(Device device) const;
  // A host copy with every floating tensor in float64: run it on the cpu backend for the fp64 reference
  // on the same (already rounded) inputs.
  AttentionCase to_f64() const;
  void poison_outputs();

  ForwardArgs forward_args() const;
  BackwardArgs backward_args() const;  // o, lse (and o_residual) must hold a forward's result
};

// ---- decode ---------------------------------------------------------------------------------------------
struct DecodeConfig {
  std::vector<int64_t> seqlens = {100, 1, 257};
  int64_t heads = 8, kv_heads = 2, head_dim = 64, v_dim = 64;
  DType dtype = DType::bf16;
  bool gate = false, sink = false, gate_scale = false;
  std::optional<int64_t> window;
  std::optional<float> scale;
  int64_t row_pad = 0;
  int64_t q_row_pad = 0;  // >0 (without row_pad): only q gets padded rows; an odd pad breaks 4-byte query pairs

  std::string describe() const;
  int64_t total() const;
  double host_bytes() const;  // of DecodeCase::random, as AttentionConfig::host_bytes
};

struct DecodeCase {
  DecodeConfig cfg;
  OwnedTensor q, k, v, cu_seqlens, g, sink;
  OwnedTensor o;

  static DecodeCase random(const DecodeConfig& cfg, Rng& rng);
  DecodeCase to(Device device) const;
  DecodeCase to_f64() const;
  void poison_outputs();
  DecodeArgs args() const;
};

// ---- paged_attention ------------------------------------------------------------------------------------
struct PagedConfig {
  std::vector<int64_t> context_lens = {37, 300, 1};  // seq_lens_k per sequence
  std::vector<int64_t> query_lens = {1, 4, 1};        // tokens per sequence (<= its context)
  int64_t heads = 8, kv_heads = 2, head_dim = 128, v_dim = 128;
  int64_t block_size = 16;
  int64_t spare_blocks = 3;     // unused blocks in the cache besides the needed ones
  DType dtype = DType::bf16;    // q/o dtype (and the cache's unless fp8)
  bool fp8 = false;
  detail::ScaleMode scale_mode = detail::ScaleMode::none;  // with fp8: per_tensor or per_token
  std::optional<detail::ScaleMode> v_scale_mode;          // V's, where it differs from K's (scale_mode)
  bool sink = false;
  std::optional<int64_t> window;
  std::optional<float> scale;
  bool shuffle_blocks = true;   // a random permutation for the block table
  bool nan_unused = true;       // NaN in every cache and scale slot no sequence uses
  double token_spread = 1.0;    // per-token magnitudes drawn log-uniformly in [1/spread, 1]
  int64_t q_row_pad = 0;        // >0: q gets padded rows; an odd pad breaks 4-byte query pairs
  std::optional<int64_t> max_seqlen_q;  // passed to the op as given (a bound on query_lens)

  std::string describe() const;
  int64_t total_q() const;
  // Peak bytes of host memory in PagedCase::random: its tensors and the fp64 staging of one cache.
  double host_bytes() const;
  detail::ScaleMode k_mode() const { return fp8 ? scale_mode : detail::ScaleMode::none; }
  detail::ScaleMode v_mode() const { return fp8 ? v_scale_mode.value_or(scale_mode) : detail::ScaleMode::none; }
};

struct PagedCase {
  PagedConfig cfg;
  OwnedTensor q, k_cache, v_cache, block_table, seq_lens_k, cu_seqlens_q, sink, k_scale, v_scale;
  OwnedTensor o;

  static PagedCase random(const PagedConfig& cfg, Rng& rng);
  PagedCase to(Device device) const;
  PagedCase to_f64() const;  // fp8 caches stay e4m3 (the reference decodes them exactly)
  void poison_outputs();
  PagedArgs args() const;
  // Bytes of K and V (and their per-token scales) that the op must read: the GB/s numerator.
  double kv_bytes_read() const;
};

// A host float64 copy of a floating tensor (other dtypes: a plain host copy).
OwnedTensor as_f64(const OwnedTensor& t);

// Parses "0,15,100" into lengths; throws flashgate::Error naming `what` on bad text.
std::vector<int64_t> parse_lengths(const std::string& text, const char* what);

}  // namespace flashgate::harness
