// Invariants of the CPU reference: sink = -inf is no sink; a window >= T is no window; packed equals
// per-sequence dense; GQA equals MHA with repeated k/v; decode equals the last row of the forward; paged with
// a contiguous block table equals forward and decode; per-token scales all equal to one scalar equal
// per-tensor scaling.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "reference_naive.h"

namespace {

using namespace flashgate;
using harness::AttentionCase;
using harness::AttentionConfig;
using harness::DecodeCase;
using harness::DecodeConfig;
using harness::OwnedTensor;
using harness::PagedCase;
using harness::PagedConfig;
using reftest::expect_close;
using reftest::expect_identical;
using reftest::kCpu;

constexpr double kSame = 1e-14;  // the same math in another arrangement

struct Results {
  std::vector<double> o, lse, dq, dk, dv, dg, dsink;
};

Results run_both(AttentionCase& c, ForwardArgs fa, BackwardArgs ba) {
  attention_forward(fa, kCpu);
  attention_backward(ba, kCpu);
  Results r{c.o.values(), c.lse.values(), c.dq.values(), c.dk.values(), c.dv.values(), {}, {}};
  if (c.g.defined() && ba.dg.defined()) r.dg = c.dg.values();
  if (ba.dsink.defined()) r.dsink = c.dsink.values();
  return r;
}

Results run_both(AttentionCase& c) { return run_both(c, c.forward_args(), c.backward_args()); }

void expect_same_results(const Results& got, const Results& want, double tol) {
  expect_close("o", got.o, want.o, tol);
  expect_close("lse", got.lse, want.lse, tol);
  expect_close("dq", got.dq, want.dq, tol);
  expect_close("dk", got.dk, want.dk, tol);
  expect_close("dv", got.dv, want.dv, tol);
  expect_close("dg", got.dg, want.dg, tol);
  expect_close("dsink", got.dsink, want.dsink, tol);
}

AttentionConfig f64_config(std::vector<int64_t> packed, int64_t heads = 4, int64_t kv_heads = 2) {
  AttentionConfig cfg;
  cfg.dtype = DType::f64;
  cfg.packed = std::move(packed);
  cfg.heads = heads, cfg.kv_heads = kv_heads, cfg.head_dim = 16, cfg.v_dim = 12;
  cfg.gate = cfg.sink = true;
  return cfg;
}

// Rows [start, start + len) of a [1, T, heads, dim] (or [1, T, heads]) tensor's logical values.
std::vector<double> time_slice(const OwnedTensor& t, int64_t start, int64_t len) {
  const std::vector<double> v = t.values();
  int64_t row = 1;
  for (int a = 2; a < t.view().rank; ++a) row *= t.view().shape[a];
  return std::vector<double>(v.begin() + start * row, v.begin() + (start + len) * row);
}

TEST(ReferenceInvariants, SinkMinusInfinityIsNoSink) {
  REFTEST_SEEDED_RNG(rng);
  AttentionConfig cfg = f64_config({9, 0, 40});
  cfg.window = 7;
  SCOPED_TRACE(cfg.describe());
  AttentionCase c = AttentionCase::random(cfg, rng);
  ForwardArgs fa = c.forward_args();
  BackwardArgs ba = c.backward_args();
  fa.sink = ba.sink = ba.dsink = Tensor{};
  const Results without = run_both(c, fa, ba);
  c.sink.fill(-INFINITY);
  Results with = run_both(c);
  expect_identical("dsink", with.dsink, std::vector<double>(cfg.heads, 0.0));
  with.dsink.clear();
  expect_same_results(with, without, 0.0);

  DecodeConfig dcfg;
  dcfg.dtype = DType::f64, dcfg.seqlens = {5, 0, 33}, dcfg.gate = true, dcfg.sink = true;
  DecodeCase d = DecodeCase::random(dcfg, rng);
  DecodeArgs da = d.args();
  da.sink = Tensor{};
  decode(da, kCpu);
  const std::vector<double> o_without = d.o.values();
  d.sink.fill(-INFINITY);
  decode(d.args(), kCpu);
  expect_identical("decode o", d.o.values(), o_without);
}

TEST(ReferenceInvariants, WindowOfAtLeastTIsNoWindow) {
  REFTEST_SEEDED_RNG(rng);
  AttentionConfig cfg = f64_config({});
  cfg.batch = 2, cfg.seqlen = 50;
  AttentionCase c = AttentionCase::random(cfg, rng);
  const Results unlimited = run_both(c);
  for (int64_t w : {50, 51, 1000}) {
    SCOPED_TRACE("window " + std::to_string(w));
    c.cfg.window = w;
    expect_same_results(run_both(c), unlimited, 0.0);
  }
}

TEST(ReferenceInvariants, PackedEqualsPerSequenceDense) {
  REFTEST_SEEDED_RNG(rng);
  AttentionConfig cfg = f64_config({23, 0, 64, 1, 37});
  cfg.window = 20;
  SCOPED_TRACE(cfg.describe());
  AttentionCase packed = AttentionCase::random(cfg, rng);
  // int64 offsets take the same path as the harness's int32 ones
  OwnedTensor cu64(DType::i64, {static_cast<int64_t>(cfg.packed.size()) + 1});
  cu64.fill_index({0, 23, 23, 87, 88, 125});
  packed.cu_seqlens = cu64;
  const Results all = run_both(packed);

  std::vector<double> dsink_sum(cfg.heads, 0.0);
  int64_t start = 0;
  for (int64_t L : cfg.packed) {
    if (L > 0) {
      SCOPED_TRACE("segment at " + std::to_string(start) + " of length " + std::to_string(L));
      AttentionConfig dense_cfg = cfg;
      dense_cfg.packed.clear();
      dense_cfg.batch = 1, dense_cfg.seqlen = L;
      AttentionCase dense = AttentionCase::random(dense_cfg, rng);
      for (auto [dst, src] : {std::pair{&dense.q, &packed.q}, {&dense.k, &packed.k}, {&dense.v, &packed.v},
                              {&dense.dout, &packed.dout}, {&dense.g, &packed.g}})
        dst->set_values(time_slice(*src, start, L));
      dense.sink.set_values(packed.sink.values());
      const Results one = run_both(dense);
      auto slice = [&](const std::vector<double>& v) {  // the segment's rows of a packed result
        const int64_t row = static_cast<int64_t>(v.size()) / cfg.T();
        return std::vector<double>(v.begin() + start * row, v.begin() + (start + L) * row);
      };
      expect_close("o", slice(all.o), one.o, kSame);
      expect_close("lse", slice(all.lse), one.lse, kSame);
      expect_close("dq", slice(all.dq), one.dq, kSame);
      expect_close("dk", slice(all.dk), one.dk, kSame);
      expect_close("dv", slice(all.dv), one.dv, kSame);
      expect_close("dg", slice(all.dg), one.dg, kSame);
      for (int64_t h = 0; h < cfg.heads; ++h) dsink_sum[h] += one.dsink[h];
    }
    start += L;
  }
  expect_close("dsink = sum over sequences", all.dsink, dsink_sum, kSame);
}

TEST(ReferenceInvariants, GqaEqualsMhaWithRepeatedKv) {
  REFTEST_SEEDED_RNG(rng);
  for (int64_t kv_heads : {2, 1}) {
    AttentionConfig cfg = f64_config({30, 0, 45}, 4, kv_heads);
    cfg.window = 25;
    SCOPED_TRACE(cfg.describe());
    const int64_t G = cfg.heads / kv_heads, T = cfg.T(), K = cfg.head_dim, V = cfg.v_dim;
    AttentionCase gqa = AttentionCase::random(cfg, rng);
    AttentionConfig mha_cfg = cfg;
    mha_cfg.kv_heads = cfg.heads;
    AttentionCase mha = AttentionCase::random(mha_cfg, rng);
    for (auto [dst, src] : {std::pair{&mha.q, &gqa.q}, {&mha.dout, &gqa.dout}, {&mha.g, &gqa.g}, {&mha.sink, &gqa.sink}})
      dst->set_values(src->values());
    auto repeat = [&](const OwnedTensor& t, int64_t D) {  // [1,T,H,D] -> [1,T,HQ,D], head h takes h / G
      const std::vector<double> v = t.values();
      std::vector<double> out(T * cfg.heads * D);
      for (int64_t i = 0; i < T; ++i)
        for (int64_t h = 0; h < cfg.heads; ++h)
          for (int64_t d = 0; d < D; ++d) out[(i * cfg.heads + h) * D + d] = v[(i * kv_heads + h / G) * D + d];
      return out;
    };
    mha.k.set_values(repeat(gqa.k, K));
    mha.v.set_values(repeat(gqa.v, V));
    const Results g = run_both(gqa), m = run_both(mha);
    auto group_sum = [&](const std::vector<double>& v, int64_t D) {  // [1,T,HQ,D] -> [1,T,H,D]
      std::vector<double> out(T * kv_heads * D, 0.0);
      for (int64_t i = 0; i < T; ++i)
        for (int64_t h = 0; h < cfg.heads; ++h)
          for (int64_t d = 0; d < D; ++d) out[(i * kv_heads + h / G) * D + d] += v[(i * cfg.heads + h) * D + d];
      return out;
    };
    expect_close("o", g.o, m.o, kSame);
    expect_close("lse", g.lse, m.lse, kSame);
    expect_close("dq", g.dq, m.dq, kSame);
    expect_close("dk = group sum", g.dk, group_sum(m.dk, K), kSame);
    expect_close("dv = group sum", g.dv, group_sum(m.dv, V), kSame);
    expect_close("dg", g.dg, m.dg, kSame);
    expect_close("dsink", g.dsink, m.dsink, kSame);
  }
}

// A decode case holding the packed forward's k, v, g and, as its queries, the forward's last rows.
DecodeCase decode_of_last_rows(const AttentionCase& fwd, bool gate_scale, harness::Rng& rng) {
  const AttentionConfig& cfg = fwd.cfg;
  DecodeConfig dcfg;
  dcfg.dtype = cfg.dtype, dcfg.seqlens = cfg.packed, dcfg.heads = cfg.heads, dcfg.kv_heads = cfg.kv_heads;
  dcfg.head_dim = cfg.head_dim, dcfg.v_dim = cfg.v_dim, dcfg.gate = cfg.gate, dcfg.sink = cfg.sink;
  dcfg.gate_scale = gate_scale, dcfg.window = cfg.window, dcfg.scale = cfg.scale;
  DecodeCase d = DecodeCase::random(dcfg, rng);
  d.k.set_values(fwd.k.values());
  d.v.set_values(fwd.v.values());
  if (cfg.gate) d.g.set_values(fwd.g.values());
  if (cfg.sink) d.sink.set_values(fwd.sink.values());
  const std::vector<double> q = fwd.q.values();
  std::vector<double> dq(d.q.numel(), 0.0);
  const int64_t row = cfg.heads * cfg.head_dim;
  int64_t end = 0;
  for (size_t n = 0; n < cfg.packed.size(); ++n) {
    end += cfg.packed[n];
    if (cfg.packed[n] > 0) std::copy(q.begin() + (end - 1) * row, q.begin() + end * row, dq.begin() + n * row);
  }
  d.q.set_values(dq);
  return d;
}

// Rows of the forward output at the last position of every non-empty sequence, and 0 for empty ones.
std::vector<double> last_rows(const AttentionConfig& cfg, const std::vector<double>& o) {
  const int64_t row = cfg.heads * cfg.v_dim;
  std::vector<double> out(cfg.packed.size() * row, 0.0);
  int64_t end = 0;
  for (size_t n = 0; n < cfg.packed.size(); ++n) {
    end += cfg.packed[n];
    if (cfg.packed[n] > 0) std::copy(o.begin() + (end - 1) * row, o.begin() + end * row, out.begin() + n * row);
  }
  return out;
}

TEST(ReferenceInvariants, DecodeEqualsLastRowOfForward) {
  REFTEST_SEEDED_RNG(rng);
  for (const auto& window : {std::optional<int64_t>(), std::optional<int64_t>(9), std::optional<int64_t>(0)}) {
    AttentionConfig cfg = f64_config({17, 0, 1, 70});
    cfg.window = window;
    cfg.scale = 0.35f;
    SCOPED_TRACE(cfg.describe());
    AttentionCase fwd = AttentionCase::random(cfg, rng);
    attention_forward(fwd.forward_args(), kCpu);
    DecodeCase d = decode_of_last_rows(fwd, /*gate_scale=*/false, rng);
    decode(d.args(), kCpu);
    expect_close("decode o", d.o.values(), last_rows(cfg, fwd.o.values()), kSame);

    // gate_scale multiplies the gate term by scale: the forward with g * scale
    DecodeCase ds = decode_of_last_rows(fwd, /*gate_scale=*/true, rng);
    std::vector<double> g = fwd.g.values();
    for (double& x : g) x *= static_cast<double>(*cfg.scale);
    fwd.g.set_values(g);
    attention_forward(fwd.forward_args(), kCpu);
    decode(ds.args(), kCpu);
    expect_close("decode o with gate_scale", ds.o.values(), last_rows(cfg, fwd.o.values()), kSame);
  }
}

// A paged case over the packed forward's k/v (a contiguous block table, bf16 cache, NaN in unused slots)
// whose sequence n has the last query_lens[n] rows of the forward's sequence n as queries.
PagedCase paged_of(const AttentionCase& fwd, const std::vector<int64_t>& query_lens, harness::Rng& rng) {
  const AttentionConfig& cfg = fwd.cfg;
  PagedConfig pcfg;
  pcfg.dtype = cfg.dtype, pcfg.context_lens = cfg.packed, pcfg.query_lens = query_lens;
  pcfg.heads = cfg.heads, pcfg.kv_heads = cfg.kv_heads, pcfg.head_dim = cfg.head_dim, pcfg.v_dim = cfg.v_dim;
  pcfg.sink = cfg.sink, pcfg.window = cfg.window, pcfg.scale = cfg.scale;
  pcfg.shuffle_blocks = false;
  PagedCase p = PagedCase::random(pcfg, rng);
  const int64_t H = cfg.kv_heads, BS = pcfg.block_size, max_blocks = p.block_table.view().shape[1];
  const std::vector<double> table = p.block_table.values(), k = fwd.k.values(), v = fwd.v.values();
  std::vector<double> kc = p.k_cache.values(), vc = p.v_cache.values();
  const std::vector<double> q = fwd.q.values();
  std::vector<double> pq(p.q.numel());
  const int64_t qrow = cfg.heads * cfg.head_dim;
  int64_t start = 0, qstart = 0;
  for (size_t n = 0; n < cfg.packed.size(); ++n) {
    const int64_t L = cfg.packed[n];
    for (int64_t j = 0; j < L; ++j) {
      const int64_t slot_row = static_cast<int64_t>(table[n * max_blocks + j / BS]) * BS + j % BS;
      for (int64_t x = 0; x < H * cfg.head_dim; ++x) kc[slot_row * H * cfg.head_dim + x] = k[(start + j) * H * cfg.head_dim + x];
      for (int64_t x = 0; x < H * cfg.v_dim; ++x) vc[slot_row * H * cfg.v_dim + x] = v[(start + j) * H * cfg.v_dim + x];
    }
    std::copy(q.begin() + (start + L - query_lens[n]) * qrow, q.begin() + (start + L) * qrow, pq.begin() + qstart * qrow);
    start += L, qstart += query_lens[n];
  }
  p.k_cache.set_values(kc);
  p.v_cache.set_values(vc);
  p.q.set_values(pq);
  if (cfg.sink) p.sink.set_values(fwd.sink.values());
  return p;
}

TEST(ReferenceInvariants, PagedContiguousEqualsForwardAndDecode) {
  REFTEST_SEEDED_RNG(rng);
  AttentionConfig cfg = f64_config({37, 16, 5, 100});
  cfg.dtype = DType::bf16, cfg.gate = false, cfg.window = 30;
  SCOPED_TRACE(cfg.describe());
  AttentionCase fwd = AttentionCase::random(cfg, rng);
  attention_forward(fwd.forward_args(), kCpu);
  const std::vector<double> o = fwd.o.values();

  // The fp64 sums may be grouped differently (rows per block), which can move a bf16 rounding by one ulp.
  const double tol = 1e-3;
  PagedCase prefill = paged_of(fwd, cfg.packed, rng);  // every row of every sequence
  paged_attention(prefill.args(), kCpu);
  expect_close("paged prefill = forward", prefill.o.values(), o, tol);

  PagedCase step = paged_of(fwd, {1, 1, 1, 1}, rng);
  paged_attention(step.args(), kCpu);
  expect_close("paged decode step = forward's last rows", step.o.values(), last_rows(cfg, o), tol);
  DecodeCase d = decode_of_last_rows(fwd, false, rng);
  decode(d.args(), kCpu);
  expect_close("paged decode step = decode", step.o.values(), d.o.values(), tol);

  const std::vector<int64_t> mixed = {3, 16, 1, 4};  // chunked prefill, whole prompt, decode, verify
  PagedCase chunk = paged_of(fwd, mixed, rng);
  paged_attention(chunk.args(), kCpu);
  std::vector<double> want;
  const int64_t row = cfg.heads * cfg.v_dim;
  int64_t end = 0;
  for (size_t n = 0; n < mixed.size(); ++n) {
    end += cfg.packed[n];
    want.insert(want.end(), o.begin() + (end - mixed[n]) * row, o.begin() + end * row);
  }
  expect_close("paged mixed = forward rows", chunk.o.values(), want, tol);
}

TEST(ReferenceInvariants, EqualPerTokenScalesArePerTensorScaling) {
  REFTEST_SEEDED_RNG(rng);
  PagedConfig cfg;
  cfg.dtype = DType::f64, cfg.fp8 = true, cfg.scale_mode = detail::ScaleMode::per_token;
  cfg.context_lens = {50, 1, 130}, cfg.query_lens = {3, 1, 7}, cfg.sink = true, cfg.window = 100;
  cfg.head_dim = 32, cfg.v_dim = 24;
  SCOPED_TRACE(cfg.describe());
  PagedCase c = PagedCase::random(cfg, rng);
  const double ks = 0.0123, vs = 3.5;
  c.k_scale.fill(ks);
  c.v_scale.fill(vs);
  paged_attention(c.args(), kCpu);
  const std::vector<double> per_token = c.o.values();

  OwnedTensor k1(DType::f64, {1}), v1(DType::f64, {1});
  k1.fill(ks), v1.fill(vs);
  PagedArgs a = c.args();
  a.k_scale = k1.view(), a.v_scale = v1.view();
  c.o.poison();
  paged_attention(a, kCpu);
  expect_close("per-tensor = equal per-token", c.o.values(), per_token, kSame);
}

// Jobs own disjoint outputs and partial sums are added in a fixed order: the bits depend neither on the
// number of threads (FLASHGATE_CPU_THREADS) nor on the run (the deterministic option holds by construction).
TEST(ReferenceInvariants, BitsIndependentOfThreadsAndRuns) {
  REFTEST_SEEDED_RNG(rng);
  AttentionConfig cfg = f64_config({40, 0, 130, 7, 300});
  cfg.window = 100;
  AttentionCase c = AttentionCase::random(cfg, rng);
  const char* before = std::getenv("FLASHGATE_CPU_THREADS");
  const std::string saved = before ? before : "";
  std::vector<Results> runs;
  for (const char* threads : {"1", "3", "3", "8"}) {
    setenv("FLASHGATE_CPU_THREADS", threads, 1);
    c.poison_outputs();
    runs.push_back(run_both(c));
  }
  if (before) setenv("FLASHGATE_CPU_THREADS", saved.c_str(), 1);
  else unsetenv("FLASHGATE_CPU_THREADS");
  for (size_t r = 1; r < runs.size(); ++r) {
    SCOPED_TRACE("run " + std::to_string(r));
    expect_identical("o", runs[r].o, runs[0].o);
    expect_identical("lse", runs[r].lse, runs[0].lse);
    expect_identical("dq", runs[r].dq, runs[0].dq);
    expect_identical("dk", runs[r].dk, runs[0].dk);
    expect_identical("dv", runs[r].dv, runs[0].dv);
    expect_identical("dg", runs[r].dg, runs[0].dg);
    expect_identical("dsink", runs[r].dsink, runs[0].dsink);
  }
}

}  // namespace
