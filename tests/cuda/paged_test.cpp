// GPU tests of the portable paged_attention (SPEC §6) against the CPU fp64 reference on the same rounded
// inputs (fp8 caches decoded exactly): o within relative RMS 0.005, never NaN, outputs poisoned before the
// run, fresh inputs per run (the seed is in every failure message; FLASHGATE_SEED replays it). fp8 cases
// also bound the output bias sum((o-ref)*ref)/sum(ref^2) by 5e-4, less the part of it that rounding the
// reference to the output dtype already shows (bias_beyond_output_rounding).
//
// The matrix varies one axis at a time around small bases: dtypes, GQA 1/4/8/16/32, head dims (128,
// 576/512 and odd ones), page sizes 16..256, contexts 1..4096 and 65537, verify tails 1-4 tokens into a
// page, mixed prefill/decode/verify batches, shuffled tables with NaN in every unused slot and scale,
// empty sequences, windows, sinks, both fp8 scale layouts, a head-major cache through strides, every
// forced split count, bad indices with validate off, CUDA-graph capture, and decode's 8-row tile (keys as
// the mma's M) against the reference and the 16-row layout, plus the kernel table's lookup (host only).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "cuda/portable/paged_launch.h"
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
using flashgate::detail::ScaleMode;
using flashgate::harness::OwnedTensor;
using flashgate::harness::PagedCase;
using flashgate::harness::PagedConfig;

constexpr double kTolerance = 0.005;
constexpr double kBiasTolerance = 5e-4;


const auto run_paged = [](const flashgate::PagedArgs& a, const Launch& l) { flashgate::paged_attention(a, l); };

using Reference = fgtest::ReferenceCase<PagedCase>;

Reference reference(const PagedConfig& cfg, uint64_t seed) {
  return fgtest::reference_case<PagedCase>(cfg, seed, run_paged);
}

// The portable backend's output for the host case (poisoned output, device copy): the tests of its planner's
// forced choices (splits, stages, heads per CTA, row layout) are about that backend's kernels.
OwnedTensor run_gpu(const PagedCase& host) { return fgtest::gpu_output(host, run_paged, Backend::cuda); }

// The SPEC's output bias of `out` minus that of the reference rounded to out's dtype: the part the kernel's
// arithmetic adds. The rounding of the output alone is noise of the raw metric, and in small cases it is not
// small: a row that sees one key is that key's V row, with spread-20 scales up to 20x larger than averaged
// rows, so a few such rows dominate sum(ref^2). Over 1000 seeds of the head-major case the raw metric of the
// correctly rounded reference has std 3.9e-4 (worst 1.75e-3) against the 5e-4 bound. A systematic
// P * v_scale rounding moves most elements a fraction of an ulp the same way and shows in full here.
double bias_beyond_output_rounding(const OwnedTensor& out, const OwnedTensor& ref) {
  const flashgate::Tensor& t = out.view();
  OwnedTensor rounded(t.dtype, std::vector<int64_t>(t.shape, t.shape + t.rank));
  const std::vector<double> r = ref.values();
  rounded.set_values(r);
  return flashgate::harness::output_bias(out.values(), r) - flashgate::harness::output_bias(rounded.values(), r);
}

void expect_matches(const OwnedTensor& out, const OwnedTensor& ref, const PagedConfig& cfg) {
  fgtest::expect_close("o", out, ref, kTolerance);
  if (cfg.fp8) {
    const double bias = bias_beyond_output_rounding(out, ref);
    EXPECT_LE(std::fabs(bias), kBiasTolerance) << "fp8 output bias beyond the output's rounding " << bias;
  }
}

void check_paged(const PagedConfig& cfg) {
  const uint64_t seed = flashgate::harness::fresh_seed();
  SCOPED_TRACE(seed_note(seed, cfg));
  const Reference r = reference(cfg, seed);
  const PagedCase dev = r.host.to(Device::cuda);
  for (Backend b : fgtest::cuda_backends_for(dev.args())) {
    SCOPED_TRACE(fgtest::backend_note(b));
    expect_matches(fgtest::gpu_output(r.host, run_paged, b), r.o, cfg);
  }
}

PagedConfig base(DType dtype = DType::bf16) {
  PagedConfig c;
  c.dtype = dtype;
  c.heads = 8, c.kv_heads = 2;
  c.head_dim = 128, c.v_dim = 128;
  c.block_size = 16;
  c.context_lens = {37, 300, 1};
  c.query_lens = {1, 4, 1};
  return c;
}

PagedConfig fp8(PagedConfig c, ScaleMode mode) {
  c.fp8 = true;
  c.scale_mode = mode;
  c.token_spread = 20.0;
  return c;
}

// ---- basics ----------------------------------------------------------------------------------------------

TEST(PagedCuda, Bf16Basic) {
  FLASHGATE_REQUIRE_GPU();
  check_paged(base(DType::bf16));
}

TEST(PagedCuda, F16Basic) {
  FLASHGATE_REQUIRE_GPU();
  check_paged(base(DType::f16));
}

TEST(PagedCuda, F32TakesTheFallback) {
  FLASHGATE_REQUIRE_GPU();
  PagedConfig c = base(DType::f32);
  c.sink = true;
  c.window = 20;
  check_paged(c);
}

// K = 36 bf16 rows are 72 bytes apart: not 16-byte aligned, so the fp32 fallback runs them.
TEST(PagedCuda, UnalignedRowsTakeTheFallback) {
  FLASHGATE_REQUIRE_GPU();
  PagedConfig c = base();
  c.head_dim = 36, c.v_dim = 20;
  check_paged(c);
}

// ---- GQA x page size x context: decode and verify ------------------------------------------------------

struct GqaCase {
  int64_t heads, kv_heads, block;
};

class PagedGqa : public ::testing::TestWithParam<GqaCase> {};

TEST_P(PagedGqa, DecodeAndVerifyAcrossContexts) {
  FLASHGATE_REQUIRE_GPU();
  const GqaCase g = GetParam();
  PagedConfig c = base();
  c.heads = g.heads, c.kv_heads = g.kv_heads, c.block_size = g.block;
  c.context_lens = {1, 2, 15, 16, 17, 129, 1000, 4096};
  c.query_lens = {1, 2, 1, 4, 3, 1, 4, 2};
  check_paged(c);
}

INSTANTIATE_TEST_SUITE_P(Shapes, PagedGqa,
                         ::testing::Values(GqaCase{16, 1, 16}, GqaCase{16, 2, 128}, GqaCase{8, 1, 128},
                                           GqaCase{16, 2, 16}, GqaCase{4, 4, 64}, GqaCase{32, 1, 16},
                                           GqaCase{12, 4, 32}, GqaCase{10, 2, 48}, GqaCase{8, 2, 256}),
                         [](const auto& info) {
                           return "HQ" + std::to_string(info.param.heads) + "_H" + std::to_string(info.param.kv_heads) +
                                  "_block" + std::to_string(info.param.block);
                         });

// Verify: 2-4 query tokens whose context ends 1-4 tokens into a page.
TEST(PagedCuda, VerifyTailsInsidePages) {
  FLASHGATE_REQUIRE_GPU();
  for (int64_t block : {16, 128}) {
    PagedConfig c = base();
    c.heads = 32, c.kv_heads = 8, c.block_size = block;
    c.context_lens = {block + 1, 2 * block + 2, 5 * block + 3, 3 * block + 4, 4};
    c.query_lens = {2, 3, 4, 4, 4};
    check_paged(c);
  }
}

// ---- head dims --------------------------------------------------------------------------------------------

struct HeadCase {
  int64_t K, V, heads, kv_heads;
};

class PagedHeads : public ::testing::TestWithParam<HeadCase> {};

TEST_P(PagedHeads, Bf16AndFp8) {
  FLASHGATE_REQUIRE_GPU();
  const HeadCase h = GetParam();
  PagedConfig c = base();
  c.head_dim = h.K, c.v_dim = h.V, c.heads = h.heads, c.kv_heads = h.kv_heads;
  c.context_lens = {300, 17, 64};
  c.query_lens = {4, 1, 2};
  check_paged(c);
  check_paged(fp8(c, ScaleMode::per_token));
}

INSTANTIATE_TEST_SUITE_P(Dims, PagedHeads,
                         ::testing::Values(HeadCase{128, 128, 8, 1}, HeadCase{576, 512, 16, 1},
                                           HeadCase{64, 64, 4, 2}, HeadCase{80, 48, 4, 1}, HeadCase{96, 200, 4, 2},
                                           HeadCase{256, 256, 4, 1}, HeadCase{512, 64, 2, 1},
                                           HeadCase{200, 512, 2, 2}),
                         [](const auto& info) {
                           return "K" + std::to_string(info.param.K) + "_V" + std::to_string(info.param.V) + "_HQ" +
                                  std::to_string(info.param.heads) + "_H" + std::to_string(info.param.kv_heads);
                         });

// ---- fp8 --------------------------------------------------------------------------------------------------

TEST(PagedCuda, Fp8ScaleModesAndPages) {
  FLASHGATE_REQUIRE_GPU();
  for (ScaleMode mode : {ScaleMode::per_tensor, ScaleMode::per_token, ScaleMode::none})
    for (int64_t block : {16, 128}) {
      PagedConfig c = fp8(base(), mode);
      c.heads = 16, c.kv_heads = 1, c.block_size = block;
      c.context_lens = {1, 33, 700, 2049};
      c.query_lens = {1, 4, 2, 3};
      if (mode == ScaleMode::none) c.token_spread = 1.0;  // unscaled e4m3 holds N(0,1) values directly
      check_paged(c);
      c.dtype = DType::f16;
      check_paged(c);
    }
}

// A scale mode per operand: a per-token scale on one operand sends the cache to the per-token kernel family
// (serving.cpp), which then reads the other operand's scale per tensor or not at all.
TEST(PagedCuda, Fp8MixedScaleModes) {
  FLASHGATE_REQUIRE_GPU();
  const std::pair<ScaleMode, ScaleMode> mixes[] = {
      {ScaleMode::per_token, ScaleMode::per_tensor}, {ScaleMode::per_tensor, ScaleMode::per_token},
      {ScaleMode::none, ScaleMode::per_token},       {ScaleMode::per_token, ScaleMode::none},
      {ScaleMode::per_tensor, ScaleMode::none},      {ScaleMode::none, ScaleMode::per_tensor}};
  for (const auto& [k_mode, v_mode] : mixes) {
    PagedConfig c = fp8(base(), k_mode);
    c.v_scale_mode = v_mode;
    c.heads = 16, c.kv_heads = 1;
    c.context_lens = {1, 33, 700, 2049};
    c.query_lens = {1, 4, 2, 3};
    check_paged(c);
  }
}

// fp8 D64 in its own tiles (64-byte rows: 8-byte value loads and their swizzle, PagedTile::value_chunk): both
// layouts (decode rows at GQA 4 take the 8-row tile, verify rows the 16-row one), every scale mode, pages of 16 and
// 128, a window and sink, forced splits, against the reference and the unsplit path.
TEST(PagedCuda, Fp8HeadDim64) {
  FLASHGATE_REQUIRE_GPU();
  const std::pair<ScaleMode, ScaleMode> modes[] = {{ScaleMode::per_tensor, ScaleMode::per_tensor},
                                                   {ScaleMode::per_token, ScaleMode::per_token},
                                                   {ScaleMode::per_token, ScaleMode::per_tensor},
                                                   {ScaleMode::none, ScaleMode::per_token}};
  int run = 0;
  for (const auto& [k_mode, v_mode] : modes)
    for (int64_t lq : {1, 4}) {
      PagedConfig c = fp8(base(), k_mode);
      c.v_scale_mode = v_mode;
      c.head_dim = c.v_dim = 64;
      c.heads = 16, c.kv_heads = 4;
      c.block_size = run % 2 ? 128 : 16;
      c.context_lens = {1, 70, 0, 1500, 4099};
      c.query_lens = {1, lq, 0, lq, 1};
      c.max_seqlen_q = lq;
      if (run % 3 == 2) c.window = 300, c.sink = true;
      ++run;
      const uint64_t seed = flashgate::harness::fresh_seed();
      SCOPED_TRACE(seed_note(seed, c));
      const Reference r = reference(c, seed);
      const OwnedTensor unsplit = [&] {
        const ForcedSplits one(1);
        return run_gpu(r.host);
      }();
      expect_matches(unsplit, r.o, c);
      for (int splits : {3, 8}) {
        const ForcedSplits forced(splits);
        SCOPED_TRACE("splits " + std::to_string(splits));
        const OwnedTensor split = run_gpu(r.host);
        expect_matches(split, r.o, c);
        fgtest::expect_close("o vs the unsplit path", split, unsplit, kTolerance);
      }
    }
}

// The per-token V scale must not be rounded onto P at 8 bits: a long context with 20x magnitude spread
// shows the bias that rounding would leave (about 0.3%).
TEST(PagedCuda, Fp8PerTokenBiasLongContext) {
  FLASHGATE_REQUIRE_GPU();
  PagedConfig c = fp8(base(), ScaleMode::per_token);
  c.heads = 8, c.kv_heads = 1, c.block_size = 16;
  c.context_lens = {4096, 3000};
  c.query_lens = {4, 1};
  check_paged(c);
}

// The same with per-token magnitudes 1000x apart (beyond the SPEC's 20x): P * scale spans ten binades.
TEST(PagedCuda, Fp8PerTokenBiasWideSpread) {
  FLASHGATE_REQUIRE_GPU();
  PagedConfig c = fp8(base(), ScaleMode::per_token);
  c.heads = 8, c.kv_heads = 1, c.block_size = 16;
  c.token_spread = 1000.0;
  c.context_lens = {4096, 3000};
  c.query_lens = {4, 1};
  check_paged(c);
}

// ---- long contexts ------------------------------------------------------------------------------------

TEST(PagedCuda, Context65537) {
  FLASHGATE_REQUIRE_GPU();
  PagedConfig c = base();
  c.heads = 4, c.kv_heads = 1, c.block_size = 128;
  c.context_lens = {65537, 1000};
  c.query_lens = {3, 1};
  check_paged(c);
  c = fp8(c, ScaleMode::per_token);
  c.block_size = 16;
  c.head_dim = 64, c.v_dim = 64;  // keeps the host's exact fp8 encoding of 65537 tokens quick
  c.context_lens = {65537};
  c.query_lens = {1};
  check_paged(c);
}

// ---- batches, tables, features ----------------------------------------------------------------------

// Prefill chunks next to decode and verify rows in one batch, an empty sequence among them.
TEST(PagedCuda, MixedPrefillDecodeVerify) {
  FLASHGATE_REQUIRE_GPU();
  for (DType d : {DType::bf16, DType::f16}) {
    PagedConfig c = base(d);
    c.heads = 8, c.kv_heads = 2, c.block_size = 64;
    c.context_lens = {1000, 0, 37, 700, 64, 129};
    c.query_lens = {300, 0, 1, 4, 64, 100};
    check_paged(c);
    c.heads = 32, c.kv_heads = 1;  // G = 32: two head blocks per token
    c.context_lens = {200, 5, 80};
    c.query_lens = {50, 5, 3};
    check_paged(c);
  }
}

TEST(PagedCuda, WindowsAndSinks) {
  FLASHGATE_REQUIRE_GPU();
  for (int64_t window : {0, 1, 16, 63, 65, 100000}) {
    PagedConfig c = base();
    c.sink = true;
    c.window = window;
    c.context_lens = {1, 200, 1000};
    c.query_lens = {1, 4, 70};
    check_paged(c);
  }
  PagedConfig c = fp8(base(), ScaleMode::per_token);
  c.sink = true;
  c.window = 40;
  check_paged(c);
}

// A cache stored head-major [num_blocks, H, block_size, D] and passed as [num_blocks, block_size, H, D]
// through its strides (SPEC §6: other layouts through strides).
struct StridedCache {
  OwnedTensor storage;
  flashgate::Tensor view;
};

StridedCache head_major_on_gpu(const OwnedTensor& cache) {
  const flashgate::Tensor& t = cache.view();
  const int64_t NB = t.shape[0], BS = t.shape[1], H = t.shape[2], D = t.shape[3];
  const std::vector<double> src = cache.values();
  std::vector<double> dst(src.size());
  for (int64_t b = 0; b < NB; ++b)
    for (int64_t s = 0; s < BS; ++s)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t d = 0; d < D; ++d) dst[((b * H + h) * BS + s) * D + d] = src[((b * BS + s) * H + h) * D + d];
  OwnedTensor host(t.dtype, {NB, H, BS, D});
  host.set_values(dst);
  StridedCache out;
  out.storage = host.to(Device::cuda);
  out.view = flashgate::make_strided_tensor(out.storage.view().data, t.dtype, {NB, BS, H, D},
                                            {H * BS * D, D, BS * D, 1}, Device::cuda);
  return out;
}

TEST(PagedCuda, HeadMajorCacheThroughStrides) {
  FLASHGATE_REQUIRE_GPU();
  for (bool use_fp8 : {false, true}) {
    PagedConfig c = base();
    c.heads = 8, c.kv_heads = 2, c.block_size = 32;
    c.context_lens = {100, 33, 1};
    c.query_lens = {3, 4, 1};
    if (use_fp8) c = fp8(c, ScaleMode::per_token);
    const uint64_t seed = flashgate::harness::fresh_seed();
    SCOPED_TRACE(seed_note(seed, c));
    const Reference r = reference(c, seed);
    PagedCase dev = r.host.to(Device::cuda);
    const StridedCache k = head_major_on_gpu(r.host.k_cache), v = head_major_on_gpu(r.host.v_cache);
    flashgate::PagedArgs args = dev.args();
    args.k_cache = k.view;
    args.v_cache = v.view;
    for (Backend b : fgtest::cuda_backends_for(args)) {
      SCOPED_TRACE(fgtest::backend_note(b));
      dev.poison_outputs();
      flashgate::paged_attention(args, on(b));
      flashgate::harness::device_synchronize();
      expect_matches(dev.o.to(Device::cpu), r.o, c);
    }
  }
}

TEST(PagedCuda, ScaleArgument) {
  FLASHGATE_REQUIRE_GPU();
  PagedConfig c = base();
  c.scale = 0.02f;
  check_paged(c);
}

TEST(PagedCuda, UnshuffledTableWithoutNaN) {
  FLASHGATE_REQUIRE_GPU();
  PagedConfig c = base();
  c.shuffle_blocks = false;
  c.nan_unused = false;
  check_paged(c);
}

TEST(PagedCuda, ManySequences) {
  FLASHGATE_REQUIRE_GPU();
  PagedConfig c = base();
  c.heads = 4, c.kv_heads = 1, c.head_dim = 64, c.v_dim = 64;
  c.context_lens.clear(), c.query_lens.clear();
  for (int64_t n = 0; n < 600; ++n) {
    c.context_lens.push_back(1 + (n * 37) % 300);
    c.query_lens.push_back(1 + n % 4 > c.context_lens.back() ? 1 : 1 + n % 4);
  }
  check_paged(c);
}

// ---- the caller's max_seqlen_q ------------------------------------------------------------------------

// With max_seqlen_q the kernel maps row blocks to sequences by a division where that takes no more CTAs than
// the search's numbering (decode, verify, even chunks), and searches otherwise; either way the reference.
TEST(PagedCuda, MaxSeqlenQ) {
  FLASHGATE_REQUIRE_GPU();
  struct Case {
    std::vector<int64_t> ctx, lq;
    int64_t heads, kv_heads, bound;
  };
  const Case cases[] = {
      {{37, 300, 1, 2, 90}, {1, 1, 1, 1, 1}, 8, 2, 1},                   // decode: one block per sequence
      {{37, 300, 1, 0, 90}, {1, 1, 1, 0, 1}, 8, 2, 1},                   // an empty sequence: more blocks, search
      {{300, 0, 129, 64}, {4, 0, 3, 4}, 8, 2, 4},                        // verify (G = 4: 4 tokens a block), empty
      {{300, 129, 4, 64}, {4, 2, 3, 4}, 8, 2, 9},                        // a loose bound: 3 blocks each, search
      {{500, 200, 90, 70}, {8, 7, 8, 5}, 8, 2, 8},                       // chunks of up to 8 tokens: 2 blocks each
      {{200, 5, 80}, {3, 3, 3}, 32, 1, 3},                               // G = 32: one token a block, 2 head blocks
      {{1000, 0, 37, 700, 64, 129}, {300, 0, 1, 4, 64, 100}, 8, 2, 300},  // prefill + decode: search
  };
  for (const Case& k : cases) {
    PagedConfig c = base();
    c.context_lens = k.ctx, c.query_lens = k.lq, c.heads = k.heads, c.kv_heads = k.kv_heads;
    c.max_seqlen_q = k.bound;
    check_paged(c);
  }
  PagedConfig c = base();  // a long 3 x 4 verify: split-KV
  c.heads = 32, c.kv_heads = 8;
  c.context_lens = {8192, 8000, 7001}, c.query_lens = {4, 4, 4};
  c.max_seqlen_q = 4;
  check_paged(c);
  c = fp8(base(), ScaleMode::per_token);
  c.window = 100, c.sink = true, c.max_seqlen_q = 4;
  check_paged(c);
}

// A bound below a sequence's query count with validation off (nothing checks it): that sequence gets outputs
// for its first tokens only, the others the reference, and nothing is read or written out of range.
TEST(PagedCuda, MaxSeqlenQBelowALengthStaysInBounds) {
  FLASHGATE_REQUIRE_GPU();
  PagedConfig c = base();
  c.heads = 16, c.kv_heads = 1;  // G = 16: one token a block
  c.context_lens = {50, 40, 30}, c.query_lens = {1, 3, 1};
  const uint64_t seed = flashgate::harness::fresh_seed();
  SCOPED_TRACE(seed_note(seed, c) + " max_seqlen_q 1");
  const Reference r = reference(c, seed);
  PagedCase dev = r.host.to(Device::cuda);
  dev.poison_outputs();
  flashgate::PagedArgs args = dev.args();
  args.validate = false;
  args.max_seqlen_q = 1;
  flashgate::paged_attention(args, on(Backend::cuda));  // the portable kernels' CTA mapping by the bound
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << cudaGetErrorString(cudaGetLastError());
  const std::vector<double> out = dev.o.to(Device::cpu).values(), ref = r.o.values();
  const size_t row = static_cast<size_t>(c.heads * c.v_dim);  // one query token's outputs
  for (size_t t = 0; t < 5; ++t) {
    const bool computed = t != 2 && t != 3;  // tokens 1 and 2 of sequence 1 lie past the bound
    double err = 0, norm = 0;
    for (size_t i = t * row; i < (t + 1) * row; ++i) {
      if (!computed) {
        EXPECT_TRUE(std::isnan(out[i])) << "token " << t << " was written";
        break;
      }
      err += (out[i] - ref[i]) * (out[i] - ref[i]), norm += ref[i] * ref[i];
    }
    if (computed) EXPECT_LE(std::sqrt(err / norm), kTolerance) << "token " << t;
  }
}

// ---- the 8-row tile (keys as M) --------------------------------------------------------------------------

// Where max_seqlen_q x min(G, 16) <= 8 (decode at GQA <= 8), D128 and 16-bit D64 take the 8-row tile that puts keys
// in the mma's M (S^T = K Q^T, O^T = V^T P^T; the P^T fragments by movmatrix). Both 16-bit caches and both fp8
// families in every scale mode, head dims 128 and 64, G 1..8 (odd ones leave padding rows) at their largest bounds,
// empty sequences, NaN in unused slots, pages 16 and 128, window and sink, one pass and split, one and two kv heads
// per CTA: the reference, and the 16-row layout's result on the same inputs.
TEST(PagedCuda, EightRowTileKeysAsM) {
  FLASHGATE_REQUIRE_GPU();
  struct Kind {
    DType dtype;
    bool fp8;
    ScaleMode k, v;
  };
  const Kind kinds[] = {{DType::bf16, false, ScaleMode::none, ScaleMode::none},
                        {DType::f16, false, ScaleMode::none, ScaleMode::none},
                        {DType::bf16, true, ScaleMode::per_tensor, ScaleMode::per_tensor},
                        {DType::bf16, true, ScaleMode::per_token, ScaleMode::per_token},
                        {DType::bf16, true, ScaleMode::none, ScaleMode::per_token},
                        {DType::bf16, true, ScaleMode::per_token, ScaleMode::per_tensor}};
  int run = 0;
  for (int64_t dims : {128, 64})  // D64 has its own 8-row tile (fp8: 8-byte value loads, PagedTile::kRoundElems)
    for (const Kind& kind : kinds)
      for (int64_t G : {1, 2, 3, 4, 5, 8})
        for (int64_t lq = 1; lq <= 8 / G; lq = lq < 8 / G ? 8 / G : lq + 1) {  // 1, then 8 / G if larger
          // D64: G 1, 3, 4, 8 and no mixed scale modes keep the run short
          if (dims == 64 && (G == 2 || G == 5 || kind.k != kind.v)) continue;
          PagedConfig c = base(kind.dtype);
          c.head_dim = c.v_dim = dims;
          if (kind.fp8) {
            c = fp8(c, kind.k);
            c.v_scale_mode = kind.v;
          }
          c.kv_heads = 2, c.heads = 2 * G;
          c.block_size = run % 2 ? 128 : 16;
          c.context_lens = {1, 33, 0, 700, 2049, 64};
          c.query_lens = {1, lq, 0, lq, 1, lq};
          c.max_seqlen_q = lq;
          if (run % 3 == 1) c.window = 100, c.sink = true;
          ++run;
          const uint64_t seed = flashgate::harness::fresh_seed();
          SCOPED_TRACE(seed_note(seed, c));
          const Reference r = reference(c, seed);
          for (int splits : {1, 3})
            for (int heads : {1, 2}) {
              const ForcedServingPlan forced(heads, /*stages=*/0, splits);
              SCOPED_TRACE(forced.note);
              const OwnedTensor narrow = run_gpu(r.host);
              expect_matches(narrow, r.o, c);
              ForcedWideRows wide_rows;
              fgtest::expect_close("o vs the 16-row layout", narrow, run_gpu(r.host), kTolerance);
            }
        }
}

// The planner's table lookup (host code, no GPU needed): blocks of at most 8 rows with heads up to 128 take the
// 8-row tile, every cache kind; more rows and wider heads the 16-row layout; heads up to 64 their own tiles.
TEST(PagedTable, RowsPickTheTile) {
  using flashgate::cuda::CacheKind;
  using flashgate::cuda::find_paged_mma;
  for (CacheKind kind : {CacheKind::bf16, CacheKind::f16, CacheKind::e4m3, CacheKind::e4m3_tokens}) {
    EXPECT_EQ(find_paged_mma(kind, 128, 128, 8)->rows, 8);
    EXPECT_EQ(find_paged_mma(kind, 100, 64, 4)->rows, 8);
    EXPECT_EQ(find_paged_mma(kind, 128, 128, 9)->rows, 16);
    EXPECT_EQ(find_paged_mma(kind, 129, 128, 8)->kp, 256);
    EXPECT_EQ(find_paged_mma(kind, 129, 128, 8)->rows, 16);
    EXPECT_EQ(find_paged_mma(kind, 577, 512, 8), nullptr);
  }
  for (CacheKind kind : {CacheKind::bf16, CacheKind::f16, CacheKind::e4m3, CacheKind::e4m3_tokens}) {
    EXPECT_EQ(find_paged_mma(kind, 64, 64, 1)->kp, 64);
    EXPECT_EQ(find_paged_mma(kind, 64, 64, 8)->rows, 8);
    EXPECT_EQ(find_paged_mma(kind, 64, 64, 9)->rows, 16);
    EXPECT_EQ(find_paged_mma(kind, 64, 64, 9)->kp, 64);
    EXPECT_EQ(find_paged_mma(kind, 64, 65, 8)->vp, 128);
  }
}

// The per-token bias cases of the 16-row layout on the 8-row tile: decode at GQA 8, contexts of 4096 tokens,
// magnitudes 20x and 1000x apart.
TEST(PagedCuda, EightRowTilePerTokenBias) {
  FLASHGATE_REQUIRE_GPU();
  for (double spread : {20.0, 1000.0}) {
    PagedConfig c = fp8(base(), ScaleMode::per_token);
    c.heads = 8, c.kv_heads = 1, c.block_size = 16;
    c.token_spread = spread;
    c.context_lens = {4096, 3000, 4095};
    c.query_lens = {1, 1, 1};
    c.max_seqlen_q = 1;
    check_paged(c);
  }
}

// ---- split-KV ----------------------------------------------------------------------------------------

// Each split count gives the unsplit result within tolerance (and the reference), slices empty included; the
// counts reach both ends of every merge batch size (8, 16, 32, 64 splits; two batches past 64).
TEST(PagedCuda, EverySplitCountAgrees) {
  FLASHGATE_REQUIRE_GPU();
  for (bool use_fp8 : {false, true}) {
    PagedConfig c = base();
    c.heads = 16, c.kv_heads = 2, c.block_size = 16;
    c.sink = true;
    c.context_lens = {3, 100, 1500, 4000, 0};
    c.query_lens = {1, 4, 3, 1, 0};
    if (use_fp8) c = fp8(c, ScaleMode::per_token);
    const uint64_t seed = flashgate::harness::fresh_seed();
    SCOPED_TRACE(seed_note(seed, c));
    const Reference r = reference(c, seed);
    OwnedTensor unsplit;
    {
      ForcedSplits one(1);
      unsplit = run_gpu(r.host);
    }
    expect_matches(unsplit, r.o, c);
    for (int splits : {2, 3, 7, 8, 9, 16, 17, 32, 33, 64, 65, 128}) {
      SCOPED_TRACE("splits " + std::to_string(splits));
      ForcedSplits forced(splits);
      const OwnedTensor out = run_gpu(r.host);
      fgtest::expect_close("o vs unsplit", out, unsplit, kTolerance);
      expect_matches(out, r.o, c);
    }
  }
}

// Every pipeline depth (2..4 stages; the planner picks one per cache kind and head dims) gives the reference,
// unsplit and split, on head dims whose default depths differ.
TEST(PagedCuda, EveryPipelineDepthAgrees) {
  FLASHGATE_REQUIRE_GPU();
  for (int dims : {64, 128, 256})
    for (bool use_fp8 : {false, true}) {
      if (use_fp8 && dims == 64) continue;  // no fp8 instance below 128
      PagedConfig c = base();
      c.head_dim = c.v_dim = dims;
      c.heads = 8, c.kv_heads = 2, c.block_size = 16;
      c.context_lens = {5, 700, 1500, 0};
      c.query_lens = {1, 3, 1, 0};
      if (use_fp8) c = fp8(c, ScaleMode::per_token);
      const uint64_t seed = flashgate::harness::fresh_seed();
      SCOPED_TRACE(seed_note(seed, c));
      const Reference r = reference(c, seed);
      for (int stages : {2, 3, 4})
        for (int splits : {1, 3}) {
          const ForcedServingPlan forced(0, stages, splits);
          SCOPED_TRACE(forced.note);
          expect_matches(run_gpu(r.host), r.o, c);
        }
    }
}

// A CTA that takes several kv heads in turn streams their stages through one ring (the next head's first
// stages load under the current head's last, the merge uses the slots just consumed): every heads-per-CTA
// count, uneven head groups (5 kv heads), contexts of one stage or none, every depth and a split give the
// reference, for each 16-bit head-dim bucket (the merge's slot layouts differ). fp8 kernels take one head
// per CTA whatever is forced (their grid must then cover every head).
TEST(PagedCuda, EveryHeadsPerCtaAgrees) {
  FLASHGATE_REQUIRE_GPU();
  for (int dims : {64, 128, 256, 512})
    for (bool use_fp8 : {false, true}) {
      if (use_fp8 && dims != 128) continue;
      PagedConfig c = base(dims == 256 ? DType::f16 : DType::bf16);
      c.head_dim = c.v_dim = dims;
      c.heads = 10, c.kv_heads = 5, c.block_size = 16;
      c.sink = true;
      c.window = 600;
      c.context_lens = {1, 64, 65, 700, 0, 130};
      c.query_lens = {1, 3, 1, 2, 0, 4};
      if (use_fp8) c = fp8(c, ScaleMode::per_token);
      const uint64_t seed = flashgate::harness::fresh_seed();
      SCOPED_TRACE(seed_note(seed, c));
      const Reference r = reference(c, seed);
      for (int heads : {1, 2, 3, 5})
        for (int stages : {2, 3, 4})
          for (int splits : {1, 3}) {
            const ForcedServingPlan forced(heads, stages, splits);
            SCOPED_TRACE(forced.note);
            expect_matches(run_gpu(r.host), r.o, c);
          }
    }
}

// Unaligned query pairs (q padded by one element per row; the caches aligned): the query is staged through
// registers at every head's start instead of copied.
TEST(PagedCuda, UnalignedQueryRows) {
  FLASHGATE_REQUIRE_GPU();
  PagedConfig c = base();
  c.heads = 8, c.kv_heads = 4;
  c.q_row_pad = 1;
  const uint64_t seed = flashgate::harness::fresh_seed();
  SCOPED_TRACE(seed_note(seed, c));
  const Reference r = reference(c, seed);
  for (int heads : {1, 2, 4}) {
    SCOPED_TRACE("heads per CTA " + std::to_string(heads));
    ForcedHeadsPerCta forced(heads);
    expect_matches(run_gpu(r.host), r.o, c);
  }
}

// The heuristic's own choice on a shape that splits (few sequences, long contexts), window included.
TEST(PagedCuda, HeuristicSplitsLongVerify) {
  FLASHGATE_REQUIRE_GPU();
  PagedConfig c = base();
  c.heads = 32, c.kv_heads = 8, c.block_size = 16;
  c.context_lens = {8192, 8000, 7001};
  c.query_lens = {4, 4, 4};
  check_paged(c);
  c.window = 3000;
  check_paged(c);
}

// ---- bad indices ----------------------------------------------------------------------------------

// With validate off nothing checks the index values: the kernels must bound them and never read out of
// range (the result is garbage, but the device stays healthy). Both paths, split and unsplit.
TEST(PagedCuda, BadIndicesAreNeverDereferenced) {
  FLASHGATE_REQUIRE_GPU();
  for (DType d : {DType::bf16, DType::f32})
    for (int splits : {1, 4}) {
      PagedConfig c = base(d);
      c.nan_unused = false;
      const uint64_t seed = flashgate::harness::fresh_seed();
      SCOPED_TRACE(seed_note(seed, c) + " splits " + std::to_string(splits));
      flashgate::harness::Rng rng(seed);
      PagedCase host = PagedCase::random(c, rng);
      std::vector<double> table = host.block_table.values();
      table[0] = 1 << 30, table[1] = -7, table.back() = 123456789;
      host.block_table.set_values(table);
      host.seq_lens_k.set_values({1 << 30, -5, 300});
      host.cu_seqlens_q.set_values({0, 5, 2, 6});  // total_q = 6, but decreasing inside
      PagedCase dev = host.to(Device::cuda);
      flashgate::PagedArgs args = dev.args();
      args.validate = false;
      ForcedSplits forced(splits);  // the portable planner's; other backends take their own choice
      for (Backend b : fgtest::cuda_backends_for(args)) {
        SCOPED_TRACE(fgtest::backend_note(b));
        flashgate::paged_attention(args, on(b));
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << cudaGetErrorString(cudaGetLastError());
      }
    }
}

// The mma kernels index per-token scales in 32 bits: a scale view spanning 2^31 elements (a huge block stride
// over a small buffer: never dereferenced) is refused before any kernel runs, naming the scales; o is untouched.
TEST(PagedCuda, ScaleViewsPast2To31AreRefused) {
  FLASHGATE_REQUIRE_GPU();
  for (bool on_values : {false, true}) {
    const PagedConfig c = fp8(base(), ScaleMode::per_token);
    const uint64_t seed = flashgate::harness::fresh_seed();
    SCOPED_TRACE(seed_note(seed, c) + (on_values ? " v_scale" : " k_scale"));
    flashgate::harness::Rng rng(seed);
    PagedCase dev = PagedCase::random(c, rng).to(Device::cuda);
    dev.poison_outputs();
    const std::vector<unsigned char> poisoned = dev.o.raw_bytes();
    flashgate::PagedArgs args = dev.args();
    flashgate::Tensor& scale = on_values ? args.v_scale : args.k_scale;
    const int64_t blocks = scale.shape[0], heads = scale.shape[1], slots = scale.shape[2];
    ASSERT_GE(blocks, 2);
    scale = flashgate::make_strided_tensor(scale.data, DType::f32, {blocks, heads, slots},
                                           {int64_t{1} << 31, slots, 1}, Device::cuda);
    args.validate = false;  // the view is not the buffer's: only the refusal stands between it and a kernel
    for (Backend b : {Backend::cuda, Backend::hopper}) {  // every CUDA backend must refuse it (or not be built)
      SCOPED_TRACE(fgtest::backend_note(b));
      try {
        flashgate::paged_attention(args, on(b));
        ADD_FAILURE() << "a scale view spanning 2^31 elements was run";
      } catch (const flashgate::Error& e) {
        const std::string what = e.what();
        const bool refused = what.find("k_scale or v_scale spans 2^31") != std::string::npos;
        EXPECT_TRUE(refused || b != Backend::cuda) << what;  // another backend may refuse the call as a whole
      }
    }
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(dev.o.raw_bytes(), poisoned) << "o was written";
  }
}

// ---- graph capture and workspace ------------------------------------------------------------------

// Under CUDA-graph capture: validate off, a caller workspace from workspace_size, no host sync; replays
// give the reference. (workspace_size runs before the capture and also prepares the kernels.)
TEST(PagedCuda, CudaGraphCaptureWithWorkspace) {
  FLASHGATE_REQUIRE_GPU();
  PagedConfig c = fp8(base(), ScaleMode::per_token);
  c.heads = 32, c.kv_heads = 8;
  c.context_lens = {5000, 3};
  c.query_lens = {4, 3};
  const uint64_t seed = flashgate::harness::fresh_seed();
  SCOPED_TRACE(seed_note(seed, c));
  const Reference r = reference(c, seed);
  PagedCase dev = r.host.to(Device::cuda);
  dev.poison_outputs();
  flashgate::PagedArgs args = dev.args();
  args.validate = false;
  for (Backend b : fgtest::cuda_backends_for(args)) {
    SCOPED_TRACE(fgtest::backend_note(b));
    const size_t bytes = flashgate::workspace_size(args, b);
    flashgate::harness::Buffer workspace(Device::cuda, bytes);
    cudaStream_t stream = nullptr;
    ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);  // orders after the poisoning memsets
    Launch launch = on(b);
    launch.stream = stream;
    launch.workspace = workspace.data();
    launch.workspace_bytes = bytes;
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), cudaSuccess);
    flashgate::paged_attention(args, launch);
    ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
    ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
    for (int replay = 0; replay < 2; ++replay) {
      dev.poison_outputs();
      ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
      ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
      expect_matches(dev.o.to(Device::cpu), r.o, c);
    }
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    cudaStreamDestroy(stream);
  }
}

}  // namespace
