// How many key slices (split-KV, flash-decoding) a serving launch takes: a host-side model of a memory-bound
// launch, kept apart from the launcher so that CPU tests can pin its choices.
#pragma once

#include <algorithm>
#include <cstdint>

namespace flashgate::portable {

inline constexpr int kMaxKeySlices = 128;           // within the merge kernel's limit (kMaxMergeSplits)
inline constexpr int64_t kMinKeysPerSlice = 512;
// A CTA's start and drain (launch, the first stages' latency, the epilogue) in stages of keys: ~9 us against
// ~31 us for 1024 keys in the H200 fit of version 4 (docs/perf-notes.md), about 4 stages of 64 keys.
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

}  // namespace flashgate::portable
