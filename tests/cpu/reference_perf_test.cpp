// Perf smoke of the CPU reference (not a timed assertion): the GPU tests lean on the reference, which must
// do B2 T2048 HQ16 D128 bf16 forward+backward within about a minute on a 2-core machine.
// Skipped unless FLASHGATE_SLOW_TESTS=1; prints the time.
// Measured (Release, 2-core Xeon VM shared with other builds, gate + sink): 5.2 s on 2 threads (forward 2.3 s,
// backward 2.9 s), 7.3 s on 1 thread; about 11 CPU-seconds in all, 70% of it in the AVX2 multiply-add.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "cpu/parallel.h"
#include "flashgate/flashgate.h"
#include "harness/cases.h"

namespace {

using namespace flashgate;

bool slow_tests_enabled() {
  const char* env = std::getenv("FLASHGATE_SLOW_TESTS");
  return env && std::string(env) == "1";
}

TEST(ReferencePerf, B2T2048HQ16D128Bf16ForwardBackward) {
  if (!slow_tests_enabled()) GTEST_SKIP() << "perf smoke: set FLASHGATE_SLOW_TESTS=1 to run it";
  harness::AttentionConfig cfg;
  cfg.batch = 2, cfg.seqlen = 2048, cfg.heads = 16, cfg.kv_heads = 16, cfg.head_dim = 128, cfg.v_dim = 128;
  cfg.dtype = DType::bf16;
  cfg.gate = true, cfg.sink = true;
  const uint64_t seed = harness::fresh_seed();
  harness::Rng rng(seed);
  harness::AttentionCase c = harness::AttentionCase::random(cfg, rng);
  const Launch cpu{Backend::cpu};

  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  attention_forward(c.forward_args(), cpu);
  const auto t1 = clock::now();
  attention_backward(c.backward_args(), cpu);
  const auto t2 = clock::now();
  const double fwd = std::chrono::duration<double>(t1 - t0).count(), bwd = std::chrono::duration<double>(t2 - t1).count();
  std::printf("[perf] %s on %d threads: forward %.2f s, backward %.2f s, total %.2f s\n", cfg.describe().c_str(),
              cpu::cpu_thread_count(), fwd, bwd, fwd + bwd);
  RecordProperty("forward_s", std::to_string(fwd));
  RecordProperty("backward_s", std::to_string(bwd));
}

}  // namespace
