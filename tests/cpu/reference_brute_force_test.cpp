// The CPU reference against the brute-force formulas of reference_naive.h on tiny float64 cases, over every
// combination of the features: gate, sink, window, GQA, packed (with empty segments), K != V, strided
// tensors, explicit scale. Also the low-precision input paths (bf16 / f16 / f32 storage, fp8 caches).
#include <gtest/gtest.h>

#include <optional>
#include <vector>

#include "reference_naive.h"

namespace {

using namespace flashgate;
using harness::AttentionCase;
using harness::AttentionConfig;
using harness::DecodeCase;
using harness::DecodeConfig;
using harness::PagedCase;
using harness::PagedConfig;
using reftest::expect_close;
using reftest::kCpu;

constexpr double kExact = 1e-12;  // fp64 against fp64: only summation order differs

const std::vector<std::optional<int64_t>> kWindows = {std::nullopt, 0, 1, 3, 100};

struct HeadShape {
  int64_t heads, kv_heads, head_dim, v_dim;
};
const std::vector<HeadShape> kHeadShapes = {{2, 2, 5, 3}, {4, 2, 8, 8}, {3, 1, 4, 7}};

TEST(ReferenceBruteForce, ForwardAndBackwardEveryFeatureCombination) {
  REFTEST_SEEDED_RNG(rng);
  for (bool packed : {false, true})
    for (bool gate : {false, true})
      for (bool sink : {false, true})
        for (const auto& window : kWindows)
          for (const HeadShape& hs : kHeadShapes) {
            AttentionConfig cfg;
            cfg.dtype = DType::f64;
            cfg.heads = hs.heads, cfg.kv_heads = hs.kv_heads, cfg.head_dim = hs.head_dim, cfg.v_dim = hs.v_dim;
            if (packed) cfg.packed = {5, 0, 1, 9, 0};
            else cfg.batch = 2, cfg.seqlen = 7;
            cfg.gate = gate, cfg.sink = sink, cfg.window = window;
            cfg.row_pad = hs.heads == 4 ? 3 : 0;  // strided rows in some cases
            if (hs.heads == 3) cfg.scale = 0.7f;
            SCOPED_TRACE(cfg.describe());
            AttentionCase c = AttentionCase::random(cfg, rng);
            reftest::expect_matches_naive(c, kExact);
            if (HasFailure()) return;
          }
}

TEST(ReferenceBruteForce, DecodeEveryFeatureCombination) {
  REFTEST_SEEDED_RNG(rng);
  for (bool gate : {false, true})
    for (bool gate_scale : {false, true})
      for (bool sink : {false, true})
        for (const auto& window : kWindows)
          for (const HeadShape& hs : kHeadShapes) {
            if (gate_scale && !gate) continue;
            DecodeConfig cfg;
            cfg.dtype = DType::f64;
            cfg.seqlens = {6, 0, 1, 13, 2};
            cfg.heads = hs.heads, cfg.kv_heads = hs.kv_heads, cfg.head_dim = hs.head_dim, cfg.v_dim = hs.v_dim;
            cfg.gate = gate, cfg.gate_scale = gate_scale, cfg.sink = sink, cfg.window = window;
            cfg.row_pad = hs.heads == 4 ? 2 : 0;
            if (hs.heads == 3) cfg.scale = 1.3f;
            SCOPED_TRACE(cfg.describe());
            DecodeCase c = DecodeCase::random(cfg, rng);
            decode(c.args(), kCpu);
            expect_close("o", c.o.values(), reftest::naive_decode(c), kExact);
            if (HasFailure()) return;
          }
}

TEST(ReferenceBruteForce, PagedEveryFeatureCombination) {
  REFTEST_SEEDED_RNG(rng);
  using detail::ScaleMode;
  struct CacheKind {
    bool fp8;
    ScaleMode mode;
  };
  const std::vector<CacheKind> kinds = {
      {false, ScaleMode::none}, {true, ScaleMode::none}, {true, ScaleMode::per_tensor}, {true, ScaleMode::per_token}};
  for (const CacheKind& kind : kinds)
    for (bool sink : {false, true})
      for (const auto& window : kWindows)
        for (const HeadShape& hs : kHeadShapes)
          for (int64_t block_size : {16, 32}) {
            PagedConfig cfg;
            cfg.dtype = DType::f64;
            cfg.context_lens = {37, 5, 0, 16, 70};  // prefill chunk, decode, empty, a full block, verify
            cfg.query_lens = {37, 1, 0, 3, 4};
            cfg.heads = hs.heads, cfg.kv_heads = hs.kv_heads, cfg.head_dim = hs.head_dim, cfg.v_dim = hs.v_dim;
            cfg.block_size = block_size;
            cfg.fp8 = kind.fp8, cfg.scale_mode = kind.mode;
            cfg.token_spread = kind.mode == ScaleMode::per_token ? 30.0 : 1.0;
            cfg.sink = sink, cfg.window = window;
            if (hs.heads == 3) cfg.scale = 0.4f;
            SCOPED_TRACE(cfg.describe());
            PagedCase c = PagedCase::random(cfg, rng);
            paged_attention(c.args(), kCpu);
            expect_close("o", c.o.values(), reftest::naive_paged(c), kExact);
            if (HasFailure()) return;
          }
}

TEST(ReferenceBruteForce, PagedKeyDim576) {
  REFTEST_SEEDED_RNG(rng);
  for (bool fp8 : {false, true}) {
    PagedConfig cfg;
    cfg.dtype = DType::f64;
    cfg.context_lens = {40, 17}, cfg.query_lens = {2, 17};
    cfg.heads = 4, cfg.kv_heads = 1, cfg.head_dim = 576, cfg.v_dim = 512;
    cfg.fp8 = fp8, cfg.scale_mode = fp8 ? detail::ScaleMode::per_token : detail::ScaleMode::none;
    cfg.sink = true;
    SCOPED_TRACE(cfg.describe());
    PagedCase c = PagedCase::random(cfg, rng);
    paged_attention(c.args(), kCpu);
    expect_close("o", c.o.values(), reftest::naive_paged(c), kExact);
  }
}

// Low-precision storage: inputs are read exactly, fp64 inside, outputs rounded once to their dtype.
TEST(ReferenceBruteForce, LowPrecisionStorage) {
  REFTEST_SEEDED_RNG(rng);
  for (DType dt : {DType::bf16, DType::f16, DType::f32}) {
    // rounding the output once: relative error up to 2^-8 (bf16), 2^-11 (f16), 2^-24 (f32) per element
    const double tol = dt == DType::bf16 ? 4e-3 : dt == DType::f16 ? 5e-4 : 1e-6;
    AttentionConfig acfg;
    acfg.dtype = dt, acfg.packed = {9, 0, 14}, acfg.heads = 4, acfg.kv_heads = 2, acfg.head_dim = 16, acfg.v_dim = 8;
    acfg.gate = acfg.sink = true, acfg.window = 6;
    SCOPED_TRACE(acfg.describe());
    AttentionCase a = AttentionCase::random(acfg, rng);
    const reftest::NaiveAttention want = reftest::naive_attention(a);
    attention_forward(a.forward_args(), kCpu);
    expect_close("o", a.o.values(), want.o, tol);
    expect_close("lse (fp32)", a.lse.values(), want.lse, 1e-6);
    attention_backward(a.backward_args(), kCpu);
    expect_close("dq", a.dq.values(), want.dq, tol);
    expect_close("dk", a.dk.values(), want.dk, tol);
    expect_close("dv", a.dv.values(), want.dv, tol);
    expect_close("dg (fp32)", a.dg.values(), want.dg, 1e-6);
    expect_close("dsink (fp32)", a.dsink.values(), want.dsink, 1e-6);

    DecodeConfig dcfg;
    dcfg.dtype = dt, dcfg.seqlens = {7, 0, 20}, dcfg.heads = 4, dcfg.kv_heads = 1, dcfg.head_dim = 16, dcfg.v_dim = 8;
    dcfg.gate = dcfg.sink = true;
    DecodeCase d = DecodeCase::random(dcfg, rng);
    decode(d.args(), kCpu);
    expect_close("decode o", d.o.values(), reftest::naive_decode(d), tol);

    PagedConfig pcfg;
    pcfg.dtype = dt, pcfg.context_lens = {30, 3}, pcfg.query_lens = {5, 1}, pcfg.heads = 4, pcfg.kv_heads = 2;
    pcfg.head_dim = 16, pcfg.v_dim = 8, pcfg.sink = true;
    PagedCase p = PagedCase::random(pcfg, rng);
    paged_attention(p.args(), kCpu);
    expect_close("paged o", p.o.values(), reftest::naive_paged(p), tol);
    pcfg.fp8 = true, pcfg.scale_mode = detail::ScaleMode::per_token;
    PagedCase p8 = PagedCase::random(pcfg, rng);
    paged_attention(p8.args(), kCpu);
    expect_close("paged fp8 o", p8.o.values(), reftest::naive_paged(p8), tol);
  }
}

}  // namespace
