// How a serving launch divides its work: key slices (split-KV, flash-decoding) and kv heads per CTA, from a
// host-side model of a memory-bound launch, kept apart from the launcher so that CPU tests can pin its choices.
#pragma once

#include <algorithm>
#include <cstdint>

namespace flashgate::cuda {

inline constexpr int kMaxKeySlices = 128;           // bounds the partials' workspace and the merge's reads
inline constexpr int64_t kMinKeysPerSlice = 512;
// A CTA's start and drain (launch, the first stages' latency, the epilogue) in stages of keys: ~9 us against
// ~31 us for 1024 keys in a fit of measured H200 times (docs/perf-notes.md), about 4 stages of 64 keys.
inline constexpr int kStartStages = 4;

struct SliceProblem {
  int64_t ctas = 1;         // CTAs of one pass: row blocks x kv heads
  int64_t slots = 1;        // resident CTAs of the kernel: SMs x CTAs per SM
  int64_t keys = 0;         // keys per sequence the launch assumes
  int keys_per_stage = 64;  // keys of one pipeline stage
};

// CTAs run in waves of `slots`, and a memory-bound CTA costs its keys plus a fixed start and drain, so s
// slices take about waves(s) x (start + keys / s). The smallest s of least modelled time, among slices of
// at least kMinKeysPerSlice keys and at most about four waves (the merge and the partials grow with s).
// One pass when a pass alone fills the slots: its last, partial wave streams faster per CTA than the model
// says (fewer CTAs share the bandwidth), and on the H200 three slices of fp8 B64/4096 (512 CTAs, 396 slots)
// took 0.251 ms against 0.210 ms for one pass.
inline int choose_key_slices(const SliceProblem& q) {
  const int64_t ctas = std::max<int64_t>(q.ctas, 1), slots = std::max<int64_t>(q.slots, 1);
  if (ctas >= slots) return 1;
  const int64_t by_keys = q.keys / std::max<int64_t>(kMinKeysPerSlice, 4 * q.keys_per_stage);
  const int64_t by_waves = (4 * slots + ctas - 1) / ctas;
  const int64_t cap = std::clamp<int64_t>(std::min(by_keys, by_waves), 1, kMaxKeySlices);
  const int64_t start = static_cast<int64_t>(kStartStages) * q.keys_per_stage;
  int64_t best = 1, best_cost = -1;
  for (int64_t s = 1; s <= cap; ++s) {
    const int64_t waves = (ctas * s + slots - 1) / slots;
    const int64_t cost = waves * (start + (q.keys + s - 1) / s);
    if (best_cost < 0 || cost < best_cost) best = s, best_cost = cost;
  }
  return static_cast<int>(best);
}

// The resident CTAs the split model fills: `saturating` CTAs per SM where the kernel's tile measured that fewer
// than its occupancy saturate DRAM (PagedTile::kSplitCtasPerSM), else every one (`ctas_per_sm`).
inline int64_t split_model_slots(int64_t sms, int ctas_per_sm, int saturating) {
  const int per_sm = saturating > 0 ? std::min(saturating, ctas_per_sm) : ctas_per_sm;
  return std::max<int64_t>(sms * std::max(per_sm, 1), 1);
}

// Pipeline depth, 2..4 stages: the deepest whose shared memory `bytes(s)` fits `budget` (what lets two CTAs
// share an SM), then one stage less while that reaches the CTAs per SM the kernel's registers are budgeted
// for (`target`; `ctas(s)`: resident CTAs at s stages), since more CTAs stream more stages at once than one
// more stage each (fp8 D128: 4 CTAs x 3 stages rather than 3 x 4). `shallow`: further down to the shallowest
// depth that still keeps `target` (for tiles that stream faster so: PagedTile::kShallowRing). `forced` (> 0)
// takes that depth where `optin` (one CTA's limit) holds it. 0 when not even 2 stages fit `optin`.
template <class Bytes, class Ctas>
int choose_stages(Bytes bytes, Ctas ctas, int budget, int optin, int target, int forced, bool shallow = false) {
  int stages = forced > 0 ? std::clamp(forced, 2, 4) : 4;
  while (stages > 2 && bytes(stages) > (forced > 0 ? optin : budget)) --stages;
  if (bytes(stages) > optin) return 0;
  while (forced <= 0 && stages > 2 && ctas(stages - 1) >= target && (shallow || ctas(stages) < target)) --stages;
  return stages;
}

// Kv heads per CTA (taken in turn over the same keys) for a one-pass launch of `row_blocks` x `heads` CTAs.
// A CTA's start streams nothing for a few microseconds (the first stages' and the query's round trips); a CTA
// that takes several heads pays it once and loads the next head's first stages under the current head's last
// ones. Where the pass fits the slots it keeps one head per CTA (more CTAs stream more at once); otherwise the
// fewest heads per CTA that bring it within the slots, or all of them where even that does not.
inline int choose_heads_per_cta(int64_t row_blocks, int heads, int64_t slots) {
  row_blocks = std::max<int64_t>(row_blocks, 1);
  if (heads <= 1 || row_blocks * heads <= slots) return 1;
  for (int h = 2; h < heads; ++h)
    if (row_blocks * ((heads + h - 1) / h) <= slots) return h;
  return heads;
}

}  // namespace flashgate::cuda
