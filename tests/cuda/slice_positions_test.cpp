// Host-side test (no GPU needed) of how the cuda backend puts a slice pair into the kernels' 32-bit terms:
// slice_positions (the rows' shift against the keys and the window, normalised for positions up to 2^62) and the
// shifted keys_seen_by_rows / block_needs_mask, against visibility on the global positions (SPEC §3), for fresh
// random slices before, across and after each other, near 0 and near 2^40 and 2^61; and what those kernels refuse.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>

#include "api/problem.h"
#include "cuda/common/visibility.h"
#include "cuda/host/attention_params.h"
#include "harness/owned_tensor.h"

namespace {

bool visible_globally(int64_t q_pos, int64_t k_pos, int64_t window) {
  const int64_t d = q_pos - k_pos;
  return d >= 0 && (window < 0 || d < window);
}

TEST(SlicePositions, KernelTermsMatchGlobalPositions) {
  const uint64_t seed = flashgate::harness::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed) + " (FLASHGATE_SEED replays it)");
  std::mt19937_64 rng(seed);
  const int64_t bases[] = {0, int64_t{1} << 40, int64_t{1} << 61};
  const int64_t windows[] = {-1, 0, 1, 2, 5, 17, 64, 1000, int64_t{1} << 40};
  for (int trial = 0; trial < 3000; ++trial) {
    flashgate::detail::SliceProblem p;
    p.Tq = 1 + static_cast<int64_t>(rng() % 40), p.Tk = 1 + static_cast<int64_t>(rng() % 40);
    const int64_t base = bases[rng() % 3];
    p.q_start = base + static_cast<int64_t>(rng() % 120);
    p.k_start = base + static_cast<int64_t>(rng() % 120);
    if (rng() % 8 == 0) p.q_start += int64_t{1} << 35;  // queries far past the keys
    p.window = windows[rng() % 9];
    if (rng() % 8 == 0 && p.window > 0) p.window += int64_t{1} << 35;  // ... with a window that still reaches
    SCOPED_TRACE("Tq " + std::to_string(p.Tq) + " Tk " + std::to_string(p.Tk) + " q_start " +
                 std::to_string(p.q_start) + " k_start " + std::to_string(p.k_start) + " window " +
                 std::to_string(p.window));
    const flashgate::cuda::SlicePositions at = flashgate::cuda::slice_positions(p);
    const int Tq = static_cast<int>(p.Tq), Tk = static_cast<int>(p.Tk);
    const unsigned bound = flashgate::cuda::distance_bound(at.window);
    for (int i = 0; i < Tq; ++i) {
      int first = Tk, last = -1;
      for (int j = 0; j < Tk; ++j) {
        const bool want = visible_globally(p.q_start + i, p.k_start + j, p.window);
        ASSERT_EQ(flashgate::cuda::visible_at_distance(i + at.shift - j, bound), want) << "row " << i << " key " << j;
        if (want) first = std::min(first, j), last = j;
      }
      // The keys a row's span holds: every visible key inside, and no more than the hull of them.
      const flashgate::cuda::KeySpan keys = flashgate::cuda::keys_seen_by_rows(i, i + 1, Tq, at.window, at.shift, Tk);
      if (last < 0) {
        ASSERT_TRUE(keys.empty()) << "row " << i << " sees nothing, span [" << keys.begin << ", " << keys.end << ")";
      } else {
        ASSERT_EQ(keys.begin, first) << "row " << i;
        ASSERT_EQ(keys.end, last + 1) << "row " << i;
      }
    }
    // A block that needs no mask holds only visible pairs.
    for (int r0 = 0; r0 < Tq; r0 += 8)
      for (int c0 = 0; c0 < Tk + 8; c0 += 8) {
        if (flashgate::cuda::block_needs_mask(r0, r0 + 8, c0, c0 + 8, Tq, at.window, at.shift, Tk)) continue;
        for (int i = r0; i < std::min(r0 + 8, Tq); ++i)
          for (int j = c0; j < c0 + 8; ++j)
            ASSERT_TRUE(j < Tk && visible_globally(p.q_start + i, p.k_start + j, p.window))
                << "unmasked block (" << r0 << ", " << c0 << ") holds row " << i << " key " << j;
      }
  }
}

// What the CUDA backends' slice kernels refuse (before any kernel runs), and what they take.
TEST(SlicePositions, TheKernelsRefuseWhatTheyCannotTake) {
  flashgate::Tensor q;
  q.dtype = flashgate::DType::bf16;
  flashgate::detail::SliceProblem p;
  p.B = 1, p.Tq = 5, p.Tk = 7;
  EXPECT_EQ(flashgate::cuda::slice_refusal(q, p), "");
  p.Tk = 0;  // an empty key slice: the kernels would read a count of 0 as the queries' own keys
  EXPECT_NE(flashgate::cuda::slice_refusal(q, p).find("key slices of one token or more"), std::string::npos);
  p.Tk = int64_t{1} << 30;
  EXPECT_NE(flashgate::cuda::slice_refusal(q, p).find("2^30"), std::string::npos);
  p.Tk = 7, q.dtype = flashgate::DType::f32;
  EXPECT_NE(flashgate::cuda::slice_refusal(q, p).find("fp16 or bf16"), std::string::npos);
}

}  // namespace
