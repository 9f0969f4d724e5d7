// GPU tests of the portable (cuda backend) attention forward against the CPU fp64 reference, SPEC §3/§7:
// o and lse within relative RMS 0.005 (0.01 for bf16 with a scale above 1/sqrt(K)), never NaN, outputs
// poisoned before the run, fresh inputs per run (the seed is in every failure message; FLASHGATE_SEED
// replays it). The reference runs on the host copy of the same case.
//
// The matrix covers every head-dim bucket and V chunking, every feature, dense/packed layouts and head
// groupings without taking the full product: each group below varies one axis around a base case.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cctype>
#include <cmath>
#include <cstdio>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "common/o_residual.h"
#include "flashgate/flashgate.h"
#include "harness/cases.h"
#include "support/compare.h"
#include "support/gpu_run.h"

namespace {

using flashgate::Backend;
using flashgate::Device;
using flashgate::DType;
using flashgate::Launch;
using fgtest::on;
using fgtest::seed_note;
using flashgate::harness::AttentionCase;
using flashgate::harness::AttentionConfig;
using flashgate::harness::OwnedTensor;

double tolerance_for(const AttentionConfig& cfg) {
  const double default_scale = 1.0 / std::sqrt(static_cast<double>(cfg.head_dim));
  if (cfg.dtype == DType::bf16 && cfg.scale && *cfg.scale > default_scale * (1 + 1e-6)) return 0.01;
  return 0.005;
}

// Reference on the host, every CUDA backend that claims the case on the device copy of the same inputs;
// compares o and (when asked) lse.
void check_forward(const AttentionConfig& cfg, bool with_lse = true) {
  const uint64_t seed = flashgate::harness::fresh_seed();
  SCOPED_TRACE(seed_note(seed, cfg));
  flashgate::harness::Rng rng(seed);
  AttentionCase host = AttentionCase::random(cfg, rng);
  AttentionCase dev = host.to(Device::cuda);
  const std::vector<unsigned char> poisoned_lse = host.lse.raw_bytes();
  flashgate::ForwardArgs host_args = host.forward_args(), dev_args = dev.forward_args();
  if (!with_lse) host_args.lse = {}, dev_args.lse = {};
  flashgate::attention_forward(host_args, on(Backend::cpu));
  for (Backend b : fgtest::cuda_backends_for(dev_args)) {
    SCOPED_TRACE(fgtest::backend_note(b));
    dev.poison_outputs();
    flashgate::attention_forward(dev_args, on(b));
    flashgate::harness::device_synchronize();
    const double tol = tolerance_for(cfg);
    fgtest::expect_close("o", dev.o, host.o, tol);
    if (dev.o_residual.defined()) {  // fp16 / bf16: every code written (the poison, -128, is none)
      const std::vector<double> codes = dev.o_residual.values();
      for (size_t i = 0; i < codes.size(); ++i) ASSERT_GE(codes[i], -127) << "o_residual element " << i << " unwritten";
    }
    if (with_lse) {
      fgtest::expect_close("lse", dev.lse, host.lse, tol);
    } else {
      // Not requested: the poisoned lse must be left as it was.
      EXPECT_EQ(dev.lse.raw_bytes(), poisoned_lse) << "lse was written although not requested";
    }
  }
}

// ---- the matrix ------------------------------------------------------------------------------------------

struct Named {
  std::string name;
  AttentionConfig cfg;
};

std::string dtype_tag(DType d) { return d == DType::f16 ? "f16" : d == DType::bf16 ? "bf16" : "f32"; }

AttentionConfig base(DType dtype, int64_t K, int64_t V) {
  AttentionConfig c;
  c.dtype = dtype;
  c.batch = 1;
  c.seqlen = 300;
  c.heads = 4;
  c.kv_heads = 2;
  c.head_dim = K;
  c.v_dim = V;
  return c;
}

const std::vector<std::pair<int64_t, int64_t>> kHeadDims = {
    {16, 16},   {60, 60},   {64, 64},   {100, 100}, {128, 128}, {192, 128},
    {128, 320}, {256, 256}, {320, 128}, {512, 256}, {256, 512}, {512, 512}};
const std::vector<int64_t> kPacked = {0, 15, 100, 300, 1200, 2000};

// Every (K, V) in fp16 and bf16: plain, all features at once, and packed with gate + sink.
std::vector<Named> head_dim_cases() {
  std::vector<Named> out;
  for (DType d : {DType::f16, DType::bf16})
    for (auto [K, V] : kHeadDims) {
      const std::string tag = dtype_tag(d) + "_K" + std::to_string(K) + "_V" + std::to_string(V);
      AttentionConfig c = base(d, K, V);
      out.push_back({tag + "_plain", c});
      c.gate = c.sink = true;
      c.window = 65;
      out.push_back({tag + "_gate_window65_sink", c});
      AttentionConfig p = base(d, K, V);
      p.packed = kPacked;
      p.heads = 2, p.kv_heads = 1;
      if (K + V > 640) p.packed = {0, 15, 100, 300, 700};  // keeps the fp64 reference quick
      p.gate = p.sink = true;
      out.push_back({tag + "_packed_gate_sink", p});
    }
  return out;
}

// Every feature on the tiles' boundaries (T = 2 * 128 + 1 rows; windows around the 64-key tile).
std::vector<Named> feature_cases() {
  std::vector<Named> out;
  for (DType d : {DType::f16, DType::bf16})
    for (auto [K, V] : std::vector<std::pair<int64_t, int64_t>>{{64, 64}, {128, 128}, {256, 256}}) {
      const std::string tag = dtype_tag(d) + "_D" + std::to_string(K);
      AttentionConfig c = base(d, K, V);
      c.batch = 3;
      c.seqlen = 257;
      out.push_back({tag + "_none", c});
      AttentionConfig g = c;
      g.gate = true;
      out.push_back({tag + "_gate", g});
      AttentionConfig s = c;
      s.sink = true;
      out.push_back({tag + "_sink", s});
      for (int64_t w : {0, 1, 63, 64, 65, 1024}) {
        AttentionConfig cw = c;
        cw.window = w;
        out.push_back({tag + "_window" + std::to_string(w), cw});
      }
      AttentionConfig all = c;
      all.gate = all.sink = true;
      all.window = 64;
      out.push_back({tag + "_gate_window64_sink", all});
      AttentionConfig w0 = all;
      w0.window = 0;
      out.push_back({tag + "_gate_window0_sink", w0});  // empty rows: o = 0, lse = sink
    }
  return out;
}

// Head groupings: MHA, GQA, MQA, HQ/H in {1, 2, 4, 8}.
std::vector<Named> head_cases() {
  std::vector<Named> out;
  for (DType d : {DType::f16, DType::bf16})
    for (auto [hq, h] : std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {2, 1}, {4, 1}, {8, 1}, {8, 2}, {8, 4}, {8, 8}}) {
      AttentionConfig c = base(d, 64, 64);
      c.heads = hq, c.kv_heads = h;
      c.batch = 3;
      c.seqlen = 200;
      c.window = 100;
      c.gate = true;
      out.push_back({dtype_tag(d) + "_HQ" + std::to_string(hq) + "_H" + std::to_string(h), c});
    }
  return out;
}

// Lengths around the tiles (BM 128 / 64, BN 64 / 32), primes, single rows; strided (row_pad) inputs.
std::vector<Named> shape_cases() {
  std::vector<Named> out;
  for (int64_t T : {1, 2, 31, 63, 64, 65, 127, 128, 129, 193, 509}) {
    AttentionConfig c = base(DType::bf16, 128, 128);
    c.seqlen = T;
    c.batch = 2;
    c.sink = true;
    out.push_back({"bf16_T" + std::to_string(T), c});
  }
  for (int64_t T : {1, 63, 64, 65, 257}) {
    AttentionConfig c = base(DType::f16, 512, 512);
    c.seqlen = T;
    c.heads = 2, c.kv_heads = 1;
    out.push_back({"f16_K512_T" + std::to_string(T), c});
  }
  for (auto [K, V] : std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {1, 64}, {64, 1}, {3, 5}, {17, 33}}) {
    AttentionConfig c = base(DType::bf16, K, V);
    c.gate = true;
    out.push_back({"bf16_K" + std::to_string(K) + "_V" + std::to_string(V), c});
    c.dtype = DType::f16;
    c.packed = {7, 0, 130};
    out.push_back({"f16_packed_K" + std::to_string(K) + "_V" + std::to_string(V), c});
  }
  for (int64_t pad : {3, 8}) {  // 3: rows not 16-byte aligned (repacked); 8: aligned but strided
    for (DType d : {DType::f16, DType::bf16}) {
      AttentionConfig c = base(d, 128, 64);
      c.row_pad = pad;
      c.gate = c.sink = true;
      c.window = 70;
      out.push_back({dtype_tag(d) + "_strided_pad" + std::to_string(pad), c});
      AttentionConfig p = base(d, 60, 100);
      p.row_pad = pad;
      p.packed = {5, 0, 300, 64};
      out.push_back({dtype_tag(d) + "_strided_pad" + std::to_string(pad) + "_packed_K60_V100", p});
    }
  }
  {
    AttentionConfig c = base(DType::bf16, 80, 80);
    c.scale = 1.0f;  // peaked softmax (SPEC §7: 0.01 for bf16)
    out.push_back({"bf16_K80_scale1", c});
  }
  // Scale 1 spreads a row's scores over tens of binades, so its max keeps rising from one key block to the next: in
  // every bucket, and past the lazy rescale's slack where that runs (256 / 256, 512 / 512), both its paths run.
  for (auto [d, K, V, T] : std::vector<std::tuple<DType, int64_t, int64_t, int64_t>>{
           {DType::bf16, 64, 64, 1000}, {DType::f16, 128, 128, 1000}, {DType::bf16, 192, 128, 700},
           {DType::f16, 256, 256, 700}, {DType::bf16, 512, 512, 400}}) {
    AttentionConfig c = base(d, K, V);
    c.seqlen = T;
    c.scale = 1.0f;
    c.sink = K == 128;
    out.push_back({dtype_tag(d) + "_K" + std::to_string(K) + "_V" + std::to_string(V) + "_scale1_T" + std::to_string(T), c});
  }
  return out;
}

// fp32 inputs run the SIMT kernel.
std::vector<Named> fp32_cases() {
  std::vector<Named> out;
  for (auto [K, V] : std::vector<std::pair<int64_t, int64_t>>{{16, 16}, {64, 64}, {100, 60}, {512, 512}}) {
    AttentionConfig c = base(DType::f32, K, V);
    out.push_back({"f32_K" + std::to_string(K) + "_V" + std::to_string(V), c});
    c.gate = c.sink = true;
    c.window = 33;
    c.packed = {0, 15, 100, 260};
    out.push_back({"f32_K" + std::to_string(K) + "_V" + std::to_string(V) + "_packed_all", c});
  }
  AttentionConfig w0 = base(DType::f32, 32, 32);
  w0.window = 0;
  w0.sink = true;
  out.push_back({"f32_window0_sink", w0});
  return out;
}

std::string sanitize(std::string s) {
  for (char& ch : s)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return s;
}

class ForwardMatrix : public ::testing::TestWithParam<Named> {};

TEST_P(ForwardMatrix, MatchesReference) {
  FLASHGATE_REQUIRE_GPU();
  check_forward(GetParam().cfg);
}

auto param_name = [](const ::testing::TestParamInfo<Named>& info) { return sanitize(info.param.name); };

INSTANTIATE_TEST_SUITE_P(HeadDims, ForwardMatrix, ::testing::ValuesIn(head_dim_cases()), param_name);
INSTANTIATE_TEST_SUITE_P(Features, ForwardMatrix, ::testing::ValuesIn(feature_cases()), param_name);
INSTANTIATE_TEST_SUITE_P(Heads, ForwardMatrix, ::testing::ValuesIn(head_cases()), param_name);
INSTANTIATE_TEST_SUITE_P(Shapes, ForwardMatrix, ::testing::ValuesIn(shape_cases()), param_name);
INSTANTIATE_TEST_SUITE_P(Fp32, ForwardMatrix, ::testing::ValuesIn(fp32_cases()), param_name);

// ---- o's rounding residual ---------------------------------------------------------------------------------

// With every score equal (q = 0) each P is exactly 1, so a kernel's fp32 o is the running mean of v to fp32's
// rounding: o plus its residual (ForwardArgs::o_residual) must match the fp64 result to a few 2^-8 of o's ulp,
// where o alone is off by up to half an ulp. Every bucket, both dtypes, dense and packed, sink and window.
TEST(ForwardResidual, RecoversTheFp32Output) {
  FLASHGATE_REQUIRE_GPU();
  const std::pair<int64_t, int64_t> dims[] = {{64, 64}, {128, 128}, {192, 128}, {256, 256}, {512, 512}, {40, 24}};
  int n = 0;
  for (DType dtype : {DType::bf16, DType::f16})
    for (const auto& [K, V] : dims) {
      AttentionConfig cfg = base(dtype, K, V);
      cfg.heads = 4, cfg.kv_heads = 2;
      if (++n % 2) cfg.packed = {70, 0, 131, 5};
      else cfg.batch = 2, cfg.seqlen = 200;
      cfg.sink = n % 3 == 0;
      if (n % 4 == 1) cfg.window = 33;
      const uint64_t seed = flashgate::harness::fresh_seed();
      SCOPED_TRACE(seed_note(seed, cfg));
      flashgate::harness::Rng rng(seed);
      AttentionCase host = AttentionCase::random(cfg, rng);
      host.q.fill(0.0);
      AttentionCase exact = host.to_f64(), dev = host.to(Device::cuda);
      flashgate::attention_forward(exact.forward_args(), on(Backend::cpu));
      const std::vector<double> want = exact.o.values();
      const flashgate::residual::Format format =
          dtype == DType::f16 ? flashgate::residual::kF16 : flashgate::residual::kBf16;
      for (Backend b : fgtest::cuda_backends_for(dev.forward_args())) {
        SCOPED_TRACE(fgtest::backend_note(b));
        dev.poison_outputs();
        flashgate::attention_forward(dev.forward_args(), on(b));
        flashgate::harness::device_synchronize();
        const std::vector<double> o = dev.o.values(), codes = dev.o_residual.values();
        std::vector<double> fixed(o.size());
        for (size_t i = 0; i < o.size(); ++i) {
          ASSERT_GE(codes[i], -127) << "o_residual element " << i << " unwritten";
          const float rounded = static_cast<float>(o[i]);
          fixed[i] = o[i] + flashgate::residual::decode(static_cast<int8_t>(codes[i]), rounded, format);
        }
        const double plain = flashgate::harness::relative_rms(o, want);
        const double corrected = flashgate::harness::relative_rms(fixed, want);
        EXPECT_GT(plain, 1e-4) << "the case does not tell the residual apart";
        EXPECT_LT(corrected, 2e-5) << "o alone: " << plain;
      }
    }
}

// ---- limits of the grid and of 32-bit indexing ------------------------------------------------------------

TEST(ForwardLimits, BatchTimesHeadsAbove65535) {
  FLASHGATE_REQUIRE_GPU();
  AttentionConfig c = base(DType::bf16, 32, 32);
  c.batch = 70, c.seqlen = 3, c.heads = 1000, c.kv_heads = 250;  // B * HQ = 70000
  c.sink = true;
  check_forward(c);
}

TEST(ForwardLimits, PackedSegments65536) {
  FLASHGATE_REQUIRE_GPU();
  AttentionConfig c = base(DType::f16, 16, 16);
  c.heads = 2, c.kv_heads = 1;
  c.gate = true;
  c.packed.resize(65536);
  for (size_t n = 0; n < c.packed.size(); ++n) c.packed[n] = static_cast<int64_t>((n * 7919) % 4);  // 0..3
  c.packed.back() = 200;  // one longer segment among the tiny ones
  check_forward(c);
}

TEST(ForwardLimits, NoLseRequested) {
  FLASHGATE_REQUIRE_GPU();
  AttentionConfig c = base(DType::bf16, 64, 64);
  c.sink = true;
  check_forward(c, /*with_lse=*/false);
}

// Element offsets past 2^31: q and o of HQ = 8192 heads over T = 4608 tokens (2.4e9 elements each); the
// last head holds a random case (compared against the reference), every other head reads zeros.
TEST(ForwardLimits, OffsetsBeyond2To31Elements) {
  FLASHGATE_REQUIRE_GPU();
  const int64_t T = 4608, HQ = 8192, D = 64;
  const size_t big_bytes = static_cast<size_t>(T * HQ * D) * 2;
  size_t free_bytes = 0, total_bytes = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_bytes, &total_bytes), cudaSuccess);
  if (free_bytes < 5 * big_bytes / 2 + (size_t{1} << 30))
    GTEST_SKIP() << "needs ~" << (5 * big_bytes / 2 >> 30) << " GiB of GPU memory";

  AttentionConfig cfg = base(DType::bf16, D, D);
  cfg.seqlen = T, cfg.heads = 1, cfg.kv_heads = 1;
  cfg.gate = true;
  const uint64_t seed = flashgate::harness::fresh_seed();
  SCOPED_TRACE(seed_note(seed, cfg));
  flashgate::harness::Rng rng(seed);
  AttentionCase host = AttentionCase::random(cfg, rng);
  flashgate::attention_forward(host.forward_args(), on(Backend::cpu));

  // The big q, o (and g, lse) with the case in head HQ-1; k and v are the case's own (one kv head).
  AttentionCase dev = host.to(Device::cuda);
  flashgate::harness::Buffer q_big(Device::cuda, big_bytes), o_big(Device::cuda, big_bytes),
      residual_big(Device::cuda, big_bytes / 2);
  flashgate::harness::Buffer g_big(Device::cuda, static_cast<size_t>(T * HQ) * 4),
      lse_big(Device::cuda, static_cast<size_t>(T * HQ) * 4);
  ASSERT_EQ(cudaMemset(q_big.data(), 0, big_bytes), cudaSuccess);
  ASSERT_EQ(cudaMemset(o_big.data(), 0xff, big_bytes), cudaSuccess);  // NaN pattern
  ASSERT_EQ(cudaMemset(g_big.data(), 0, g_big.bytes()), cudaSuccess);
  const size_t row = D * 2, head_bytes_q = HQ * D * 2;
  auto* q_last = static_cast<char*>(q_big.data()) + (HQ - 1) * D * 2;
  ASSERT_EQ(cudaMemcpy2D(q_last, head_bytes_q, host.q.view().data, row, row, T, cudaMemcpyHostToDevice), cudaSuccess);
  auto* g_last = static_cast<char*>(g_big.data()) + (HQ - 1) * 4;
  ASSERT_EQ(cudaMemcpy2D(g_last, HQ * 4, host.g.view().data, 4, 4, T, cudaMemcpyHostToDevice), cudaSuccess);

  flashgate::ForwardArgs a = dev.forward_args();
  a.q = flashgate::make_tensor(q_big.data(), DType::bf16, {1, T, HQ, D}, Device::cuda);
  a.o = flashgate::make_tensor(o_big.data(), DType::bf16, {1, T, HQ, D}, Device::cuda);
  a.g = flashgate::make_tensor(g_big.data(), DType::f32, {1, T, HQ}, Device::cuda);
  a.lse = flashgate::make_tensor(lse_big.data(), DType::f32, {1, T, HQ}, Device::cuda);
  a.o_residual = flashgate::make_tensor(residual_big.data(), DType::i8, {1, T, HQ, D}, Device::cuda);
  for (Backend b : fgtest::cuda_backends_for(a)) {
    SCOPED_TRACE(fgtest::backend_note(b));
    ASSERT_EQ(cudaMemset(o_big.data(), 0xff, big_bytes), cudaSuccess);
    ASSERT_EQ(cudaMemset(residual_big.data(), 0x80, big_bytes / 2), cudaSuccess);  // -128: no kernel writes it
    flashgate::attention_forward(a, on(b));
    flashgate::harness::device_synchronize();

    OwnedTensor o_last(DType::bf16, {1, T, 1, D}), lse_last(DType::f32, {1, T, 1});
    auto* o_src = static_cast<char*>(o_big.data()) + (HQ - 1) * D * 2;
    ASSERT_EQ(cudaMemcpy2D(o_last.view().data, row, o_src, head_bytes_q, row, T, cudaMemcpyDeviceToHost),
              cudaSuccess);
    auto* lse_src = static_cast<char*>(lse_big.data()) + (HQ - 1) * 4;
    ASSERT_EQ(cudaMemcpy2D(lse_last.view().data, 4, lse_src, HQ * 4, 4, T, cudaMemcpyDeviceToHost), cudaSuccess);
    fgtest::expect_close("o (last head)", o_last, host.o, 0.005);
    fgtest::expect_close("lse (last head)", lse_last, host.lse, 0.005);
    OwnedTensor residual_last(DType::i8, {1, T, 1, D});
    auto* residual_src = static_cast<char*>(residual_big.data()) + (HQ - 1) * D;
    ASSERT_EQ(cudaMemcpy2D(residual_last.view().data, D, residual_src, HQ * D, D, T, cudaMemcpyDeviceToHost),
              cudaSuccess);
    const std::vector<double> codes = residual_last.values();
    for (size_t i = 0; i < codes.size(); ++i) ASSERT_GE(codes[i], -127) << "o_residual element " << i << " unwritten";
  }
}

// The whole call captured in a CUDA graph: no host synchronisation, scratch only from the given workspace.
TEST(ForwardLimits, CapturedInCudaGraph) {
  FLASHGATE_REQUIRE_GPU();
  AttentionConfig cfg = base(DType::bf16, 60, 100);  // unaligned rows: the repack pre-kernel runs too
  cfg.packed = {0, 15, 100, 300};
  cfg.gate = cfg.sink = true;
  cfg.window = 50;
  const uint64_t seed = flashgate::harness::fresh_seed();
  SCOPED_TRACE(seed_note(seed, cfg));
  flashgate::harness::Rng rng(seed);
  AttentionCase host = AttentionCase::random(cfg, rng);
  flashgate::attention_forward(host.forward_args(), on(Backend::cpu));
  AttentionCase dev = host.to(Device::cuda);
  flashgate::ForwardArgs a = dev.forward_args();
  a.validate = false;  // reading cu_seqlens on the host would synchronise
  for (Backend b : fgtest::cuda_backends_for(a)) {
    SCOPED_TRACE(fgtest::backend_note(b));
    dev.poison_outputs();
    const size_t bytes = flashgate::workspace_size(a, b);
    flashgate::harness::Buffer workspace(Device::cuda, bytes);
    cudaStream_t stream;
    ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
    Launch l = on(b);
    l.stream = stream;
    l.workspace = workspace.data();
    l.workspace_bytes = bytes;
    cudaGraph_t graph;
    ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), cudaSuccess);
    flashgate::attention_forward(a, l);
    ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
    cudaGraphExec_t exec;
    ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
    ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    fgtest::expect_close("o", dev.o, host.o, 0.005);
    fgtest::expect_close("lse", dev.lse, host.lse, 0.005);
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    cudaStreamDestroy(stream);
  }
}

}  // namespace
