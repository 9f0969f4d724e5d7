// GPU test of the slice forward (context parallelism) on the cuda backend: fresh random slice pairs (queries and
// keys at their own global positions, before, across and after each other, positions near 2^40 too) with and
// without gate, sink, window and GQA, fp16 and bf16, against the cpu backend's slice forward on the same inputs:
// o within SPEC §7's relative RMS, lse the same (-inf exactly where a row sees nothing). Outputs start poisoned.
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

TEST(SliceForwardCuda, MatchesTheCpuSlice) {
  FLASHGATE_REQUIRE_GPU();
  const uint64_t seed = flashgate::harness::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed) + " (FLASHGATE_SEED replays it)");
  flashgate::harness::Rng rng(seed);
  const int64_t dims[] = {8, 40, 64, 96, 128, 200, 256};
  const int64_t windows[] = {-1, -1, 0, 1, 17, 130, 1000};
  for (int trial = 0; trial < 40; ++trial) {
    const DType dtype = trial % 2 ? DType::bf16 : DType::f16;
    const int64_t B = 1 + rng() % 2, H = 1 + rng() % 2, HQ = H * (1 + rng() % 3);
    const int64_t K = dims[rng() % 7], V = dims[rng() % 7];
    const int64_t Tq = 1 + rng() % 300, Tk = 1 + rng() % 300;
    // Near each other (before, across, after) or far apart; every so often at positions near 2^40.
    const int64_t base = trial % 5 == 4 ? (int64_t{1} << 40) : 0;
    const int64_t q_start = base + rng() % 700, k_start = base + rng() % 700;
    const bool gate = rng() % 2, sink = rng() % 2;
    const int64_t window = windows[rng() % 7];
    SCOPED_TRACE("trial " + std::to_string(trial) + (dtype == DType::bf16 ? " bf16" : " fp16") + " B" +
                 std::to_string(B) + " HQ" + std::to_string(HQ) + " H" + std::to_string(H) + " K" + std::to_string(K) +
                 " V" + std::to_string(V) + " Tq" + std::to_string(Tq) + " Tk" + std::to_string(Tk) + " q_start " +
                 std::to_string(q_start) + " k_start " + std::to_string(k_start) + (gate ? " gate" : "") +
                 (sink ? " sink" : "") + " window " + std::to_string(window));

    OwnedTensor q(dtype, {B, Tq, HQ, K}), k(dtype, {B, Tk, H, K}), v(dtype, {B, Tk, H, V});
    q.fill_normal(rng), k.fill_normal(rng), v.fill_normal(rng);
    OwnedTensor gate_q, gate_k, s;
    if (gate) {
      // One cumulative gate over the positions both slices cover, read at each slice's positions.
      const int64_t first = std::min(q_start, k_start), last = std::max(q_start + Tq, k_start + Tk);
      OwnedTensor g(DType::f32, {B, last - first, HQ});
      g.fill_log_sigmoid_normal(rng);
      const std::vector<double> gv = g.values();
      std::vector<double> G(gv.size());
      for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < HQ; ++h) {
          double run = -40.0;  // the prefix before `first`
          for (int64_t t = 0; t < last - first; ++t) {
            const size_t i = static_cast<size_t>((b * (last - first) + t) * HQ + h);
            run += gv[i];
            G[i] = run;
          }
        }
      const auto at = [&](int64_t start, int64_t T) {
        std::vector<double> out;
        for (int64_t b = 0; b < B; ++b)
          for (int64_t t = 0; t < T; ++t)
            for (int64_t h = 0; h < HQ; ++h) out.push_back(G[static_cast<size_t>((b * (last - first) + start - first + t) * HQ + h)]);
        return out;
      };
      gate_q = OwnedTensor(DType::f32, {B, Tq, HQ}), gate_k = OwnedTensor(DType::f32, {B, Tk, HQ});
      gate_q.set_values(at(q_start, Tq)), gate_k.set_values(at(k_start, Tk));
    }
    if (sink) s = OwnedTensor(DType::f32, {HQ}), s.fill_normal(rng);

    OwnedTensor o(dtype, {B, Tq, HQ, V}), lse(DType::f32, {B, Tq, HQ});
    o.poison(), lse.poison();
    const auto args = [&](const OwnedTensor& q_, const OwnedTensor& k_, const OwnedTensor& v_, const OwnedTensor& gq,
                          const OwnedTensor& gk, const OwnedTensor& s_, const OwnedTensor& o_, const OwnedTensor& l_) {
      flashgate::SliceForwardArgs a;
      a.q = q_.view(), a.k = k_.view(), a.v = v_.view(), a.o = o_.view(), a.lse = l_.view();
      if (gate) a.gate_q = gq.view(), a.gate_k = gk.view();
      if (sink) a.sink = s_.view();
      a.q_start = q_start, a.k_start = k_start;
      if (window >= 0) a.window = window;
      return a;
    };
    flashgate::attention_forward_slice(args(q, k, v, gate_q, gate_k, s, o, lse), fgtest::on(Backend::cpu));

    const OwnedTensor dq = q.to(Device::cuda), dk = k.to(Device::cuda), dv = v.to(Device::cuda);
    const OwnedTensor dgq = gate ? gate_q.to(Device::cuda) : OwnedTensor(), dgk = gate ? gate_k.to(Device::cuda) : OwnedTensor();
    const OwnedTensor ds = sink ? s.to(Device::cuda) : OwnedTensor();
    OwnedTensor dO(dtype, {B, Tq, HQ, V}, Device::cuda), dlse(DType::f32, {B, Tq, HQ}, Device::cuda);
    dO.poison(), dlse.poison();
    flashgate::attention_forward_slice(args(dq, dk, dv, dgq, dgk, ds, dO, dlse), fgtest::on(Backend::cuda));
    flashgate::harness::device_synchronize();
    fgtest::expect_close("o", dO, o, 0.005);
    expect_same_lse(dlse, lse, 0.005);
  }
}

// `auto` takes the cuda backend for a slice pair on GPU tensors (the hopper backend refuses slices), and refuses
// what the kernels cannot take with the argument named.
TEST(SliceForwardCuda, AutoRunsOnTheCudaBackendAndRefusesFp32) {
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
    flashgate::attention_forward_slice(a);
    flashgate::harness::device_synchronize();
    EXPECT_TRUE(flashgate::harness::no_nan(o.values()));
  }
}

}  // namespace
