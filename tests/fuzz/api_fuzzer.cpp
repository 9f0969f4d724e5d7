// libFuzzer driver of the API fuzz (tests/cpu/api_fuzz.h): the fuzzer's bytes make every decision (op, base
// case, mutations), so coverage guidance steers them. Build (clang only, opt-in):
//   cmake -S . -B build-fuzz -G Ninja -DFLASHGATE_CUDA=OFF -DFLASHGATE_LIBFUZZER=ON \
//         -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_CXX_FLAGS="-fsanitize=fuzzer-no-link,address,undefined"
//   ninja -C build-fuzz flashgate_api_fuzzer && ./build-fuzz/tests/flashgate_api_fuzzer -max_total_time=60
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "api_fuzz.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  size_t pos = 0;
  // Two bytes per decision (every choice here is among fewer than 65536 options); zeros once exhausted.
  fgtest::fuzz::Choices choices([&]() -> uint64_t {
    uint64_t v = 0;
    for (int i = 0; i < 2; ++i) v = (v << 8) | (pos < size ? data[pos++] : 0);
    return v;
  });
  const fgtest::fuzz::CaseResult r = fgtest::fuzz::run_any_case(choices);
  if (!r.failure.empty()) {
    std::fprintf(stderr, "%s: %s\n  case: %s\n", r.op, r.failure.c_str(), r.describe.c_str());
    std::abort();
  }
  return 0;
}
