// The slice ops of context parallelism proved exact on the fp64 CPU backend: a sequence cut into query slices and
// (independently) key slices, every slice pair attended by attention_forward_slice and the pairs of a row merged by
// the LSE rule, gives attention_forward's o and lse; the pairs' backward shares (given the merged lse and D =
// rowsum(o * dout)) summed, with dg made from the cumulative gates' gradients by suffix sums, give
// attention_backward's dq, dk, dv, dg and dsink. Fresh random problems with and without gate, sink, window and GQA;
// the sink goes to the first key slice; every pair runs, those that see nothing included.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "flashgate/flashgate.h"
#include "harness/owned_tensor.h"

namespace {

using flashgate::DType;
using flashgate::harness::OwnedTensor;

struct Dims {
  int64_t B, T, HQ, H, K, V;
};

// Values of x [B,T,heads,width] (logical order) for positions [t0, t1).
std::vector<double> rows_of(const std::vector<double>& x, const Dims& d, int64_t heads, int64_t width, int64_t t0,
                            int64_t t1) {
  std::vector<double> out;
  for (int64_t b = 0; b < d.B; ++b)
    for (int64_t t = t0; t < t1; ++t)
      for (int64_t i = 0; i < heads * width; ++i) out.push_back(x[((b * d.T + t) * heads) * width + i]);
  return out;
}

OwnedTensor tensor(std::vector<int64_t> shape, const std::vector<double>& values) {
  OwnedTensor t(DType::f64, std::move(shape));
  if (!values.empty()) t.set_values(values);
  else t.poison();
  return t;
}

// Cut points 0 = c_0 < c_1 < ... < c_n = T (n >= 1 slices).
std::vector<int64_t> cuts(int64_t T, std::mt19937_64& rng) {
  std::vector<int64_t> c = {0, T};
  const int extra = static_cast<int>(rng() % 4);
  for (int i = 0; i < extra && T > 1; ++i) c.push_back(1 + static_cast<int64_t>(rng() % (T - 1)));
  std::sort(c.begin(), c.end());
  c.erase(std::unique(c.begin(), c.end()), c.end());
  return c;
}

// max |a - b| over max(1, max |b|).
double worst(const std::vector<double>& a, const std::vector<double>& b) {
  double err = 0, ref = 1;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isinf(b[i]) && a[i] == b[i]) continue;
    err = std::max(err, std::fabs(a[i] - b[i]));
    ref = std::max(ref, std::fabs(b[i]));
  }
  return err / ref;
}

TEST(Slices, PartitionedAndMergedEqualsTheWholeSequence) {
  const uint64_t seed = flashgate::harness::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (int trial = 0; trial < 60; ++trial) {
    Dims d;
    d.B = 1 + static_cast<int64_t>(rng() % 2);
    d.T = 1 + static_cast<int64_t>(rng() % 40);
    d.H = 1 + static_cast<int64_t>(rng() % 2);
    d.HQ = d.H * (1 + static_cast<int64_t>(rng() % 3));
    d.K = 1 + static_cast<int64_t>(rng() % 12);
    d.V = 1 + static_cast<int64_t>(rng() % 12);
    const bool gate = rng() % 2, sink = rng() % 2;
    const int64_t windows[] = {-1, 0, 1, 3, 17};
    const int64_t window = windows[rng() % 5];
    const std::string at = "trial " + std::to_string(trial) + " B" + std::to_string(d.B) + " T" + std::to_string(d.T) +
                           " HQ" + std::to_string(d.HQ) + " H" + std::to_string(d.H) + (gate ? " gate" : "") +
                           (sink ? " sink" : "") + " window " + std::to_string(window);
    SCOPED_TRACE(at);

    OwnedTensor q(DType::f64, {d.B, d.T, d.HQ, d.K}), k(DType::f64, {d.B, d.T, d.H, d.K}),
        v(DType::f64, {d.B, d.T, d.H, d.V}), dout(DType::f64, {d.B, d.T, d.HQ, d.V}), g, s;
    q.fill_normal(rng), k.fill_normal(rng), v.fill_normal(rng), dout.fill_normal(rng);
    if (gate) g = OwnedTensor(DType::f64, {d.B, d.T, d.HQ}), g.fill_log_sigmoid_normal(rng);
    if (sink) s = OwnedTensor(DType::f64, {d.HQ}), s.fill_normal(rng);
    const float scale = static_cast<float>(0.2 + 0.6 * std::uniform_real_distribution<double>()(rng));
    const std::optional<int64_t> win = window < 0 ? std::nullopt : std::optional<int64_t>(window);

    // The whole sequence.
    OwnedTensor o(DType::f64, {d.B, d.T, d.HQ, d.V}), lse(DType::f64, {d.B, d.T, d.HQ});
    flashgate::ForwardArgs fa;
    fa.q = q.view(), fa.k = k.view(), fa.v = v.view(), fa.o = o.view(), fa.lse = lse.view();
    if (gate) fa.g = g.view();
    if (sink) fa.sink = s.view();
    fa.scale = scale, fa.window = win;
    flashgate::attention_forward(fa);
    OwnedTensor dq(DType::f64, {d.B, d.T, d.HQ, d.K}), dk(DType::f64, {d.B, d.T, d.H, d.K}),
        dv(DType::f64, {d.B, d.T, d.H, d.V}), dg, dsink;
    if (gate) dg = OwnedTensor(DType::f64, {d.B, d.T, d.HQ});
    if (sink) dsink = OwnedTensor(DType::f64, {d.HQ});
    flashgate::BackwardArgs ba;
    ba.q = q.view(), ba.k = k.view(), ba.v = v.view(), ba.o = o.view(), ba.lse = lse.view(), ba.dout = dout.view();
    ba.dq = dq.view(), ba.dk = dk.view(), ba.dv = dv.view();
    if (gate) ba.g = g.view(), ba.dg = dg.view();
    if (sink) ba.sink = s.view(), ba.dsink = dsink.view();
    ba.scale = scale, ba.window = win;
    flashgate::attention_backward(ba);

    // The cumulative gate G over each whole sequence, [B,T,HQ].
    const std::vector<double> qv = q.values(), kv = k.values(), vv = v.values(), dov = dout.values();
    std::vector<double> G(static_cast<size_t>(d.B * d.T * d.HQ), 0.0);
    if (gate) {
      const std::vector<double> gv = g.values();
      for (int64_t b = 0; b < d.B; ++b)
        for (int64_t h = 0; h < d.HQ; ++h) {
          double acc = 0;
          for (int64_t t = 0; t < d.T; ++t) G[(b * d.T + t) * d.HQ + h] = acc += gv[(b * d.T + t) * d.HQ + h];
        }
    }

    // Forward by slice pairs, merged by the LSE rule.
    const std::vector<int64_t> qc = cuts(d.T, rng), kc = cuts(d.T, rng);
    const size_t rows = static_cast<size_t>(d.B * d.T * d.HQ);
    std::vector<double> m_lse(rows, -INFINITY), m_o(rows * d.V, 0.0);
    struct Part {
      int64_t q0, q1, k0, k1;
      std::vector<double> o, lse;
    };
    std::vector<Part> parts;
    for (size_t a = 0; a + 1 < qc.size(); ++a)
      for (size_t c = 0; c + 1 < kc.size(); ++c) {
        Part part{qc[a], qc[a + 1], kc[c], kc[c + 1], {}, {}};
        const int64_t Tq = part.q1 - part.q0, Tk = part.k1 - part.k0;
        OwnedTensor sq = tensor({d.B, Tq, d.HQ, d.K}, rows_of(qv, d, d.HQ, d.K, part.q0, part.q1));
        OwnedTensor sk = tensor({d.B, Tk, d.H, d.K}, rows_of(kv, d, d.H, d.K, part.k0, part.k1));
        OwnedTensor sv = tensor({d.B, Tk, d.H, d.V}, rows_of(vv, d, d.H, d.V, part.k0, part.k1));
        OwnedTensor so = tensor({d.B, Tq, d.HQ, d.V}, {}), sl = tensor({d.B, Tq, d.HQ}, {}), gq, gk;
        flashgate::SliceForwardArgs sa;
        sa.q = sq.view(), sa.k = sk.view(), sa.v = sv.view(), sa.o = so.view(), sa.lse = sl.view();
        if (gate) {
          gq = tensor({d.B, Tq, d.HQ}, rows_of(G, d, d.HQ, 1, part.q0, part.q1));
          gk = tensor({d.B, Tk, d.HQ}, rows_of(G, d, d.HQ, 1, part.k0, part.k1));
          sa.gate_q = gq.view(), sa.gate_k = gk.view();
        }
        if (sink && part.k0 == 0) sa.sink = s.view();  // the sink once per row: with the first key slice
        sa.q_start = part.q0, sa.k_start = part.k0, sa.scale = scale, sa.window = win;
        flashgate::attention_forward_slice(sa);
        part.o = so.values(), part.lse = sl.values();
        parts.push_back(std::move(part));
      }
    for (const Part& part : parts)  // lse = log sum exp(lse_s)
      for (int64_t b = 0; b < d.B; ++b)
        for (int64_t i = part.q0; i < part.q1; ++i)
          for (int64_t h = 0; h < d.HQ; ++h) {
            const double x = part.lse[(b * (part.q1 - part.q0) + i - part.q0) * d.HQ + h];
            double& m = m_lse[(b * d.T + i) * d.HQ + h];
            if (x == -INFINITY) continue;
            m = m == -INFINITY ? x : std::max(m, x) + std::log1p(std::exp(-std::fabs(m - x)));
          }
    for (const Part& part : parts)  // o = sum exp(lse_s - lse) o_s
      for (int64_t b = 0; b < d.B; ++b)
        for (int64_t i = part.q0; i < part.q1; ++i)
          for (int64_t h = 0; h < d.HQ; ++h) {
            const size_t src = static_cast<size_t>((b * (part.q1 - part.q0) + i - part.q0) * d.HQ + h);
            const size_t dst = static_cast<size_t>((b * d.T + i) * d.HQ + h);
            if (part.lse[src] == -INFINITY) continue;
            const double w = std::exp(part.lse[src] - m_lse[dst]);
            for (int64_t c = 0; c < d.V; ++c) m_o[dst * d.V + c] += w * part.o[src * d.V + c];
          }
    EXPECT_LT(worst(m_o, o.values()), 1e-12) << "o";
    EXPECT_LT(worst(m_lse, lse.values()), 1e-12) << "lse";

    // Backward by slice pairs: shares summed; dg from dG by suffix sums over each sequence.
    std::vector<double> D(rows, 0.0);
    for (size_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < d.V; ++c) D[r] += m_o[r * d.V + c] * dov[r * d.V + c];
    std::vector<double> s_dq(qv.size(), 0.0), s_dk(kv.size(), 0.0), s_dv(vv.size(), 0.0), dG(rows, 0.0);
    double s_dsink_total = 0;
    std::vector<double> s_dsink(static_cast<size_t>(d.HQ), 0.0);
    for (const Part& part : parts) {
      const int64_t Tq = part.q1 - part.q0, Tk = part.k1 - part.k0;
      OwnedTensor sq = tensor({d.B, Tq, d.HQ, d.K}, rows_of(qv, d, d.HQ, d.K, part.q0, part.q1));
      OwnedTensor sk = tensor({d.B, Tk, d.H, d.K}, rows_of(kv, d, d.H, d.K, part.k0, part.k1));
      OwnedTensor sv = tensor({d.B, Tk, d.H, d.V}, rows_of(vv, d, d.H, d.V, part.k0, part.k1));
      OwnedTensor sdo = tensor({d.B, Tq, d.HQ, d.V}, rows_of(dov, d, d.HQ, d.V, part.q0, part.q1));
      OwnedTensor sl = tensor({d.B, Tq, d.HQ}, rows_of(m_lse, d, d.HQ, 1, part.q0, part.q1));
      OwnedTensor sD = tensor({d.B, Tq, d.HQ}, rows_of(D, d, d.HQ, 1, part.q0, part.q1));
      OwnedTensor sdq = tensor({d.B, Tq, d.HQ, d.K}, {}), sdk = tensor({d.B, Tk, d.H, d.K}, {}),
                  sdv = tensor({d.B, Tk, d.H, d.V}, {}), gq, gk, dgq, dgk, ds;
      flashgate::SliceBackwardArgs sb;
      sb.q = sq.view(), sb.k = sk.view(), sb.v = sv.view(), sb.dout = sdo.view(), sb.lse = sl.view(),
      sb.D = sD.view();
      sb.dq = sdq.view(), sb.dk = sdk.view(), sb.dv = sdv.view();
      if (gate) {
        gq = tensor({d.B, Tq, d.HQ}, rows_of(G, d, d.HQ, 1, part.q0, part.q1));
        gk = tensor({d.B, Tk, d.HQ}, rows_of(G, d, d.HQ, 1, part.k0, part.k1));
        dgq = tensor({d.B, Tq, d.HQ}, {}), dgk = tensor({d.B, Tk, d.HQ}, {});
        sb.gate_q = gq.view(), sb.gate_k = gk.view(), sb.dgate_q = dgq.view(), sb.dgate_k = dgk.view();
      }
      if (sink && part.k0 == 0) ds = tensor({d.HQ}, {}), sb.sink = s.view(), sb.dsink = ds.view();
      sb.q_start = part.q0, sb.k_start = part.k0, sb.scale = scale, sb.window = win;
      flashgate::attention_backward_slice(sb);
      const auto add_rows = [&](std::vector<double>& whole, const std::vector<double>& share, int64_t heads,
                                int64_t width, int64_t t0, int64_t t1) {
        size_t n = 0;
        for (int64_t b = 0; b < d.B; ++b)
          for (int64_t t = t0; t < t1; ++t)
            for (int64_t i = 0; i < heads * width; ++i) whole[((b * d.T + t) * heads) * width + i] += share[n++];
      };
      add_rows(s_dq, sdq.values(), d.HQ, d.K, part.q0, part.q1);
      add_rows(s_dk, sdk.values(), d.H, d.K, part.k0, part.k1);
      add_rows(s_dv, sdv.values(), d.H, d.V, part.k0, part.k1);
      if (gate) {
        add_rows(dG, dgq.values(), d.HQ, 1, part.q0, part.q1);
        add_rows(dG, dgk.values(), d.HQ, 1, part.k0, part.k1);
      }
      if (ds.defined()) {
        const std::vector<double> x = ds.values();
        for (int64_t h = 0; h < d.HQ; ++h) s_dsink[h] += x[h];
      }
    }
    EXPECT_LT(worst(s_dq, dq.values()), 1e-11) << "dq";
    EXPECT_LT(worst(s_dk, dk.values()), 1e-11) << "dk";
    EXPECT_LT(worst(s_dv, dv.values()), 1e-11) << "dv";
    if (gate) {
      std::vector<double> s_dg(rows, 0.0);
      for (int64_t b = 0; b < d.B; ++b)
        for (int64_t h = 0; h < d.HQ; ++h) {
          double suffix = 0;
          for (int64_t t = d.T - 1; t >= 0; --t)
            s_dg[(b * d.T + t) * d.HQ + h] = suffix += dG[(b * d.T + t) * d.HQ + h];
        }
      EXPECT_LT(worst(s_dg, dg.values()), 1e-11) << "dg";
    }
    if (sink) EXPECT_LT(worst(s_dsink, dsink.values()), 1e-11) << "dsink";
    (void)s_dsink_total;
  }
}

// Bad slice arguments name the argument before anything runs.
TEST(Slices, BadArgumentsNameTheArgument) {
  OwnedTensor q(DType::f64, {1, 4, 2, 8}), k(DType::f64, {1, 6, 1, 8}), v(DType::f64, {1, 6, 1, 8});
  OwnedTensor o(DType::f64, {1, 4, 2, 8}), lse(DType::f64, {1, 4, 2}), gq(DType::f64, {1, 4, 2});
  flashgate::SliceForwardArgs a;
  a.q = q.view(), a.k = k.view(), a.v = v.view(), a.o = o.view(), a.lse = lse.view();
  a.q_start = -1;
  try {
    flashgate::attention_forward_slice(a);
    ADD_FAILURE() << "a negative q_start ran";
  } catch (const flashgate::Error& e) {
    EXPECT_NE(std::string(e.what()).find("q_start"), std::string::npos) << e.what();
  }
  a.q_start = 0, a.gate_q = gq.view();
  try {
    flashgate::attention_forward_slice(a);
    ADD_FAILURE() << "gate_q without gate_k ran";
  } catch (const flashgate::Error& e) {
    EXPECT_NE(std::string(e.what()).find("gate_k"), std::string::npos) << e.what();
  }
  // o's residual codes: int8 shaped as o, and only for fp16 / bf16 outputs (these are fp64).
  OwnedTensor codes(DType::i8, {1, 4, 2, 8});
  a.gate_q = {}, a.o_residual = codes.view();
  try {
    flashgate::attention_forward_slice(a);
    ADD_FAILURE() << "o_residual of an fp64 o ran";
  } catch (const flashgate::Error& e) {
    EXPECT_EQ(e.argument(), "o_residual") << e.what();
  }
}

}  // namespace
