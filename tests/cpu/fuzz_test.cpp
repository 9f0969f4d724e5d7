// A bounded fuzz of the API boundary (SPEC §8): many small random, mostly invalid argument sets for all four
// ops; every call must succeed or throw flashgate::Error without changing a byte (see api_fuzz.h).
//   FLASHGATE_FUZZ_SECONDS  time budget (default 20)
//   FLASHGATE_SEED          the run's seed (printed), to repeat a run
//   FLASHGATE_FUZZ_CASE     one case's seed (printed with each failure), to repeat just that case
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <map>
#include <string>

#include <unistd.h>

#include "api_fuzz.h"

namespace fgtest {
namespace {

// The case under way, for the report of a crash (a signal handler may only write(2) it).
char g_case[96];
size_t g_case_len = 0;

void report_crash(int sig) {
  static const char head[] = "\nfuzz: fatal signal during case FLASHGATE_FUZZ_CASE=";
  (void)!write(2, head, sizeof head - 1);
  (void)!write(2, g_case, g_case_len);
  (void)!write(2, "\n", 1);
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

void set_current_case(uint64_t seed) {
  const int n = std::snprintf(g_case, sizeof g_case, "%llu", static_cast<unsigned long long>(seed));
  g_case_len = n > 0 ? static_cast<size_t>(n) : 0;
}

fuzz::CaseResult run_seeded_case(uint64_t case_seed) {
  set_current_case(case_seed);
  Rng rng(case_seed);
  fuzz::Choices choices([&rng] { return rng(); });
  return fuzz::run_any_case(choices);
}

struct OpStats {
  int64_t tried = 0, valid = 0;
};

TEST(ApiFuzz, EveryCallSucceedsOrThrowsFlashgateErrorWithoutWriting) {
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) std::signal(sig, report_crash);

  if (const char* one = std::getenv("FLASHGATE_FUZZ_CASE")) {
    const uint64_t case_seed = std::strtoull(one, nullptr, 10);
    const fuzz::CaseResult r = run_seeded_case(case_seed);
    std::cout << "fuzz case " << case_seed << ": " << r.op << " " << r.describe << " -> "
              << (r.valid ? "accepted" : "rejected") << "\n";
    EXPECT_EQ(r.failure, "") << r.op << ": " << r.describe;
    return;
  }

  double seconds = 20;
  if (const char* s = std::getenv("FLASHGATE_FUZZ_SECONDS")) seconds = std::atof(s);
  const uint64_t seed = flashgate::harness::fresh_seed();
  std::cout << "fuzz: seed " << seed << " (FLASHGATE_SEED repeats the run), " << seconds << " s\n";
  Rng master(seed);

  std::map<std::string, OpStats> stats;
  int failures = 0;
  const auto start = std::chrono::steady_clock::now();
  const auto deadline = start + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < deadline && failures < 10) {
    const uint64_t case_seed = master();
    const fuzz::CaseResult r = run_seeded_case(case_seed);
    OpStats& st = stats[r.op];
    ++st.tried;
    st.valid += r.valid;
    if (!r.failure.empty()) {
      ++failures;
      ADD_FAILURE() << r.op << ": " << r.failure << "\n  case: " << r.describe
                    << "\n  repeat it with FLASHGATE_FUZZ_CASE=" << case_seed;
    }
  }
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  int64_t tried = 0, valid = 0;
  for (const auto& [op, st] : stats) tried += st.tried, valid += st.valid;
  std::cout << "fuzz: " << tried << " inputs in " << took << " s, " << valid << " valid, " << tried - valid
            << " rejected\n";
  for (const auto& [op, st] : stats) {
    std::cout << "fuzz:   " << op << ": " << st.tried << " tried, " << st.valid << " valid\n";
    // The generator must reach both sides of the boundary for every op, or the fuzz proves little.
    if (st.tried >= 400) {
      EXPECT_GT(st.valid, 0) << op << ": no valid input generated";
      EXPECT_LT(st.valid, st.tried) << op << ": no invalid input generated";
    }
  }
  testing::Test::RecordProperty("fuzz_inputs", std::to_string(tried));
  testing::Test::RecordProperty("fuzz_valid", std::to_string(valid));
}

}  // namespace
}  // namespace fgtest
