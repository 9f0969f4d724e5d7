// SPEC §7 boundary cases for the CPU reference: window 0 (o = 0, lse = -inf or the sink, zero gradients, no
// NaN), empty segments (also all of them), single-key rows, lengths around the reference's own block sizes
// (36-row blocks, 128-row jobs) and primes, head dims around its register tiles; and paged caches whose
// unused slots and scales hold NaN.
#include <gtest/gtest.h>

#include <cmath>
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
using reftest::expect_identical;
using reftest::kCpu;

constexpr double kExact = 1e-12;

std::vector<double> zeros(size_t n) { return std::vector<double>(n, 0.0); }

TEST(ReferenceBoundary, WindowZero) {
  REFTEST_SEEDED_RNG(rng);
  for (bool sink : {false, true})
    for (bool packed : {false, true}) {
      AttentionConfig cfg;
      cfg.dtype = DType::f64, cfg.heads = 4, cfg.kv_heads = 2, cfg.head_dim = 8, cfg.v_dim = 8;
      cfg.gate = true, cfg.sink = sink, cfg.window = 0;
      if (packed) cfg.packed = {3, 0, 5};
      else cfg.batch = 2, cfg.seqlen = 6;
      SCOPED_TRACE(cfg.describe());
      AttentionCase c = AttentionCase::random(cfg, rng);
      attention_forward(c.forward_args(), kCpu);
      expect_identical("o", c.o.values(), zeros(c.o.numel()));
      std::vector<double> lse(c.lse.numel(), -reftest::kInf);
      if (sink) {
        const std::vector<double> s = c.sink.values();
        for (size_t i = 0; i < lse.size(); ++i) lse[i] = s[i % cfg.heads];
      }
      expect_identical("lse", c.lse.values(), lse);
      attention_backward(c.backward_args(), kCpu);
      expect_identical("dq", c.dq.values(), zeros(c.dq.numel()));
      expect_identical("dk", c.dk.values(), zeros(c.dk.numel()));
      expect_identical("dv", c.dv.values(), zeros(c.dv.numel()));
      expect_identical("dg", c.dg.values(), zeros(c.dg.numel()));
      if (sink) expect_identical("dsink", c.dsink.values(), zeros(c.dsink.numel()));

      DecodeConfig dcfg;
      dcfg.dtype = DType::f64, dcfg.seqlens = {4, 0, 1}, dcfg.gate = true, dcfg.sink = sink, dcfg.window = 0;
      DecodeCase d = DecodeCase::random(dcfg, rng);
      decode(d.args(), kCpu);
      expect_identical("decode o", d.o.values(), zeros(d.o.numel()));

      PagedConfig pcfg;
      pcfg.dtype = DType::f64, pcfg.context_lens = {20, 3}, pcfg.query_lens = {4, 1}, pcfg.sink = sink;
      pcfg.window = 0, pcfg.head_dim = 16, pcfg.v_dim = 16;
      PagedCase p = PagedCase::random(pcfg, rng);
      paged_attention(p.args(), kCpu);
      expect_identical("paged o", p.o.values(), zeros(p.o.numel()));
    }
}

TEST(ReferenceBoundary, EmptySegments) {
  REFTEST_SEEDED_RNG(rng);
  for (std::vector<int64_t> lens : {std::vector<int64_t>{0, 0, 4, 0, 1, 0}, std::vector<int64_t>{0, 0}}) {
    AttentionConfig cfg;
    cfg.dtype = DType::f64, cfg.packed = lens, cfg.heads = 2, cfg.kv_heads = 1, cfg.head_dim = 4, cfg.v_dim = 4;
    cfg.gate = cfg.sink = true;
    SCOPED_TRACE(cfg.describe());
    AttentionCase c = AttentionCase::random(cfg, rng);
    reftest::expect_matches_naive(c, kExact);  // dsink is written even when no sequence has a token

    DecodeConfig dcfg;
    dcfg.dtype = DType::f64, dcfg.seqlens = lens, dcfg.heads = 2, dcfg.kv_heads = 1, dcfg.sink = true;
    DecodeCase d = DecodeCase::random(dcfg, rng);
    decode(d.args(), kCpu);
    expect_close("decode o (empty sequence: 0, whatever the sink)", d.o.values(), reftest::naive_decode(d), kExact);

    PagedConfig pcfg;
    pcfg.dtype = DType::f64, pcfg.context_lens = lens, pcfg.query_lens = std::vector<int64_t>(lens.size(), 0);
    for (size_t n = 0; n < lens.size(); ++n) pcfg.query_lens[n] = std::min<int64_t>(lens[n], 1);
    pcfg.sink = true;
    PagedCase p = PagedCase::random(pcfg, rng);
    paged_attention(p.args(), kCpu);
    expect_close("paged o", p.o.values(), reftest::naive_paged(p), kExact);
  }
}

TEST(ReferenceBoundary, SingleKeyRowsCopyTheirValue) {
  REFTEST_SEEDED_RNG(rng);
  AttentionConfig cfg;
  cfg.dtype = DType::f64, cfg.packed = {1, 7, 1}, cfg.heads = 4, cfg.kv_heads = 2, cfg.head_dim = 8, cfg.v_dim = 5;
  cfg.gate = true, cfg.window = 1;
  AttentionCase c = AttentionCase::random(cfg, rng);
  attention_forward(c.forward_args(), kCpu);
  const std::vector<double> v = c.v.values();
  std::vector<double> want(c.o.numel());
  for (int64_t t = 0; t < cfg.T(); ++t)
    for (int64_t h = 0; h < cfg.heads; ++h)
      for (int64_t d = 0; d < cfg.v_dim; ++d)
        want[(t * cfg.heads + h) * cfg.v_dim + d] = v[(t * cfg.kv_heads + h / 2) * cfg.v_dim + d];
  expect_close("o = v of the only key", c.o.values(), want, 1e-15);
  const reftest::NaiveAttention naive = reftest::naive_attention(c);
  expect_close("lse = the one score", c.lse.values(), naive.lse, kExact);
  attention_backward(c.backward_args(), kCpu);
  expect_close("dq (zero: P is constant 1)", c.dq.values(), naive.dq, kExact);
  expect_close("dv", c.dv.values(), naive.dv, kExact);
}

TEST(ReferenceBoundary, LengthsAroundBlocksAndPrimes) {
  REFTEST_SEEDED_RNG(rng);
  const std::vector<int64_t> lengths = {1, 2, 35, 36, 37, 63, 64, 65, 127, 128, 129, 131};
  for (int64_t L : lengths) {
    AttentionConfig cfg;
    cfg.dtype = DType::f64, cfg.batch = 1, cfg.seqlen = L, cfg.heads = 2, cfg.kv_heads = 1;
    cfg.head_dim = L % 2 ? 13 : 9, cfg.v_dim = L % 3 ? 1 : 8;  // tile edges of the multiply-add too
    cfg.gate = cfg.sink = true;
    if (L > 60) cfg.window = L / 2 + 1;
    SCOPED_TRACE(cfg.describe());
    AttentionCase c = AttentionCase::random(cfg, rng);
    reftest::expect_matches_naive(c, kExact);
  }

  DecodeConfig dcfg;
  dcfg.dtype = DType::f64, dcfg.seqlens = lengths, dcfg.gate = true, dcfg.sink = true, dcfg.window = 64;
  DecodeCase d = DecodeCase::random(dcfg, rng);
  decode(d.args(), kCpu);
  expect_close("decode o", d.o.values(), reftest::naive_decode(d), kExact);

  for (int64_t block_size : {16, 64}) {
    PagedConfig pcfg;
    pcfg.dtype = DType::f64, pcfg.context_lens = {63, 64, 65, 129, 1, 2}, pcfg.query_lens = {63, 1, 2, 5, 1, 2};
    pcfg.block_size = block_size, pcfg.head_dim = 24, pcfg.v_dim = 8, pcfg.sink = true;
    pcfg.fp8 = true, pcfg.scale_mode = detail::ScaleMode::per_token;
    SCOPED_TRACE(pcfg.describe());
    PagedCase p = PagedCase::random(pcfg, rng);
    paged_attention(p.args(), kCpu);
    expect_close("paged o", p.o.values(), reftest::naive_paged(p), kExact);
  }
}

// Unused cache slots, their per-token scales and unused block-table entries (-1) may hold anything: the
// same case with NaN there and with zeros there gives the same bits.
TEST(ReferenceBoundary, NanInUnusedCacheSlotsChangesNothing) {
  const uint64_t seed = harness::fresh_seed();
  SCOPED_TRACE("FLASHGATE_SEED=" + std::to_string(seed));
  using detail::ScaleMode;
  struct Kind {
    DType dtype;
    bool fp8;
    ScaleMode mode;
  };
  for (const Kind& kind : {Kind{DType::bf16, false, ScaleMode::none}, Kind{DType::f64, false, ScaleMode::none},
                           Kind{DType::f16, true, ScaleMode::per_tensor}, Kind{DType::bf16, true, ScaleMode::per_token}}) {
    PagedConfig cfg;
    cfg.dtype = kind.dtype, cfg.fp8 = kind.fp8, cfg.scale_mode = kind.mode;
    cfg.context_lens = {37, 16, 1, 100}, cfg.query_lens = {5, 16, 1, 2}, cfg.sink = true, cfg.spare_blocks = 4;
    cfg.head_dim = 32, cfg.v_dim = 16;
    SCOPED_TRACE(cfg.describe());
    harness::Rng rng_nan(seed), rng_zero(seed);
    cfg.nan_unused = true;
    PagedCase with_nan = PagedCase::random(cfg, rng_nan);
    cfg.nan_unused = false;
    PagedCase with_zero = PagedCase::random(cfg, rng_zero);
    for (harness::OwnedTensor* t : {&with_zero.k_cache, &with_zero.v_cache, &with_zero.k_scale, &with_zero.v_scale})
      if (t->defined()) {  // zeros (not the random values) in exactly the slots the NaN case poisons
        std::vector<double> nan_values = (t == &with_zero.k_cache   ? with_nan.k_cache
                                          : t == &with_zero.v_cache ? with_nan.v_cache
                                          : t == &with_zero.k_scale ? with_nan.k_scale
                                                                    : with_nan.v_scale)
                                             .values();
        for (double& x : nan_values)
          if (std::isnan(x)) x = 0.0;
        t->set_values(nan_values);
      }
    bool any_nan = false;
    for (double x : with_nan.k_cache.values()) any_nan |= std::isnan(x);
    ASSERT_TRUE(any_nan) << "the case has no unused slot to poison";
    paged_attention(with_nan.args(), kCpu);
    paged_attention(with_zero.args(), kCpu);
    EXPECT_TRUE(harness::no_nan(with_nan.o.values()));
    expect_identical("o with NaN in unused slots", with_nan.o.values(), with_zero.o.values());
  }
}

}  // namespace
