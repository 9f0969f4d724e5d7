// GPU tests of the slice ops (context parallelism) on the CUDA backends: fresh random slice pairs (queries and keys at
// their own global positions, before, across and after each other, positions near 2^40 too) with and without gate,
// sink, window and GQA, fp16 and bf16, against the cpu backend's slice ops on the same inputs. Forward: o within
// SPEC §7's relative RMS, lse the same (-inf exactly where a row sees nothing), on each backend that serves the pair
// (cuda; hopper on sm_90, which must serve every one). Backward (given rows' lse and D as a merge with other slices
// leaves them; windows of 1 forward only): dq, dk, dv, the cumulative gates' gradients and dsink by SPEC §7's metric
// (its floor where a gradient nearly vanishes), each case on the cuda backend's planner path (the MMA kernels wherever
// they fit), again on its forced SIMT path, and on the hopper backend where it serves the pair, a failure naming the
// backend and path that ran (cuda::last_slice_backward_path). Outputs start poisoned.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "flashgate/flashgate.h"
#include "harness/metrics.h"
#include "harness/owned_tensor.h"
#include "support/compare.h"
#include "support/gpu_run.h"

namespace {

using flashgate::Backend;
using flashgate::Device;
using flashgate::DType;
using flashgate::harness::OwnedTensor;

// lse: -inf at the same rows, the finite rest within `tol` relative RMS.
void expect_same_lse(const OwnedTensor& out, const OwnedTensor& ref, double tol) {
  const std::vector<double> o = out.values(), r = ref.values();
  std::vector<double> of, rf;
  for (size_t i = 0; i < r.size(); ++i) {
    if (std::isinf(r[i]) || std::isinf(o[i])) {
      EXPECT_EQ(o[i], r[i]) << "lse row " << i;
      continue;
    }
    of.push_back(o[i]), rf.push_back(r[i]);
  }
  EXPECT_TRUE(flashgate::harness::no_nan(o)) << "lse has NaN";
  if (!rf.empty()) EXPECT_LE(flashgate::harness::relative_rms(of, rf), tol) << "lse";
}

// One random slice pair: its sizes, positions, features and host inputs.
struct SliceCase {
  DType dtype;
  int64_t B, H, HQ, K, V, Tq, Tk, q_start, k_start, window;
  bool gate, sink;
  OwnedTensor q, k, v, gate_q, gate_k, s;

  // wide: head dims up to 512 (the backward's widest buckets) besides the usual ones.
  static SliceCase random(int trial, flashgate::harness::Rng& rng, bool wide = false) {
    static const int64_t dims[] = {8, 40, 64, 96, 128, 200, 256, 320, 512};
    static const int64_t windows[] = {-1, -1, 0, 1, 17, 130, 1000};
    SliceCase c;
    c.dtype = trial % 2 ? DType::bf16 : DType::f16;
    c.B = 1 + rng() % 2, c.H = 1 + rng() % 2, c.HQ = c.H * (1 + rng() % 3);
    const int64_t n_dims = wide ? 9 : 7;
    c.K = dims[rng() % n_dims], c.V = dims[rng() % n_dims];
    c.Tq = 1 + rng() % 300, c.Tk = 1 + rng() % 300;
    // Near each other (before, across, after) or far apart; every so often at positions near 2^40.
    const int64_t base = trial % 5 == 4 ? (int64_t{1} << 40) : 0;
    c.q_start = base + rng() % 700, c.k_start = base + rng() % 700;
    c.gate = rng() % 2, c.sink = rng() % 2;
    c.window = windows[rng() % 7];
    c.q = OwnedTensor(c.dtype, {c.B, c.Tq, c.HQ, c.K}), c.k = OwnedTensor(c.dtype, {c.B, c.Tk, c.H, c.K});
    c.v = OwnedTensor(c.dtype, {c.B, c.Tk, c.H, c.V});
    c.q.fill_normal(rng), c.k.fill_normal(rng), c.v.fill_normal(rng);
    if (c.gate) c.make_gates(rng);
    if (c.sink) c.s = OwnedTensor(DType::f32, {c.HQ}), c.s.fill_normal(rng);
    return c;
  }

  // One cumulative gate over the positions both slices cover, read at each slice's positions.
  void make_gates(flashgate::harness::Rng& rng) {
    const int64_t first = std::min(q_start, k_start), span = std::max(q_start + Tq, k_start + Tk) - first;
    OwnedTensor g(DType::f32, {B, span, HQ});
    g.fill_log_sigmoid_normal(rng);
    const std::vector<double> gv = g.values();
    std::vector<double> G(gv.size());
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < HQ; ++h) {
        double run = -40.0;  // the prefix before `first`
        for (int64_t t = 0; t < span; ++t) {
          const size_t i = static_cast<size_t>((b * span + t) * HQ + h);
          G[i] = run += gv[i];
        }
      }
    const auto at = [&](int64_t start, int64_t T) {
      std::vector<double> out;
      for (int64_t b = 0; b < B; ++b)
        for (int64_t t = 0; t < T; ++t)
          for (int64_t h = 0; h < HQ; ++h) out.push_back(G[static_cast<size_t>((b * span + start - first + t) * HQ + h)]);
      return out;
    };
    gate_q = OwnedTensor(DType::f32, {B, Tq, HQ}), gate_k = OwnedTensor(DType::f32, {B, Tk, HQ});
    gate_q.set_values(at(q_start, Tq)), gate_k.set_values(at(k_start, Tk));
  }

  std::string describe(int trial) const {
    return "trial " + std::to_string(trial) + (dtype == DType::bf16 ? " bf16" : " fp16") + " B" + std::to_string(B) +
           " HQ" + std::to_string(HQ) + " H" + std::to_string(H) + " K" + std::to_string(K) + " V" + std::to_string(V) +
           " Tq" + std::to_string(Tq) + " Tk" + std::to_string(Tk) + " q_start " + std::to_string(q_start) +
           " k_start " + std::to_string(k_start) + (gate ? " gate" : "") + (sink ? " sink" : "") + " window " +
           std::to_string(window);
  }

  // The inputs of one side (the host tensors, or their device copies in `dev`).
  struct Inputs {
    OwnedTensor q, k, v, gate_q, gate_k, s;
  };
  Inputs on(Device device) const {
    const auto to = [&](const OwnedTensor& t) { return t.defined() ? t.to(device) : OwnedTensor(); };
    return {to(q), to(k), to(v), to(gate_q), to(gate_k), to(s)};
  }

  flashgate::SliceForwardArgs forward(const Inputs& in, const OwnedTensor& o, const OwnedTensor& lse) const {
    flashgate::SliceForwardArgs a;
    a.q = in.q.view(), a.k = in.k.view(), a.v = in.v.view(), a.o = o.view(), a.lse = lse.view();
    if (gate) a.gate_q = in.gate_q.view(), a.gate_k = in.gate_k.view();
    if (sink) a.sink = in.s.view();
    a.q_start = q_start, a.k_start = k_start;
    if (window >= 0) a.window = window;
    return a;
  }
};

// Rows whose keys hold less than 2^-127 of the mass against the sink (a long gate decay between far-apart slices):
// every weight of theirs is below fp32's normal range, which the fp32 softmax flushes, so what they give only has to
// stay tiny (their o is below 2^-100 relative to v; merged, their slice weighs nothing). lse_cpu: the rows' lse with
// the sink.
std::vector<bool> rows_beyond_fp32(const SliceCase& c, const SliceCase::Inputs& host, const OwnedTensor& lse_cpu) {
  std::vector<bool> beyond(static_cast<size_t>(c.B * c.Tq * c.HQ), false);
  if (!c.sink) return beyond;
  OwnedTensor o_keys(c.dtype, {c.B, c.Tq, c.HQ, c.V}), lse_keys(DType::f32, {c.B, c.Tq, c.HQ});
  flashgate::SliceForwardArgs keys_alone = c.forward(host, o_keys, lse_keys);
  keys_alone.sink = flashgate::Tensor();
  flashgate::attention_forward_slice(keys_alone, fgtest::on(Backend::cpu));
  const std::vector<double> with = lse_cpu.values(), keys = lse_keys.values();
  for (size_t r = 0; r < beyond.size(); ++r) beyond[r] = keys[r] - with[r] < -127.0 * std::log(2.0);
  return beyond;
}

double rms(const std::vector<double>& x) {
  double sum = 0;
  for (double v : x) sum += v * v;
  return x.empty() ? 0.0 : std::sqrt(sum / static_cast<double>(x.size()));
}

// A per-row output ([B, Tq, HQ, width]) within `tol` on the rows in fp32's range, tiny on the others.
void expect_rows_close(const std::string& what, const OwnedTensor& out, const OwnedTensor& ref,
                       const std::vector<bool>& beyond_fp32, int64_t width, double tol, double floor = 0) {
  const std::vector<double> got = out.values(), want = ref.values();
  std::vector<double> g, w;
  for (size_t i = 0; i < want.size(); ++i) {
    if (!beyond_fp32[i / static_cast<size_t>(width)]) {
      g.push_back(got[i]), w.push_back(want[i]);
    } else {
      EXPECT_LE(std::abs(got[i]), 1e-30) << what << " element " << i << " of a row below fp32's range";
    }
  }
  EXPECT_TRUE(flashgate::harness::no_nan(got)) << what << " has NaN";
  if (!w.empty()) EXPECT_LE(flashgate::harness::relative_rms(g, w, floor), tol) << what << " (floor " << floor << ")";
}

// A per-key output within `tol`, or tiny everywhere where every row is below fp32's range.
void expect_keys_close(const std::string& what, const OwnedTensor& out, const OwnedTensor& ref,
                       const std::vector<bool>& beyond_fp32, double tol, double floor = 0) {
  if (std::find(beyond_fp32.begin(), beyond_fp32.end(), false) != beyond_fp32.end()) {
    const std::vector<double> got = out.values();
    EXPECT_TRUE(flashgate::harness::no_nan(got)) << what << " has NaN";
    EXPECT_LE(flashgate::harness::relative_rms(got, ref.values(), floor), tol) << what << " (floor " << floor << ")";
    return;
  }
  for (double x : out.values()) EXPECT_LE(std::abs(x), 1e-30) << what << " where every row is below fp32's range";
}

// Whether the hopper backend is built and serves a plain bf16 forward on this device (an sm_90 GPU).
bool hopper_serves_training() {
  const OwnedTensor x(DType::bf16, {1, 64, 1, 64}, Device::cuda);
  flashgate::ForwardArgs a;
  a.q = x.view(), a.k = x.view(), a.v = x.view(), a.o = x.view();
  return flashgate::backend_serves(a, Backend::hopper);
}

TEST(SliceForwardCuda, MatchesTheCpuSlice) {
  FLASHGATE_REQUIRE_GPU();
  const uint64_t seed = flashgate::harness::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed) + " (FLASHGATE_SEED replays it)");
  flashgate::harness::Rng rng(seed);
  int ran_hopper = 0;
  for (int trial = 0; trial < 40; ++trial) {
    const SliceCase c = SliceCase::random(trial, rng);
    SCOPED_TRACE(c.describe(trial));
    const SliceCase::Inputs host = c.on(Device::cpu), dev = c.on(Device::cuda);
    OwnedTensor o(c.dtype, {c.B, c.Tq, c.HQ, c.V}), lse(DType::f32, {c.B, c.Tq, c.HQ});
    OwnedTensor dO(c.dtype, {c.B, c.Tq, c.HQ, c.V}, Device::cuda), dlse(DType::f32, {c.B, c.Tq, c.HQ}, Device::cuda);
    o.poison(), lse.poison();
    flashgate::attention_forward_slice(c.forward(host, o, lse), fgtest::on(Backend::cpu));
    const std::vector<bool> beyond = rows_beyond_fp32(c, host, lse);
    const std::vector<Backend> backends = fgtest::cuda_backends_for(c.forward(dev, dO, dlse));
    EXPECT_FALSE(backends.empty()) << "no CUDA backend serves the slice pair";
    for (const Backend b : backends) {
      SCOPED_TRACE(fgtest::backend_note(b));
      dO.poison(), dlse.poison();
      flashgate::attention_forward_slice(c.forward(dev, dO, dlse), fgtest::on(b));
      flashgate::harness::device_synchronize();
      expect_rows_close("o", dO, o, beyond, c.V, 0.005);
      expect_same_lse(dlse, lse, 0.005);
    }
    ran_hopper += std::count(backends.begin(), backends.end(), Backend::hopper);
  }
  // On an sm_90 device the hopper backend serves every slice pair of these shapes (K, V multiples of 8 here).
  if (hopper_serves_training()) EXPECT_EQ(ran_hopper, 40) << "the hopper backend refused slice pairs";
}

// The slice backward forced onto its SIMT kernels for one scope (cuda::slice_backward_overrides), or left to the planner.
class ForcedSliceSimt {
 public:
  explicit ForcedSliceSimt(bool force) : saved_(flashgate::cuda::slice_backward_overrides().force_simt) {
    flashgate::cuda::slice_backward_overrides().force_simt = force;
  }
  ~ForcedSliceSimt() { flashgate::cuda::slice_backward_overrides().force_simt = saved_; }
  ForcedSliceSimt(const ForcedSliceSimt&) = delete;
  ForcedSliceSimt& operator=(const ForcedSliceSimt&) = delete;

 private:
  bool saved_;
};

TEST(SliceBackwardCuda, MatchesTheCpuSlice) {
  FLASHGATE_REQUIRE_GPU();
  const uint64_t seed = flashgate::harness::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed) + " (FLASHGATE_SEED replays it)");
  flashgate::harness::Rng rng(seed);
  int ran_mma = 0, ran_hopper = 0;
  for (int trial = 0; trial < 30; ++trial) {
    // A window of 1 or a key slice of one token leaves each row one key, whose dS = P (dP - D) is the rounding of
    // the given D against this kernel's fp32 dP: SPEC 7's peaked rows, whose true gradients vanish (the unsplit
    // tests check them with SPEC 7's floor); the forward test covers these slices.
    const bool wide = trial % 3 == 2;
    SliceCase c = SliceCase::random(trial, rng, wide);
    while (c.Tk == 1) c = SliceCase::random(trial, rng, wide);
    if (c.window == 1) c.window = 2;
    SCOPED_TRACE(c.describe(trial));
    const SliceCase::Inputs host = c.on(Device::cpu);
    // The rows' statistics as merging with other slices leaves them (the distributed op's case): lse and D =
    // rowsum(o * dout) of the pair's own softmax, then other keys holding u times the pair's mass (u ~ U(0.25, 4))
    // with a D of their own, x ~ N(0, rms(D)); a row that sees nothing here keeps -inf. (With the pair's own
    // statistics alone a gate's row gradient E - D mass is 0 but for the rounding of E and D, the row's whole mass
    // being here: it would measure fp32 sums' noise.)
    OwnedTensor o(c.dtype, {c.B, c.Tq, c.HQ, c.V}), lse(DType::f32, {c.B, c.Tq, c.HQ});
    flashgate::attention_forward_slice(c.forward(host, o, lse), fgtest::on(Backend::cpu));
    OwnedTensor dout(c.dtype, {c.B, c.Tq, c.HQ, c.V}), D(DType::f32, {c.B, c.Tq, c.HQ});
    dout.fill_normal(rng);
    {
      const std::vector<double> ov = o.values(), dv = dout.values();
      std::vector<double> l = lse.values(), d(l.size(), 0.0);
      for (size_t r = 0; r < d.size(); ++r)
        for (int64_t x = 0; x < c.V; ++x) d[r] += ov[r * c.V + x] * dv[r * c.V + x];
      std::uniform_real_distribution<double> share(0.25, 4.0);
      std::normal_distribution<double> other(0.0, std::max(rms(d), 1e-3));
      for (size_t r = 0; r < d.size(); ++r) {
        if (std::isinf(l[r])) continue;
        const double u = share(rng);
        l[r] += std::log1p(u);
        d[r] = (d[r] + u * other(rng)) / (1.0 + u);
      }
      lse.set_values(l);
      D.set_values(d);
    }
    struct Grads {
      OwnedTensor dq, dk, dv, dgq, dgk, dsink;
    };
    const auto grads = [&](Device dev) {
      Grads g{OwnedTensor(c.dtype, {c.B, c.Tq, c.HQ, c.K}, dev), OwnedTensor(c.dtype, {c.B, c.Tk, c.H, c.K}, dev),
              OwnedTensor(c.dtype, {c.B, c.Tk, c.H, c.V}, dev), OwnedTensor(), OwnedTensor(), OwnedTensor()};
      if (c.gate)
        g.dgq = OwnedTensor(DType::f32, {c.B, c.Tq, c.HQ}, dev), g.dgk = OwnedTensor(DType::f32, {c.B, c.Tk, c.HQ}, dev);
      if (c.sink) g.dsink = OwnedTensor(DType::f32, {c.HQ}, dev);
      for (OwnedTensor* t : {&g.dq, &g.dk, &g.dv, &g.dgq, &g.dgk, &g.dsink})
        if (t->defined()) t->poison();
      return g;
    };
    const auto args = [&](const SliceCase::Inputs& in, const OwnedTensor& dout_, const OwnedTensor& lse_,
                          const OwnedTensor& D_, Grads& g) {
      flashgate::SliceBackwardArgs a;
      a.q = in.q.view(), a.k = in.k.view(), a.v = in.v.view(), a.dout = dout_.view(), a.lse = lse_.view();
      a.D = D_.view();
      a.dq = g.dq.view(), a.dk = g.dk.view(), a.dv = g.dv.view();
      if (c.gate) a.gate_q = in.gate_q.view(), a.gate_k = in.gate_k.view(), a.dgate_q = g.dgq.view(), a.dgate_k = g.dgk.view();
      if (c.sink) a.sink = in.s.view(), a.dsink = g.dsink.view();
      a.q_start = c.q_start, a.k_start = c.k_start;
      if (c.window >= 0) a.window = c.window;
      return a;
    };
    Grads want = grads(Device::cpu);
    flashgate::attention_backward_slice(args(host, dout, lse, D, want), fgtest::on(Backend::cpu));
    const std::vector<bool> beyond = rows_beyond_fp32(c, host, lse);
    // SPEC §7's floors, for where a gradient's true value nearly vanishes (a sink, or gates decayed over the distance
    // to the keys, holding a row's mass: its fp16 dS then lies below fp16's range): 1e-4 of each gradient's natural
    // scale (dq: scale rms(do) rms(v) rms(k); dk: the same with rms(q); the gates' and the sink's: rms(do) rms(v);
    // dv: rms(do), its keys' probabilities then below fp32's normal range, which the kernels flush to zero), the
    // scale being the default 1 / sqrt(K).
    const double grad_scale = rms(dout.values()) * rms(host.v.values());
    const double floor_dq = 1e-4 * grad_scale * rms(host.k.values()) / std::sqrt(static_cast<double>(c.K));
    const double floor_dk = 1e-4 * grad_scale * rms(host.q.values()) / std::sqrt(static_cast<double>(c.K));
    const double floor_g = 1e-4 * grad_scale, floor_dv = 1e-4 * rms(dout.values());
    const SliceCase::Inputs dev = c.on(Device::cuda);
    const OwnedTensor dout_dev = dout.to(Device::cuda), lse_dev = lse.to(Device::cuda), D_dev = D.to(Device::cuda);
    // The cuda backend on the planner's path and on forced SIMT, then the hopper backend where it serves the pair.
    struct Path {
      Backend backend;
      bool force_simt;
    };
    std::vector<Path> paths = {{Backend::cuda, false}, {Backend::cuda, true}};
    {
      Grads probe = grads(Device::cuda);
      flashgate::SliceBackwardArgs a = args(dev, dout_dev, lse_dev, D_dev, probe);
      if (flashgate::backend_serves(a, Backend::hopper)) paths.push_back({Backend::hopper, false});
    }
    for (const Path& at : paths) {
      ForcedSliceSimt forced(at.force_simt);
      Grads got = grads(Device::cuda);
      flashgate::attention_backward_slice(args(dev, dout_dev, lse_dev, D_dev, got), fgtest::on(at.backend));
      flashgate::harness::device_synchronize();
      const std::string path = flashgate::cuda::last_slice_backward_path();
      SCOPED_TRACE(fgtest::backend_note(at.backend) + ", path " + path +
                   (at.force_simt ? " (forced)" : " (the planner's)"));
      if (at.force_simt) {
        EXPECT_EQ(path, "simt");
      } else if (at.backend == Backend::hopper) {
        EXPECT_EQ(path, "hopper");
        ran_hopper += path == "hopper";
      } else {
        ran_mma += path == "mma";
      }
      expect_rows_close("dq", got.dq, want.dq, beyond, c.K, 0.01, floor_dq);
      expect_keys_close("dk", got.dk, want.dk, beyond, 0.01, floor_dk);
      expect_keys_close("dv", got.dv, want.dv, beyond, 0.01, floor_dv);
      if (c.gate) {
        expect_rows_close("dgate_q", got.dgq, want.dgq, beyond, 1, 0.01, floor_g);
        expect_keys_close("dgate_k", got.dgk, want.dgk, beyond, 0.01, floor_g);
      }
      if (c.sink) {
        const std::vector<double> got_dsink = got.dsink.values();
        EXPECT_TRUE(flashgate::harness::no_nan(got_dsink)) << "dsink has NaN";
        EXPECT_LE(flashgate::harness::relative_rms(got_dsink, want.dsink.values(), floor_g), 0.01) << "dsink";
      }
    }
  }
  // Every sm80+ GPU holds at least the D64 bucket's tiles: the planner must have taken the MMA path somewhere; on
  // sm_90 the hopper backend serves every pair but those with K up to 16 (its kernels' bucket starts above).
  EXPECT_GT(ran_mma, 0) << "no case ran on the MMA path";
  if (hopper_serves_training()) EXPECT_GT(ran_hopper, 0) << "the hopper backend refused every slice pair";
}

// `auto` takes the hopper backend for a slice pair's forward on an sm_90 GPU, the cuda backend elsewhere, and
// refuses what the kernels cannot take with the argument named.
TEST(SliceForwardCuda, AutoRunsOnACudaBackendAndRefusesFp32) {
  FLASHGATE_REQUIRE_GPU();
  flashgate::harness::Rng rng(flashgate::harness::fresh_seed());
  for (DType dtype : {DType::bf16, DType::f32}) {
    OwnedTensor q(dtype, {1, 5, 2, 64}), k(dtype, {1, 7, 2, 64}), v(dtype, {1, 7, 2, 64});
    q.fill_normal(rng), k.fill_normal(rng), v.fill_normal(rng);
    const OwnedTensor dq = q.to(Device::cuda), dk = k.to(Device::cuda), dv = v.to(Device::cuda);
    OwnedTensor o(dtype, {1, 5, 2, 64}, Device::cuda), lse(DType::f32, {1, 5, 2}, Device::cuda);
    o.poison();
    flashgate::SliceForwardArgs a;
    a.q = dq.view(), a.k = dk.view(), a.v = dv.view(), a.o = o.view(), a.lse = lse.view();
    a.q_start = 7, a.k_start = 0;
    if (dtype == DType::f32) {
      const std::vector<unsigned char> before = o.raw_bytes();
      try {
        flashgate::attention_forward_slice(a);
        ADD_FAILURE() << "fp32 slices on GPU tensors ran";
      } catch (const flashgate::Error& e) {
        EXPECT_NE(std::string(e.what()).find("fp16 or bf16"), std::string::npos) << e.what();
      }
      EXPECT_EQ(o.raw_bytes(), before) << "o was written by a refused call";
      continue;
    }
    EXPECT_EQ(flashgate::resolve_backend(a), hopper_serves_training() ? Backend::hopper : Backend::cuda);
    flashgate::attention_forward_slice(a);
    flashgate::harness::device_synchronize();
    EXPECT_TRUE(flashgate::harness::no_nan(o.values()));
  }
}

}  // namespace
