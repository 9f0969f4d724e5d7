// The split-KV model, the kv heads per CTA and the pipeline depth (src/cuda/common/serving_splits.h) on the
// benchmark's serving shapes with an H200's resident slots (132 SMs; 2 CTAs per SM for 16-bit caches, 4 for fp8 at
// D128, of which a split launch fills 1 for 16-bit decode and 3 for per-tensor fp8) and shared memory, and their
// invariants on a sweep: the split choice stays within its caps and no other allowed count has a lower modelled
// time; the heads per CTA bring a pass within the slots with as few heads per CTA as that takes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>

#include "cuda/common/serving_splits.h"

namespace flashgate::cuda {
namespace {

constexpr int64_t kBf16Slots = 132 * 2, kFp8Slots = 132 * 4;

int slices(int64_t ctas, int64_t slots, int64_t keys) {
  SliceProblem q;
  q.ctas = ctas, q.slots = slots, q.keys = keys, q.keys_per_stage = 64;
  return choose_key_slices(q);
}

// Decode / paged rows of the benchmark rows (bench/rows.txt): GQA 32/8 D128, so one row block per sequence and kv head.
TEST(ServingSplits, BenchmarkShapes) {
  // 16-bit caches: one wave of long slices where a pass leaves SMs idle, one pass where it fills them.
  EXPECT_EQ(slices(8 * 8, kBf16Slots, 32768), 4);    // B8 ctx 32768: 256 CTAs, one wave
  EXPECT_EQ(slices(1 * 8, kBf16Slots, 131072), 33);  // B1 ctx 131072: 264 CTAs
  EXPECT_EQ(slices(3 * 8, kBf16Slots, 32768), 11);   // verify 3 x 4 tokens: 3 row blocks per kv head
  EXPECT_EQ(slices(64 * 8, kBf16Slots, 4096), 1);    // B64 ctx 4096: 512 CTAs, two whole waves
  EXPECT_EQ(slices(128 * 8, kBf16Slots, 1024), 1);   // B128 ctx 1024
  // fp8 D128 (4 CTAs per SM): one wave rather than two "fuller" ones. Measured on the H200: one
  // 128K sequence 66 slices 0.098 ms against 49 0.104 and 33 0.142; B8 ctx 32768 8 slices 0.164 ms against
  // 6 or 12 0.194; B64 ctx 4096 is one pass (512 CTAs on 528 slots).
  EXPECT_EQ(slices(1 * 8, kFp8Slots, 131072), 66);
  EXPECT_EQ(slices(3 * 8, kFp8Slots, 32768), 22);
  EXPECT_EQ(slices(8 * 8, kFp8Slots, 32768), 8);
  EXPECT_EQ(slices(64 * 8, kFp8Slots, 4096), 1);
  EXPECT_EQ(slices(128 * 8, kFp8Slots, 1024), 1);
  // Per-tensor fp8 D128 fills three of the four CTAs per SM (392 CTAs for one 128K sequence took
  // 0.0859 ms against 0.0898 for 528; verify 32K 0.0725 against 0.0746, B8 ctx 32768 0.144 against 0.146).
  const int64_t per_tensor = split_model_slots(132, 4, 3);
  EXPECT_EQ(per_tensor, 132 * 3);
  EXPECT_EQ(split_model_slots(132, 4, 0), kFp8Slots);  // tiles without a measured count: every resident CTA
  EXPECT_EQ(split_model_slots(132, 2, 3), kBf16Slots);  // never more than the occupancy
  EXPECT_EQ(split_model_slots(0, 0, 1), 1);
  EXPECT_EQ(slices(1 * 8, per_tensor, 131072), 49);
  EXPECT_EQ(slices(3 * 8, per_tensor, 32768), 16);
  EXPECT_EQ(slices(8 * 8, per_tensor, 32768), 6);
  EXPECT_EQ(slices(3 * 8, per_tensor, 131072), 16);
  EXPECT_EQ(slices(64 * 8, per_tensor, 4096), 1);
  // 16-bit D128 decode (the 8-row tile) fills one of its two CTAs per SM (one 128K sequence 0.1391 ms
  // at 16 slices against 0.1428 at 33; B8 ctx 32768 0.2548 at 2 against 0.2562 at 4).
  const int64_t one = split_model_slots(132, 2, 1);
  EXPECT_EQ(one, 132);
  EXPECT_EQ(slices(1 * 8, one, 131072), 16);
  EXPECT_EQ(slices(8 * 8, one, 32768), 2);
  EXPECT_EQ(slices(64 * 8, one, 4096), 1);
  EXPECT_EQ(slices(128 * 8, one, 1024), 1);
}

TEST(ServingSplits, ShortContextsAndDegenerateInputsTakeOnePass) {
  EXPECT_EQ(slices(8, kBf16Slots, 0), 1);
  EXPECT_EQ(slices(8, kBf16Slots, 1000), 1);  // below two slices of kMinKeysPerSlice
  EXPECT_EQ(slices(0, 0, 1 << 20), slices(1, 1, 1 << 20));
  EXPECT_EQ(slices(1, 1, 1 << 20), 1);  // one slot: more slices only add waves
}

TEST(ServingSplits, ChoiceIsTheCheapestAllowedCount) {
  for (int64_t slots : {int64_t{1}, int64_t{64}, kBf16Slots, kFp8Slots})
    for (int64_t ctas : {1, 3, 8, 24, 64, 100, 264, 512, 4096})
      for (int64_t keys : {0, 511, 1024, 5000, 32768, 131072, 1 << 20}) {
        SliceProblem q;
        q.ctas = ctas, q.slots = slots, q.keys = keys, q.keys_per_stage = 64;
        const int s = choose_key_slices(q);
        SCOPED_TRACE(testing::Message() << "slots " << slots << " ctas " << ctas << " keys " << keys << " -> " << s);
        ASSERT_GE(s, 1);
        ASSERT_LE(s, kMaxKeySlices);
        if (ctas >= slots) ASSERT_EQ(s, 1) << "a pass that fills the slots is not split";
        if (s > 1) {
          ASSERT_GE(keys / s, kMinKeysPerSlice);             // slices keep enough keys
          ASSERT_LE(ctas * s, 4 * slots + ctas);             // about four waves at most
        }
        auto cost = [&](int64_t n) {
          return (ctas * n + slots - 1) / slots * (kStartStages * 64 + (keys + n - 1) / n);
        };
        for (int64_t n = 1; n < s; ++n) ASSERT_GT(cost(n), cost(s)) << "a smaller count is as cheap: " << n;
      }
}

// One-pass rows of the benchmark rows (bench/rows.txt) (8 kv heads, one row block per sequence).
TEST(ServingHeadsPerCta, BenchmarkShapes) {
  EXPECT_EQ(choose_heads_per_cta(128, 8, kBf16Slots), 4);  // B128 ctx 1024: 1024 CTAs -> 256
  EXPECT_EQ(choose_heads_per_cta(64, 8, kBf16Slots), 2);   // B64 ctx 4096: 512 -> 256
  EXPECT_EQ(choose_heads_per_cta(8, 8, kBf16Slots), 1);    // 64 CTAs: the split path's business
  EXPECT_EQ(choose_heads_per_cta(33, 8, kBf16Slots), 1);   // 264 CTAs fill the slots exactly
  EXPECT_EQ(choose_heads_per_cta(1024, 8, kBf16Slots), 8);  // more row blocks than slots: all heads
  EXPECT_EQ(choose_heads_per_cta(128, 8, 132 * 3), 3);     // 3 CTAs per SM: 384 CTAs on 396 slots
}

TEST(ServingHeadsPerCta, FewestHeadsThatFitTheSlots) {
  for (int64_t slots : {int64_t{1}, int64_t{64}, kBf16Slots, kFp8Slots})
    for (int64_t blocks : {0, 1, 7, 33, 64, 100, 264, 1000})
      for (int heads : {1, 2, 3, 8, 16, 64}) {
        const int h = choose_heads_per_cta(blocks, heads, slots);
        SCOPED_TRACE(testing::Message() << "slots " << slots << " blocks " << blocks << " heads " << heads << " -> " << h);
        ASSERT_GE(h, 1);
        ASSERT_LE(h, std::max(heads, 1));
        const int64_t b = std::max<int64_t>(blocks, 1);
        auto ctas = [&](int n) { return b * ((heads + n - 1) / n); };
        if (h < heads) ASSERT_LE(ctas(h), slots);  // fits, or takes every head
        for (int n = 1; n < h; ++n) ASSERT_GT(ctas(n), slots) << "fewer heads per CTA fit too: " << n;
      }
}

// An H200: 228 KB of shared memory per SM, 227 KB per CTA, 1 KB reserved per CTA; a kernel of (fixed, stage)
// bytes whose registers allow `reg_ctas` CTAs per SM.
struct H200Kernel {
  int fixed, stage, reg_ctas;
  int bytes(int s) const { return fixed + s * stage; }
  int ctas(int s) const { return std::min(reg_ctas, 233472 / (bytes(s) + 1024)); }
};
constexpr int kSmemOptin = 232448, kTwoCtaBudget = 233472 / 2 - 1024;

int stages_of(const H200Kernel& k, int target, int forced = 0, bool shallow = false) {
  return choose_stages([&](int s) { return k.bytes(s); }, [&](int s) { return k.ctas(s); }, kTwoCtaBudget,
                       kSmemOptin, target, forced, shallow);
}

TEST(ServingStages, KeepTheRegisterTargetOfCtasPerSm) {
  const H200Kernel fp8_d128{5248, 16896, 4};  // 128 registers: 4 CTAs fit at 3 stages, 3 at 4
  EXPECT_EQ(stages_of(fp8_d128, 4), 3);
  EXPECT_EQ(fp8_d128.ctas(3), 4);
  EXPECT_EQ(stages_of(fp8_d128, 3), 4);       // a 3-CTA budget keeps the deepest pipeline
  EXPECT_EQ(stages_of(fp8_d128, 4, 4), 4);    // forced
  const H200Kernel fp8_d256{9088, 16640, 3};
  EXPECT_EQ(stages_of(fp8_d256, 3), 4);       // 3 CTAs fit at 4 stages already
  const H200Kernel bf16_d128{5248, 32768, 2};
  EXPECT_EQ(stages_of(bf16_d128, 2), 3);      // the two-CTA budget holds 3
  const H200Kernel too_big{200000, 20000, 1};
  EXPECT_EQ(stages_of(too_big, 1), 0);
}

TEST(ServingStages, ShallowRingTakesTheShallowestDepthThatKeepsTheTarget) {
  const H200Kernel fp8_d128{5248, 16896, 4};
  EXPECT_EQ(stages_of(fp8_d128, 4, 0, true), 2);     // 4 CTAs per SM at 2 stages as at 3
  EXPECT_EQ(stages_of(fp8_d128, 4, 3, true), 3);     // forced wins
  EXPECT_EQ(stages_of(fp8_d128, 4, 4, true), 4);
  const H200Kernel three_ctas{5248, 16896, 3};       // registers allow 3 (an sm_8x build): 3 CTAs at 4 stages
  EXPECT_EQ(stages_of(three_ctas, 4, 0, true), stages_of(three_ctas, 4));  // the target is out of reach: unchanged
  EXPECT_EQ(stages_of(three_ctas, 3, 0, true), 2);
}

TEST(ServingStages, DepthsStayInRangeAndWithinTheirBudget) {
  for (int fixed : {0, 4096, 9088, 20000})
    for (int stage : {8192, 16896, 32768, 50000})
      for (int reg_ctas : {1, 2, 3, 4})
        for (int target : {1, 2, 3, 4})
          for (int forced : {0, 2, 3, 4})
            for (bool shallow : {false, true}) {
              const H200Kernel k{fixed, stage, reg_ctas};
              const int s = stages_of(k, target, forced, shallow);
              SCOPED_TRACE(testing::Message() << fixed << " + " << stage << " x s, target " << target << " forced "
                                              << forced << (shallow ? " shallow" : "") << " -> " << s);
              if (s == 0) {
                ASSERT_GT(k.bytes(2), kSmemOptin);
                continue;
              }
              ASSERT_GE(s, 2);
              ASSERT_LE(s, 4);
              ASSERT_LE(k.bytes(s), forced ? kSmemOptin : std::max(kTwoCtaBudget, k.bytes(2)));
              if (forced) {
                ASSERT_TRUE(s == forced || k.bytes(s + 1) > kSmemOptin);
                continue;
              }
              const bool reduced = s < 4 && k.bytes(s + 1) <= kTwoCtaBudget;  // below the deepest that fits
              if (reduced && !shallow) ASSERT_TRUE(k.ctas(s + 1) < target && k.ctas(s) >= target);  // one short
              if (reduced && shallow) ASSERT_GE(k.ctas(s), target);  // shallower only where it keeps the target,
              if (shallow && s > 2) ASSERT_LT(k.ctas(s - 1), target);  // and as shallow as that allows
            }
}

}  // namespace
}  // namespace flashgate::cuda
