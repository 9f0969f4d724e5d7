// What the GPU test files share: a Launch on one backend, the seed note of a failure, and the two halves of
// a comparison (the fp64 reference on the host, the cuda backend on a device copy of the same inputs).
#pragma once

#include <cstdint>
#include <cstdlib>
#include <string>

#include "flashgate/flashgate.h"
#include "harness/owned_tensor.h"

namespace fgtest {

inline flashgate::Launch on(flashgate::Backend b) {
  flashgate::Launch l;
  l.backend = b;
  return l;
}

// "<case> (seed N, FLASHGATE_SEED replays it)": every failure names the inputs it saw.
template <class Config>
std::string seed_note(uint64_t seed, const Config& cfg) {
  return cfg.describe() + " (seed " + std::to_string(seed) + ", FLASHGATE_SEED replays it)";
}

// Sets an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) { setenv(name, value.c_str(), 1); }
  ~ScopedEnv() { unsetenv(name_); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
};

// The serving kernels' forced split count, pipeline depth and kv heads per CTA, for one scope.
struct ForcedSplits : ScopedEnv {
  explicit ForcedSplits(int n) : ScopedEnv("FLASHGATE_NUM_SPLITS", std::to_string(n)) {}
};
struct ForcedStages : ScopedEnv {
  explicit ForcedStages(int n) : ScopedEnv("FLASHGATE_SERVING_STAGES", std::to_string(n)) {}
};
struct ForcedHeadsPerCta : ScopedEnv {
  explicit ForcedHeadsPerCta(int n) : ScopedEnv("FLASHGATE_HEADS_PER_CTA", std::to_string(n)) {}
};
// FLASHGATE_SERVING_ROWS=16: the 16-row layout where the planner would take an 8-row tile (keys as M).
struct ForcedWideRows : ScopedEnv {
  ForcedWideRows() : ScopedEnv("FLASHGATE_SERVING_ROWS", "16") {}
};
// All three at once (0: the planner's choice), with a note for SCOPED_TRACE naming the forced ones.
struct ForcedServingPlan {
  ForcedServingPlan(int heads_per_cta, int stages, int splits)
      : heads(heads_per_cta), depth(stages), slices(splits),
        note((heads_per_cta ? "heads per CTA " + std::to_string(heads_per_cta) + ", " : std::string()) + "stages " +
             std::to_string(stages) + ", splits " + std::to_string(splits)) {}
  ForcedHeadsPerCta heads;
  ForcedStages depth;
  ForcedSplits slices;
  std::string note;
};

// `o` of the fp64 reference: `op(args, launch)` on the cpu backend over a float64 copy of `host`.
template <class Case, class Op>
flashgate::harness::OwnedTensor fp64_output(const Case& host, Op op) {
  Case ref = host.to_f64();
  op(ref.args(), on(flashgate::Backend::cpu));
  return ref.o;
}

// `o` of the cuda backend on a device copy of `host` (outputs poisoned first), copied back to the host.
template <class Case, class Op>
flashgate::harness::OwnedTensor gpu_output(const Case& host, Op op) {
  Case dev = host.to(flashgate::Device::cuda);
  dev.poison_outputs();
  op(dev.args(), on(flashgate::Backend::cuda));
  flashgate::harness::device_synchronize();
  return dev.o.to(flashgate::Device::cpu);
}

// A case drawn from `seed` (its host inputs) and its fp64 reference output.
template <class Case>
struct ReferenceCase {
  Case host;
  flashgate::harness::OwnedTensor o;  // fp64
};

template <class Case, class Config, class Op>
ReferenceCase<Case> reference_case(const Config& cfg, uint64_t seed, Op op) {
  flashgate::harness::Rng rng(seed);
  ReferenceCase<Case> r{Case::random(cfg, rng), {}};
  r.o = fp64_output(r.host, op);
  return r;
}

}  // namespace fgtest
