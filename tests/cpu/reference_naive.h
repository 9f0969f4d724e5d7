// Independent brute-force formulas for the reference tests: SPEC §3-§6 written as plain loops over the
// logical (row-major) values of a harness case, with no blocking, no max-subtraction and the gate term as
// a direct sum g[j+1] + ... + g[i]. Only for tiny cases in float64.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "flashgate/flashgate.h"
#include "harness/cases.h"
#include "harness/metrics.h"

namespace reftest {

using flashgate::harness::AttentionCase;
using flashgate::harness::DecodeCase;
using flashgate::harness::PagedCase;

// A fresh generator whose seed is printed with any failure of the enclosing scope (FLASHGATE_SEED replays it).
#define REFTEST_SEEDED_RNG(rng)                                           \
  const uint64_t rng##_seed = flashgate::harness::fresh_seed();          \
  SCOPED_TRACE("FLASHGATE_SEED=" + std::to_string(rng##_seed));          \
  flashgate::harness::Rng rng(rng##_seed)

inline const flashgate::Launch kCpu{flashgate::Backend::cpu};

inline void expect_close(const std::string& what, const std::vector<double>& out, const std::vector<double>& ref,
                         double tol) {
  const double err = flashgate::harness::relative_rms(out, ref);
  EXPECT_TRUE(flashgate::harness::no_nan(out)) << what << " has NaN";
  EXPECT_LE(err, tol) << what << ": relative RMS " << err << " > " << tol;
}

inline void expect_identical(const std::string& what, const std::vector<double>& out,
                             const std::vector<double>& ref) {
  ASSERT_EQ(out.size(), ref.size()) << what;
  for (size_t i = 0; i < out.size(); ++i)
    if (!(out[i] == ref[i] || (std::isnan(out[i]) && std::isnan(ref[i])))) {
      ADD_FAILURE() << what << ": element " << i << " is " << out[i] << ", expected " << ref[i];
      return;
    }
}

constexpr double kInf = std::numeric_limits<double>::infinity();

inline double default_scale(const std::optional<float>& s, int64_t K) {
  return s ? static_cast<double>(*s) : static_cast<double>(static_cast<float>(1.0 / std::sqrt(double(K))));
}

// ---- attention_forward / attention_backward ----------------------------------------------------------------

struct NaiveSeq {
  int64_t batch, start, length;
};

inline std::vector<NaiveSeq> naive_sequences(const flashgate::harness::AttentionConfig& cfg) {
  std::vector<NaiveSeq> seqs;
  if (cfg.packed.empty()) {
    for (int64_t b = 0; b < cfg.batch; ++b) seqs.push_back({b, 0, cfg.seqlen});
  } else {
    int64_t start = 0;
    for (int64_t L : cfg.packed) seqs.push_back({0, start, L}), start += L;
  }
  return seqs;
}

struct NaiveAttention {
  std::vector<double> o, lse;                 // [B,T,HQ,V], [B,T,HQ]
  std::vector<double> dq, dk, dv, dg, dsink;  // SPEC §4
};

// SPEC §3 and §4 by definition.
inline NaiveAttention naive_attention(const AttentionCase& c);

// Runs the cpu forward and backward on `c` and compares every output the case has with the naive formulas.
inline void expect_matches_naive(AttentionCase& c, double tol) {
  const NaiveAttention want = naive_attention(c);
  flashgate::attention_forward(c.forward_args(), kCpu);
  expect_close("o", c.o.values(), want.o, tol);
  expect_close("lse", c.lse.values(), want.lse, tol);
  flashgate::attention_backward(c.backward_args(), kCpu);
  expect_close("dq", c.dq.values(), want.dq, tol);
  expect_close("dk", c.dk.values(), want.dk, tol);
  expect_close("dv", c.dv.values(), want.dv, tol);
  if (c.cfg.gate) expect_close("dg", c.dg.values(), want.dg, tol);
  if (c.cfg.sink) expect_close("dsink", c.dsink.values(), want.dsink, tol);
}

// SPEC §3 and §4 by definition.
inline NaiveAttention naive_attention(const AttentionCase& c) {
  const auto& cfg = c.cfg;
  const int64_t T = cfg.T(), HQ = cfg.heads, H = cfg.kv_heads, K = cfg.head_dim, V = cfg.v_dim, G = HQ / H;
  const double scale = default_scale(cfg.scale, K);
  const std::vector<double> q = c.q.values(), k = c.k.values(), v = c.v.values(), dout = c.dout.values();
  const std::vector<double> g = cfg.gate ? c.g.values() : std::vector<double>();
  const std::vector<double> sink = cfg.sink ? c.sink.values() : std::vector<double>();
  auto qi = [&](int64_t b, int64_t t, int64_t h) { return ((b * T + t) * HQ + h); };
  auto ki = [&](int64_t b, int64_t t, int64_t h) { return ((b * T + t) * H + h); };

  NaiveAttention r;
  const int64_t B = cfg.B();
  r.o.assign(B * T * HQ * V, 0.0), r.lse.assign(B * T * HQ, 0.0);
  r.dq.assign(B * T * HQ * K, 0.0), r.dk.assign(B * T * H * K, 0.0), r.dv.assign(B * T * H * V, 0.0);
  r.dg.assign(B * T * HQ, 0.0), r.dsink.assign(HQ, 0.0);
  for (const NaiveSeq& s : naive_sequences(cfg))
    for (int64_t h = 0; h < HQ; ++h) {
      const int64_t hk = h / G;
      std::vector<double> dgc(s.length, 0.0);
      for (int64_t i = 0; i < s.length; ++i) {
        const int64_t ti = s.start + i;
        std::vector<double> e(s.length, 0.0);  // exp(s[i,j]) of visible j, 0 elsewhere
        double z = cfg.sink ? std::exp(sink[h]) : 0.0;
        for (int64_t j = 0; j <= i; ++j) {
          if (cfg.window && i - j >= *cfg.window) continue;
          const int64_t tj = s.start + j;
          double dot = 0;
          for (int64_t d = 0; d < K; ++d) dot += q[qi(s.batch, ti, h) * K + d] * k[ki(s.batch, tj, hk) * K + d];
          double gate = 0;
          if (cfg.gate)
            for (int64_t u = j + 1; u <= i; ++u) gate += g[qi(s.batch, s.start + u, h)];
          e[j] = std::exp(scale * dot + gate);
          z += e[j];
        }
        r.lse[qi(s.batch, ti, h)] = z > 0 ? std::log(z) : -kInf;
        if (z == 0) continue;  // no visible key, no sink: o = 0 and no gradient
        std::vector<double> p(s.length), dp(s.length, 0.0);
        double expectation = 0;
        for (int64_t j = 0; j < s.length; ++j) {
          p[j] = e[j] / z;
          for (int64_t d = 0; d < V; ++d) {
            r.o[qi(s.batch, ti, h) * V + d] += p[j] * v[ki(s.batch, s.start + j, hk) * V + d];
            dp[j] += dout[qi(s.batch, ti, h) * V + d] * v[ki(s.batch, s.start + j, hk) * V + d];
          }
          expectation += p[j] * dp[j];
        }
        for (int64_t j = 0; j < s.length; ++j) {
          if (e[j] == 0) continue;
          const int64_t tj = s.start + j;
          const double ds = p[j] * (dp[j] - expectation);
          for (int64_t d = 0; d < K; ++d) {
            r.dq[qi(s.batch, ti, h) * K + d] += scale * ds * k[ki(s.batch, tj, hk) * K + d];
            r.dk[ki(s.batch, tj, hk) * K + d] += scale * ds * q[qi(s.batch, ti, h) * K + d];
          }
          for (int64_t d = 0; d < V; ++d)
            r.dv[ki(s.batch, tj, hk) * V + d] += p[j] * dout[qi(s.batch, ti, h) * V + d];
          dgc[i] += ds;
          dgc[j] -= ds;
        }
        if (cfg.sink) r.dsink[h] -= std::exp(sink[h]) / z * expectation;
      }
      for (int64_t t = 0; t < s.length; ++t)
        for (int64_t u = t; u < s.length; ++u) r.dg[qi(s.batch, s.start + t, h)] += dgc[u];
    }
  return r;
}

// ---- decode -------------------------------------------------------------------------------------------------

// SPEC §5 by definition: o [N,HQ,V].
inline std::vector<double> naive_decode(const DecodeCase& c) {
  const auto& cfg = c.cfg;
  const int64_t N = static_cast<int64_t>(cfg.seqlens.size()), HQ = cfg.heads, H = cfg.kv_heads;
  const int64_t K = cfg.head_dim, V = cfg.v_dim, G = HQ / H;
  const double scale = default_scale(cfg.scale, K), gate_factor = cfg.gate_scale ? scale : 1.0;
  const std::vector<double> q = c.q.values(), k = c.k.values(), v = c.v.values();
  const std::vector<double> g = cfg.gate ? c.g.values() : std::vector<double>();
  const std::vector<double> sink = cfg.sink ? c.sink.values() : std::vector<double>();
  std::vector<double> o(N * HQ * V, 0.0);
  int64_t start = 0;
  for (int64_t n = 0; n < N; start += cfg.seqlens[n], ++n)
    for (int64_t h = 0; h < HQ; ++h) {
      const int64_t L = cfg.seqlens[n], i = L - 1, hk = h / G;
      if (L == 0) continue;
      double z = cfg.sink ? std::exp(sink[h]) : 0.0;
      std::vector<double> acc(V, 0.0);
      for (int64_t j = 0; j <= i; ++j) {
        if (cfg.window && i - j >= *cfg.window) continue;
        double dot = 0, gate = 0;
        for (int64_t d = 0; d < K; ++d) dot += q[(n * HQ + h) * K + d] * k[((start + j) * H + hk) * K + d];
        if (cfg.gate)
          for (int64_t u = j + 1; u <= i; ++u) gate += g[(start + u) * HQ + h];
        const double e = std::exp(scale * dot + gate_factor * gate);
        z += e;
        for (int64_t d = 0; d < V; ++d) acc[d] += e * v[((start + j) * H + hk) * V + d];
      }
      for (int64_t d = 0; d < V; ++d) o[(n * HQ + h) * V + d] = z > 0 ? acc[d] / z : 0.0;
    }
  return o;
}

// ---- paged_attention ----------------------------------------------------------------------------------------

// OCP float8 E4M3FN from its bit fields (bias 7, no infinity, S.1111.111 NaN), written here independently
// of the library's decoder.
inline double ocp_e4m3(uint8_t code) {
  const int sign = code >> 7, exponent = (code >> 3) & 15, mantissa = code & 7;
  if (exponent == 15 && mantissa == 7) return std::nan("");
  const double magnitude = exponent == 0 ? mantissa / 8.0 * std::pow(2.0, -6)
                                         : (1.0 + mantissa / 8.0) * std::pow(2.0, exponent - 7);
  return sign ? -magnitude : magnitude;
}

// Element (block, slot, head, d) of a paged cache; fp8 caches are decoded with ocp_e4m3 from their bytes.
inline double cache_element(const flashgate::harness::OwnedTensor& cache, const std::vector<double>& values,
                            const std::vector<unsigned char>& bytes, int64_t index) {
  const flashgate::Tensor& t = cache.view();
  if (t.dtype != flashgate::DType::e4m3) return values[index];
  // index is logical; the harness allocates caches contiguously, so it is also the byte offset
  return ocp_e4m3(bytes[index]);
}

// SPEC §6 by definition: o [total_q,HQ,V].
inline std::vector<double> naive_paged(const PagedCase& c) {
  const auto& cfg = c.cfg;
  const int64_t N = static_cast<int64_t>(cfg.context_lens.size()), HQ = cfg.heads, H = cfg.kv_heads;
  const int64_t K = cfg.head_dim, V = cfg.v_dim, G = HQ / H, BS = cfg.block_size;
  const int64_t max_blocks = c.block_table.view().shape[1];
  const double scale = default_scale(cfg.scale, K);
  const std::vector<double> q = c.q.values(), table = c.block_table.values();
  const std::vector<double> kval = c.k_cache.values(), vval = c.v_cache.values();
  const std::vector<unsigned char> kbytes = c.k_cache.raw_bytes(), vbytes = c.v_cache.raw_bytes();
  const std::vector<double> sink = cfg.sink ? c.sink.values() : std::vector<double>();
  const bool per_token = c.k_scale.defined() && c.k_scale.numel() > 1;
  const std::vector<double> ks = c.k_scale.defined() ? c.k_scale.values() : std::vector<double>{1.0};
  const std::vector<double> vs = c.v_scale.defined() ? c.v_scale.values() : std::vector<double>{1.0};
  std::vector<double> o(cfg.total_q() * HQ * V, 0.0);
  int64_t qstart = 0;
  for (int64_t n = 0; n < N; qstart += cfg.query_lens[n], ++n)
    for (int64_t t = 0; t < cfg.query_lens[n]; ++t)
      for (int64_t h = 0; h < HQ; ++h) {
        const int64_t p = cfg.context_lens[n] - cfg.query_lens[n] + t, hk = h / G, row = qstart + t;
        double z = cfg.sink ? std::exp(sink[h]) : 0.0;
        std::vector<double> acc(V, 0.0);
        for (int64_t j = 0; j <= p; ++j) {
          if (cfg.window && p - j >= *cfg.window) continue;
          const int64_t block = static_cast<int64_t>(table[n * max_blocks + j / BS]), slot = j % BS;
          const int64_t si = per_token ? (block * H + hk) * BS + slot : 0;
          double dot = 0;
          for (int64_t d = 0; d < K; ++d)
            dot += q[(row * HQ + h) * K + d] * ks[si] *
                   cache_element(c.k_cache, kval, kbytes, ((block * BS + slot) * H + hk) * K + d);
          const double e = std::exp(scale * dot);
          z += e;
          for (int64_t d = 0; d < V; ++d)
            acc[d] += e * vs[si] * cache_element(c.v_cache, vval, vbytes, ((block * BS + slot) * H + hk) * V + d);
        }
        for (int64_t d = 0; d < V; ++d) o[(row * HQ + h) * V + d] = z > 0 ? acc[d] / z : 0.0;
      }
  return o;
}

}  // namespace reftest
