// GPU tests of the portable decode (SPEC §5) against the CPU fp64 reference on the same rounded inputs:
// o within relative RMS 0.005, never NaN, outputs poisoned before the run, fresh inputs per run (the seed
// is in every failure message; FLASHGATE_SEED replays it).
//
// Covers dtypes, GQA 1/4/8/16/32, K != V up to 512, contexts 1..4096 and 65537, empty sequences, gate
// (with and without gate_scale), sink, windows, strided and unaligned rows (the fp32 fallback), every
// forced split count against the unsplit path, the 8-row tile against the 16-row layout, bad offsets with
// validate off.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "flashgate/flashgate.h"
#include "harness/cases.h"
#include "support/compare.h"
#include "support/gpu_run.h"

namespace {

using flashgate::Backend;
using flashgate::Device;
using flashgate::DType;
using flashgate::Launch;
using fgtest::ForcedHeadsPerCta;
using fgtest::ForcedServingPlan;
using fgtest::ForcedSplits;
using fgtest::ForcedWideRows;
using fgtest::on;
using fgtest::seed_note;
using flashgate::harness::DecodeCase;
using flashgate::harness::DecodeConfig;
using flashgate::harness::OwnedTensor;

constexpr double kTolerance = 0.005;


const auto run_decode = [](const flashgate::DecodeArgs& a, const Launch& l) { flashgate::decode(a, l); };

using Reference = fgtest::ReferenceCase<DecodeCase>;

Reference reference(const DecodeConfig& cfg, uint64_t seed) {
  return fgtest::reference_case<DecodeCase>(cfg, seed, run_decode);
}

// The portable backend's output: the tests of its planner's forced choices (splits, stages, heads per CTA,
// row layout) are about that backend's kernels.
OwnedTensor run_gpu(const DecodeCase& host) { return fgtest::gpu_output(host, run_decode, Backend::cuda); }

// The case on every CUDA backend that claims it, against the fp64 reference.
void check_decode(const DecodeConfig& cfg) {
  const uint64_t seed = flashgate::harness::fresh_seed();
  SCOPED_TRACE(seed_note(seed, cfg));
  const Reference r = reference(cfg, seed);
  const DecodeCase dev = r.host.to(Device::cuda);
  for (Backend b : fgtest::cuda_backends_for(dev.args())) {
    SCOPED_TRACE(fgtest::backend_note(b));
    fgtest::expect_close("o", fgtest::gpu_output(r.host, run_decode, b), r.o, kTolerance);
  }
}

DecodeConfig base(DType dtype = DType::bf16) {
  DecodeConfig c;
  c.dtype = dtype;
  c.seqlens = {100, 1, 257, 0, 64};
  c.heads = 8, c.kv_heads = 2;
  c.head_dim = 128, c.v_dim = 128;
  return c;
}

TEST(DecodeCuda, Bf16AndF16) {
  FLASHGATE_REQUIRE_GPU();
  check_decode(base(DType::bf16));
  check_decode(base(DType::f16));
}

TEST(DecodeCuda, F32TakesTheFallback) {
  FLASHGATE_REQUIRE_GPU();
  DecodeConfig c = base(DType::f32);
  c.gate = c.sink = true;
  check_decode(c);
}

struct GqaCase {
  int64_t heads, kv_heads;
};

class DecodeGqa : public ::testing::TestWithParam<GqaCase> {};

TEST_P(DecodeGqa, Contexts1To4096) {
  FLASHGATE_REQUIRE_GPU();
  DecodeConfig c = base();
  c.heads = GetParam().heads, c.kv_heads = GetParam().kv_heads;
  c.seqlens = {1, 2, 16, 17, 63, 64, 65, 1000, 4096, 0};
  check_decode(c);
}

INSTANTIATE_TEST_SUITE_P(Shapes, DecodeGqa,
                         ::testing::Values(GqaCase{16, 1}, GqaCase{16, 2}, GqaCase{32, 4}, GqaCase{4, 4},
                                           GqaCase{32, 1}, GqaCase{6, 2}),
                         [](const auto& info) {
                           return "HQ" + std::to_string(info.param.heads) + "_H" + std::to_string(info.param.kv_heads);
                         });

struct HeadCase {
  int64_t K, V;
};

class DecodeHeads : public ::testing::TestWithParam<HeadCase> {};

TEST_P(DecodeHeads, KAndV) {
  FLASHGATE_REQUIRE_GPU();
  DecodeConfig c = base();
  c.head_dim = GetParam().K, c.v_dim = GetParam().V;
  c.seqlens = {300, 5, 129};
  check_decode(c);
  c.dtype = DType::f16;
  c.gate = c.sink = true;
  check_decode(c);
}

INSTANTIATE_TEST_SUITE_P(Dims, DecodeHeads,
                         ::testing::Values(HeadCase{64, 64}, HeadCase{128, 128}, HeadCase{64, 128}, HeadCase{256, 256},
                                           HeadCase{512, 512}, HeadCase{512, 256}, HeadCase{96, 40},
                                           HeadCase{128, 512}, HeadCase{8, 16}),
                         [](const auto& info) {
                           return "K" + std::to_string(info.param.K) + "_V" + std::to_string(info.param.V);
                         });

TEST(DecodeCuda, GateSinkWindow) {
  FLASHGATE_REQUIRE_GPU();
  for (bool gate_scale : {false, true})
    for (int64_t window : {-1, 0, 1, 64, 65, 1000}) {
      DecodeConfig c = base();
      c.gate = true, c.gate_scale = gate_scale, c.sink = true;
      if (window >= 0) c.window = window;
      c.seqlens = {1, 300, 2000, 0, 65};
      check_decode(c);
    }
}

// Padded rows: 8 extra elements keep 16-byte rows (mma path); 1 extra element breaks them (fallback);
// K = V = 100 padded by 4 gives aligned 208-byte rows whose last 16-byte chunk is half used.
TEST(DecodeCuda, StridedRows) {
  FLASHGATE_REQUIRE_GPU();
  for (int64_t pad : {8, 1}) {
    DecodeConfig c = base();
    c.row_pad = pad;
    c.gate = true;
    check_decode(c);
  }
  DecodeConfig c = base();
  c.head_dim = 100, c.v_dim = 100, c.row_pad = 4;
  check_decode(c);
}

TEST(DecodeCuda, EmptySequencesGiveZero) {
  FLASHGATE_REQUIRE_GPU();
  DecodeConfig c = base();
  c.sink = true;
  c.seqlens = {0, 0, 3, 0};
  check_decode(c);
}

TEST(DecodeCuda, Context65537) {
  FLASHGATE_REQUIRE_GPU();
  DecodeConfig c = base();
  c.heads = 8, c.kv_heads = 1;
  c.seqlens = {65537, 7};
  check_decode(c);
  c.gate = true;
  c.sink = true;
  c.seqlens = {65537};
  check_decode(c);
}

TEST(DecodeCuda, ManySequences) {
  FLASHGATE_REQUIRE_GPU();
  DecodeConfig c = base();
  c.heads = 4, c.kv_heads = 2, c.head_dim = 64, c.v_dim = 64;
  c.seqlens.clear();
  for (int64_t n = 0; n < 1000; ++n) c.seqlens.push_back((n * 53) % 200);
  check_decode(c);
}

// Each split count gives the unsplit result within tolerance (and the reference); gate terms are absolute
// per key, so slices need no correction. The counts cross each merge batch size (8, 16, 32, 64 splits).
TEST(DecodeCuda, EverySplitCountAgrees) {
  FLASHGATE_REQUIRE_GPU();
  DecodeConfig c = base();
  c.heads = 16, c.kv_heads = 2;
  c.gate = c.sink = true;
  c.window = 1500;
  c.seqlens = {3, 100, 2500, 4000, 0};
  const uint64_t seed = flashgate::harness::fresh_seed();
  SCOPED_TRACE(seed_note(seed, c));
  const Reference r = reference(c, seed);
  OwnedTensor unsplit;
  {
    ForcedSplits one(1);
    unsplit = run_gpu(r.host);
  }
  fgtest::expect_close("o (1 split)", unsplit, r.o, kTolerance);
  for (int splits : {2, 3, 5, 9, 16, 17, 33, 100}) {
    SCOPED_TRACE("splits " + std::to_string(splits));
    ForcedSplits forced(splits);
    const OwnedTensor out = run_gpu(r.host);
    fgtest::expect_close("o vs unsplit", out, unsplit, kTolerance);
    fgtest::expect_close("o", out, r.o, kTolerance);
  }
}

// Decode CTAs that take several kv heads in turn (uneven groups of 3 kv heads, one-stage and empty
// sequences, the gate's per-head terms) give the reference at every count, depth and with a split.
TEST(DecodeCuda, EveryHeadsPerCtaAgrees) {
  FLASHGATE_REQUIRE_GPU();
  DecodeConfig c = base();
  c.heads = 12, c.kv_heads = 3;
  c.gate = c.sink = true;
  c.window = 1500;
  c.seqlens = {3, 100, 2500, 64, 0, 65};
  const uint64_t seed = flashgate::harness::fresh_seed();
  SCOPED_TRACE(seed_note(seed, c));
  const Reference r = reference(c, seed);
  for (int heads : {1, 2, 3})
    for (int stages : {2, 3, 4})
      for (int splits : {1, 2}) {
        const ForcedServingPlan forced(heads, stages, splits);
        SCOPED_TRACE(forced.note);
        fgtest::expect_close("o", run_gpu(r.host), r.o, kTolerance);
      }
}

// Decode at GQA <= 8 takes the 8-row tile (keys as the mma's M) on D128 and D64: every G 1..8 (odd ones leave padding
// rows), both 16-bit dtypes, the gate (with gate_scale), sink and window, several kv heads per CTA and splits:
// the reference, and the 16-row layout's result on the same inputs.
TEST(DecodeCuda, EightRowTileKeysAsM) {
  FLASHGATE_REQUIRE_GPU();
  int run = 0;
  for (int64_t dims : {128, 64})
    for (DType dtype : {DType::bf16, DType::f16})
      for (int64_t G : {1, 2, 3, 4, 5, 8}) {
        if (dims == 64 && (G == 2 || G == 5)) continue;  // D64: G 1, 3, 4, 8 keep the run short
        DecodeConfig c = base(dtype);
        c.head_dim = c.v_dim = dims;
        c.kv_heads = 3, c.heads = 3 * G;
        c.gate = c.sink = true;
        c.gate_scale = run % 2 == 1;
        if (run % 3 != 0) c.window = run % 3 == 1 ? 100 : 1500;
        c.seqlens = {1, 33, 0, 700, 2049, 64, 65};
        ++run;
        const uint64_t seed = flashgate::harness::fresh_seed();
        SCOPED_TRACE(seed_note(seed, c));
        const Reference r = reference(c, seed);
        for (int heads : {1, 2, 3})
          for (int splits : {1, 3}) {
            const ForcedServingPlan forced(heads, /*stages=*/0, splits);
            SCOPED_TRACE(forced.note);
            const OwnedTensor narrow = run_gpu(r.host);
            fgtest::expect_close("o", narrow, r.o, kTolerance);
            ForcedWideRows wide_rows;
            fgtest::expect_close("o vs the 16-row layout", narrow, run_gpu(r.host), kTolerance);
          }
      }
}

// Query rows whose 4-byte element pairs are unaligned (q padded by one element per row, k/v aligned) take the
// mma path with the query staged through registers instead of copied, at one and at several heads per CTA.
TEST(DecodeCuda, UnalignedQueryRows) {
  FLASHGATE_REQUIRE_GPU();
  for (int64_t dims : {64, 128}) {
    DecodeConfig c = base();
    c.head_dim = c.v_dim = dims;
    c.q_row_pad = 1;
    c.sink = true;
    const uint64_t seed = flashgate::harness::fresh_seed();
    SCOPED_TRACE(seed_note(seed, c));
    const Reference r = reference(c, seed);
    for (int heads : {1, 2}) {
      SCOPED_TRACE("heads per CTA " + std::to_string(heads));
      ForcedHeadsPerCta forced(heads);
      fgtest::expect_close("o", run_gpu(r.host), r.o, kTolerance);
    }
  }
}

// With validate off, offsets that decrease or point past T are bounded in the kernels (garbage out, no
// out-of-range read), on the mma path, the fallback and with splits.
TEST(DecodeCuda, BadOffsetsAreNeverDereferenced) {
  FLASHGATE_REQUIRE_GPU();
  for (DType d : {DType::bf16, DType::f32})
    for (int splits : {1, 3}) {
      DecodeConfig c = base(d);
      c.gate = true;
      c.seqlens = {100, 1, 257, 0, 64};
      const uint64_t seed = flashgate::harness::fresh_seed();
      SCOPED_TRACE(seed_note(seed, c) + " splits " + std::to_string(splits));
      flashgate::harness::Rng rng(seed);
      DecodeCase host = DecodeCase::random(c, rng);
      host.cu_seqlens.set_values({0, 300, 5, 1 << 30, -9, 422});
      DecodeCase dev = host.to(Device::cuda);
      flashgate::DecodeArgs args = dev.args();
      args.validate = false;
      ForcedSplits forced(splits);  // the portable planner's; other backends take their own choice
      for (Backend b : fgtest::cuda_backends_for(args)) {
        SCOPED_TRACE(fgtest::backend_note(b));
        flashgate::decode(args, on(b));
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << cudaGetErrorString(cudaGetLastError());
      }
    }
}

// The heuristic's own choice: few long sequences split, many short ones do not.
TEST(DecodeCuda, HeuristicShapes) {
  FLASHGATE_REQUIRE_GPU();
  DecodeConfig c = base();
  c.heads = 32, c.kv_heads = 8;
  c.seqlens = {16384, 9000};
  check_decode(c);
  c.seqlens.assign(128, 300);
  check_decode(c);
}

}  // namespace
