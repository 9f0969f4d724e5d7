// What the GPU test files share: the CUDA backends under test, a Launch on one backend, the seed note of a
// failure, and the two halves of a comparison (the fp64 reference on the host, a CUDA backend on a device copy
// of the same inputs).
#pragma once

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "cuda/host/overrides.h"
#include "flashgate/flashgate.h"
#include "harness/owned_tensor.h"

namespace fgtest {

inline flashgate::Launch on(flashgate::Backend b) {
  flashgate::Launch l;
  l.backend = b;
  return l;
}

// The CUDA backends a case runs on: each one built into this library that claims the arguments
// (backend_serves: the portable `cuda` backend claims every case; `hopper` the ones it serves on an sm_90a
// device). Matrix tests run every case on each, so one matrix covers every GPU generation.
template <class Args>
std::vector<flashgate::Backend> cuda_backends_for(const Args& args) {
  std::vector<flashgate::Backend> r;
  for (flashgate::Backend b : {flashgate::Backend::cuda, flashgate::Backend::hopper})
    if (flashgate::backend_serves(args, b)) r.push_back(b);
  return r;
}

inline std::string backend_note(flashgate::Backend b) { return std::string("backend ") + flashgate::backend_name(b); }

// "<case> (seed N, FLASHGATE_SEED replays it)": every failure names the inputs it saw.
template <class Config>
std::string seed_note(uint64_t seed, const Config& cfg) {
  return cfg.describe() + " (seed " + std::to_string(seed) + ", FLASHGATE_SEED replays it)";
}

// One forced serving choice (serving_overrides()) for one scope; the previous value comes back after.
template <class Field, Field flashgate::cuda::ServingOverrides::*kMember>
class ScopedOverride {
 public:
  explicit ScopedOverride(Field value) : saved_(flashgate::cuda::serving_overrides().*kMember) {
    flashgate::cuda::serving_overrides().*kMember = value;
  }
  ~ScopedOverride() { flashgate::cuda::serving_overrides().*kMember = saved_; }
  ScopedOverride(const ScopedOverride&) = delete;
  ScopedOverride& operator=(const ScopedOverride&) = delete;

 private:
  Field saved_;
};

// The serving kernels' forced split count, pipeline depth and kv heads per CTA, for one scope.
using ForcedSplits = ScopedOverride<int, &flashgate::cuda::ServingOverrides::num_splits>;
using ForcedStages = ScopedOverride<int, &flashgate::cuda::ServingOverrides::stages>;
using ForcedHeadsPerCta = ScopedOverride<int, &flashgate::cuda::ServingOverrides::heads_per_cta>;
// The 16-row layout where the planner would take an 8-row tile (keys as M).
struct ForcedWideRows : ScopedOverride<bool, &flashgate::cuda::ServingOverrides::wide_rows> {
  ForcedWideRows() : ScopedOverride(true) {}
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

// `o` of `backend` on a device copy of `host` (outputs poisoned first), copied back to the host.
template <class Case, class Op>
flashgate::harness::OwnedTensor gpu_output(const Case& host, Op op, flashgate::Backend backend) {
  Case dev = host.to(flashgate::Device::cuda);
  dev.poison_outputs();
  op(dev.args(), on(backend));
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
