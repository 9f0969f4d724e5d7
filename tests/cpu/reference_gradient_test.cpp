// Every gradient of the CPU reference (dq, dk, dv, dg, dsink) against central finite differences of the
// loss sum(o * dout), all in float64 through the public API, on tiny cases with gate + sink + window + GQA +
// packed sequences (empty segment included). Also: the backward recomputes the forward itself.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "reference_naive.h"

namespace {

using namespace flashgate;
using harness::AttentionCase;
using harness::AttentionConfig;
using harness::OwnedTensor;
using reftest::kCpu;

double loss(AttentionCase& c) {
  attention_forward(c.forward_args(), kCpu);
  const std::vector<double> o = c.o.values(), dout = c.dout.values();
  double sum = 0;
  for (size_t i = 0; i < o.size(); ++i) sum += o[i] * dout[i];
  return sum;
}

// d loss / d x for every element of `x` (an input of `c`), by central differences.
std::vector<double> numeric_gradient(AttentionCase& c, OwnedTensor& x) {
  constexpr double kStep = 1e-5;  // truncation ~ step^2, cancellation ~ 1e-16 / step: both near 1e-10
  std::vector<double> values = x.values(), grad(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    const double keep = values[i];
    values[i] = keep + kStep;
    x.set_values(values);
    const double up = loss(c);
    values[i] = keep - kStep;
    x.set_values(values);
    const double down = loss(c);
    values[i] = keep;
    grad[i] = (up - down) / (2 * kStep);
  }
  x.set_values(values);
  return grad;
}

void check_gradients(const AttentionConfig& cfg, harness::Rng& rng) {
  SCOPED_TRACE(cfg.describe());
  AttentionCase c = AttentionCase::random(cfg, rng);
  attention_forward(c.forward_args(), kCpu);
  attention_backward(c.backward_args(), kCpu);
  const double tol = 1e-7;
  reftest::expect_close("dq", c.dq.values(), numeric_gradient(c, c.q), tol);
  reftest::expect_close("dk", c.dk.values(), numeric_gradient(c, c.k), tol);
  reftest::expect_close("dv", c.dv.values(), numeric_gradient(c, c.v), tol);
  if (cfg.gate) reftest::expect_close("dg", c.dg.values(), numeric_gradient(c, c.g), tol);
  if (cfg.sink) reftest::expect_close("dsink", c.dsink.values(), numeric_gradient(c, c.sink), tol);
}

AttentionConfig tiny(std::vector<int64_t> packed, int64_t heads, int64_t kv_heads) {
  AttentionConfig cfg;
  cfg.dtype = DType::f64;
  cfg.packed = std::move(packed);
  cfg.heads = heads, cfg.kv_heads = kv_heads, cfg.head_dim = 4, cfg.v_dim = 3;
  cfg.gate = cfg.sink = true;
  return cfg;
}

TEST(ReferenceGradient, GateSinkWindowGqaPacked) {
  REFTEST_SEEDED_RNG(rng);
  AttentionConfig cfg = tiny({5, 0, 7}, 4, 2);
  cfg.window = 3;
  check_gradients(cfg, rng);
}

TEST(ReferenceGradient, GateSinkNoWindowMqaDense) {
  REFTEST_SEEDED_RNG(rng);
  AttentionConfig cfg = tiny({}, 3, 1);
  cfg.batch = 2, cfg.seqlen = 6;
  cfg.scale = 0.8f;
  cfg.row_pad = 2;
  check_gradients(cfg, rng);
}

TEST(ReferenceGradient, WindowOneAndZero) {
  REFTEST_SEEDED_RNG(rng);
  for (int64_t w : {1, 0}) {
    AttentionConfig cfg = tiny({4, 3}, 2, 2);
    cfg.window = w;
    check_gradients(cfg, rng);
  }
}

// The given o and lse are only caches: poisoning them changes no gradient.
TEST(ReferenceGradient, BackwardRecomputesTheForward) {
  REFTEST_SEEDED_RNG(rng);
  AttentionConfig cfg = tiny({6, 0, 9}, 4, 2);
  cfg.window = 5;
  AttentionCase c = AttentionCase::random(cfg, rng);
  attention_forward(c.forward_args(), kCpu);
  attention_backward(c.backward_args(), kCpu);
  const std::vector<double> dq = c.dq.values(), dk = c.dk.values(), dv = c.dv.values(), dg = c.dg.values();
  const std::vector<double> dsink = c.dsink.values();
  c.o.poison();
  c.lse.poison();
  for (OwnedTensor* t : {&c.dq, &c.dk, &c.dv, &c.dg, &c.dsink}) t->poison();
  attention_backward(c.backward_args(), kCpu);
  reftest::expect_identical("dq", c.dq.values(), dq);
  reftest::expect_identical("dk", c.dk.values(), dk);
  reftest::expect_identical("dv", c.dv.values(), dv);
  reftest::expect_identical("dg", c.dg.values(), dg);
  reftest::expect_identical("dsink", c.dsink.values(), dsink);
}

}  // namespace
