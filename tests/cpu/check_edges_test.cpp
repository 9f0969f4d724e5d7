// Valid edge inputs that the argument rules must accept (SPEC §2-§7): empty batches and sequences, zero-length
// segments, window 0, strided and permuted layouts, broadcast inputs, the head-dim limits, every block size,
// fp8 scale modes, index entries that no sequence uses. Each must succeed and write every output element.
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "small_bases.h"

namespace fgtest {
namespace {

using flashgate::detail::ScaleMode;
using flashgate::harness::AttentionCase;
using flashgate::harness::AttentionConfig;
using flashgate::harness::DecodeConfig;
using flashgate::harness::PagedConfig;

class Edge : public testing::Test {
 protected:
  void SetUp() override {
    seed_ = flashgate::harness::fresh_seed();
    trace_.emplace(__FILE__, __LINE__, "seed " + std::to_string(seed_) + " (set FLASHGATE_SEED to repeat)");
  }
  uint64_t seed() const { return seed_; }

  // Forward on a case of `cfg`, then (when it succeeded, filling o and lse) the backward on
  // the same tensors; `change` is applied to both subjects (a generic lambda taking Subject<Args>&).
  template <class F>
  void forward_and_backward(const AttentionConfig& cfg, F change) {
    SCOPED_TRACE(cfg.describe());
    Rng rng(seed_);
    const AttentionCase c = AttentionCase::random(cfg, rng);
    Subject<ForwardArgs> fwd = forward_subject(c, seed_);
    change(fwd);
    if (!expect_valid(fwd)) return;
    Subject<BackwardArgs> bwd = backward_subject(c, seed_);
    change(bwd);
    expect_valid(bwd);
  }
  void forward_and_backward(const AttentionConfig& cfg) {
    forward_and_backward(cfg, [](auto&) {});
  }

 private:
  uint64_t seed_ = 0;
  std::optional<testing::ScopedTrace> trace_;
};

// Every stride of every empty tensor argument set to 0, as numpy exports them.
template <class S>
void zero_empty_strides(S& s) {
  for (const std::string& name : s.field_names()) {
    const Tensor& t = s.field(name);
    if (!t.defined() || t.numel() != 0) continue;
    for (int a = 0; a < t.rank; ++a) s.zero_stride(name, a);
  }
}

AttentionConfig small_attention() {
  AttentionConfig cfg = dense_config();
  cfg.batch = 1, cfg.seqlen = 3;
  return cfg;
}

// ---- attention_forward / attention_backward ----------------------------------------------------------------

TEST_F(Edge, AttentionEmptyTime) {
  AttentionConfig cfg = dense_config();
  cfg.seqlen = 0;
  forward_and_backward(cfg);
}

// Empty tensors come with arbitrary strides (numpy and DLPack give 0 on every axis): with no elements there is
// no layout to check, so neither the contiguous-last-axis rule nor any other stride rule applies.
TEST_F(Edge, AttentionEmptyTimeAnyStrides) {
  AttentionConfig cfg = dense_config();
  cfg.seqlen = 0;
  cfg.gate = true;
  forward_and_backward(cfg, [](auto& s) { zero_empty_strides(s); });
}

TEST_F(Edge, AttentionEmptyBatch) {
  AttentionConfig cfg = dense_config();
  cfg.batch = 0;
  forward_and_backward(cfg);
}

TEST_F(Edge, AttentionPackedWithNoSequences) {
  AttentionConfig cfg = dense_config();
  cfg.batch = 1, cfg.seqlen = 0;
  forward_and_backward(cfg, [](auto& s) {
    OwnedTensor cu(DType::i32, {1});
    cu.fill_index({0});
    s.attach("cu_seqlens", cu);
  });
}

TEST_F(Edge, AttentionZeroLengthSegments) {
  AttentionConfig cfg = dense_config();
  cfg.packed = {0, 3, 0, 0, 2, 0};
  forward_and_backward(cfg);
}

TEST_F(Edge, AttentionInt64Offsets) {
  forward_and_backward(packed_config(), [](auto& s) { s.retype("cu_seqlens", DType::i64); });
}

TEST_F(Edge, AttentionWindowZero) {
  AttentionConfig cfg = packed_config();
  cfg.window = 0;
  forward_and_backward(cfg);
  cfg.sink = false;
  forward_and_backward(cfg);
}

TEST_F(Edge, AttentionWindowOneAndBeyondT) {
  AttentionConfig cfg = dense_config();
  for (int64_t w : {1, 5, 1000}) {
    cfg.window = w;
    forward_and_backward(cfg);
  }
}

TEST_F(Edge, AttentionStridedRows) {
  AttentionConfig cfg = dense_config();
  cfg.row_pad = 3;
  forward_and_backward(cfg);
  cfg.packed = {1, 4};
  forward_and_backward(cfg);
}

TEST_F(Edge, AttentionPermutedOutputs) {
  // o and dq stored [B,HQ,T,·]: non-contiguous but non-overlapping, so legal.
  forward_and_backward(dense_config(), [](auto& s) {
    if constexpr (std::is_same_v<std::decay_t<decltype(s.args)>, ForwardArgs>) s.swap_storage_axes("o", 1, 2);
    else s.swap_storage_axes("dq", 1, 2);
  });
}

TEST_F(Edge, AttentionBroadcastInputs) {
  // k and v shared by both batch entries through a zero batch stride (inputs may alias).
  forward_and_backward(dense_config(), [](auto& s) {
    s.zero_stride("k", 0);
    s.zero_stride("v", 0);
  });
}

TEST_F(Edge, AttentionHeadGroupings) {
  AttentionConfig cfg = small_attention();
  for (auto [hq, h] : {std::pair<int64_t, int64_t>{6, 2}, {3, 3}, {5, 1}, {1, 1}}) {
    cfg.heads = hq, cfg.kv_heads = h;
    forward_and_backward(cfg);
  }
}

TEST_F(Edge, AttentionHeadDimLimits) {
  AttentionConfig cfg = small_attention();
  cfg.heads = 2, cfg.kv_heads = 1;
  for (auto [k, v] : {std::pair<int64_t, int64_t>{512, 1}, {1, 512}, {512, 512}, {1, 1}, {80, 24}}) {
    cfg.head_dim = k, cfg.v_dim = v;
    forward_and_backward(cfg);
  }
}

TEST_F(Edge, AttentionInputDtypes) {
  AttentionConfig cfg = dense_config();
  for (DType t : {DType::f16, DType::bf16, DType::f32, DType::f64}) {
    cfg.dtype = t;
    forward_and_backward(cfg);
  }
}

TEST_F(Edge, AttentionHalfPrecisionGates) {
  for (DType t : {DType::f16, DType::bf16})
    forward_and_backward(dense_config(), [t](auto& s) { s.retype("g", t); });
}

TEST_F(Edge, AttentionNoOptionalInputs) {
  AttentionConfig cfg = dense_config();
  cfg.gate = cfg.sink = false;
  forward_and_backward(cfg);
  Rng rng(seed());
  Subject<ForwardArgs> s = forward_subject(AttentionCase::random(cfg, rng), seed());
  s.drop("lse");
  expect_valid(s);
}

TEST_F(Edge, AttentionAnyFiniteScale) {
  AttentionConfig cfg = dense_config();
  for (float scale : {0.0f, -0.5f, 3.0f}) {
    cfg.scale = scale;
    forward_and_backward(cfg);
  }
}

TEST_F(Edge, AttentionDeterministicAndUnvalidated) {
  AttentionConfig cfg = packed_config();
  cfg.deterministic = true;
  forward_and_backward(cfg, [](auto& s) { s.args.validate = false; });
}

// ---- decode ---------------------------------------------------------------------------------------------

TEST_F(Edge, DecodeNoSequences) {
  DecodeConfig cfg = decode_config();
  cfg.seqlens = {};
  Subject<DecodeArgs> s = decode_of(cfg, seed());
  expect_valid(s);
}

TEST_F(Edge, DecodeNoSequencesAnyStrides) {
  DecodeConfig cfg = decode_config();
  cfg.seqlens = {};
  Subject<DecodeArgs> s = decode_of(cfg, seed());
  zero_empty_strides(s);
  expect_valid(s);
}

TEST_F(Edge, DecodeEmptySequences) {
  DecodeConfig cfg = decode_config();
  cfg.seqlens = {0, 0, 0};
  Subject<DecodeArgs> s = decode_of(cfg, seed());
  expect_valid(s);
}

TEST_F(Edge, DecodeWindows) {
  DecodeConfig cfg = decode_config();
  for (int64_t w : {0, 1, 3, 1000}) {
    cfg.window = w;
    Subject<DecodeArgs> s = decode_of(cfg, seed());
    expect_valid(s);
  }
}

TEST_F(Edge, DecodeStridedGateScaleAndOffsets) {
  DecodeConfig cfg = decode_config();
  cfg.row_pad = 2;
  cfg.gate_scale = true;
  Subject<DecodeArgs> s = decode_of(cfg, seed());
  s.retype("cu_seqlens", DType::i64);
  s.args.validate = false;
  expect_valid(s);
}

TEST_F(Edge, DecodeHeadDimsAndDtypes) {
  DecodeConfig cfg = decode_config();
  cfg.heads = 8, cfg.kv_heads = 1, cfg.head_dim = 512, cfg.v_dim = 3;
  for (DType t : {DType::f16, DType::bf16, DType::f32, DType::f64}) {
    cfg.dtype = t;
    Subject<DecodeArgs> s = decode_of(cfg, seed());
    expect_valid(s);
  }
  cfg.head_dim = 1, cfg.v_dim = 512, cfg.gate = cfg.sink = false;
  Subject<DecodeArgs> s = decode_of(cfg, seed());
  expect_valid(s);
}

// ---- paged_attention ------------------------------------------------------------------------------------

TEST_F(Edge, PagedBlockSizes) {
  PagedConfig cfg = paged_config();
  cfg.context_lens = {5, 300, 0}, cfg.query_lens = {1, 4, 0};
  for (int64_t bs : {16, 32, 64, 128, 256}) {
    cfg.block_size = bs;
    SCOPED_TRACE(cfg.describe());
    Subject<PagedArgs> s = paged_of(cfg, seed());
    expect_valid(s);
  }
}

TEST_F(Edge, PagedNoQueriesAnyStrides) {
  PagedConfig cfg = paged_config();
  cfg.context_lens = {0, 5}, cfg.query_lens = {0, 0};
  Subject<PagedArgs> s = paged_of(cfg, seed());
  zero_empty_strides(s);
  expect_valid(s);
}

TEST_F(Edge, PagedMlaHeadDims) {
  PagedConfig cfg = paged_config();
  cfg.context_lens = {3, 17}, cfg.query_lens = {1, 2};
  cfg.heads = 2, cfg.kv_heads = 1, cfg.head_dim = 576, cfg.v_dim = 512;
  Subject<PagedArgs> s = paged_of(cfg, seed());
  expect_valid(s);
}

TEST_F(Edge, PagedFp8ScaleModes) {
  PagedConfig cfg = paged_config();
  cfg.fp8 = true;
  for (ScaleMode mode : {ScaleMode::none, ScaleMode::per_tensor, ScaleMode::per_token}) {
    cfg.scale_mode = mode;
    SCOPED_TRACE(cfg.describe());
    Subject<PagedArgs> s = paged_of(cfg, seed());
    expect_valid(s);
  }
  // Mixed: per-tensor K scale, per-token V scale.
  cfg.scale_mode = ScaleMode::per_token;
  Subject<PagedArgs> s = paged_of(cfg, seed());
  OwnedTensor k_scale(DType::f32, {1});
  k_scale.fill(0.01);
  s.attach("k_scale", k_scale);
  expect_valid(s);
}

TEST_F(Edge, PagedUnusedTableEntriesHoldAnything) {
  // Table [3,2]: sequence 0 uses one block, sequence 2 none; their other entries are never read.
  Subject<PagedArgs> s = paged_base(seed());
  std::vector<int64_t> table = s.index_values("block_table");
  table[1] = 9999, table[4] = -7, table[5] = 1 << 30;
  s.set_index("block_table", table);
  expect_valid(s);
}

TEST_F(Edge, PagedContextFillsTheTable) {
  PagedConfig cfg = paged_config();
  cfg.context_lens = {16, 32, 0}, cfg.query_lens = {16, 1, 0};  // prefill of a whole block; a full table
  Subject<PagedArgs> s = paged_of(cfg, seed());
  expect_valid(s);
}

TEST_F(Edge, PagedWindowsStridesAndUnvalidated) {
  PagedConfig cfg = paged_config();
  for (int64_t w : {0, 1, 17}) {
    cfg.window = w;
    Subject<PagedArgs> s = paged_of(cfg, seed());
    s.pad_rows("q", 3);
    s.pad_rows("o", 1);
    s.retype("cu_seqlens_q", DType::i64);
    s.args.validate = false;
    expect_valid(s);
  }
}

TEST_F(Edge, PagedDtypes) {
  PagedConfig cfg = paged_config();
  for (DType t : {DType::f16, DType::bf16, DType::f32, DType::f64}) {
    cfg.dtype = t;
    Subject<PagedArgs> s = paged_of(cfg, seed());
    expect_valid(s);
  }
}

}  // namespace
}  // namespace fgtest
