// `flashgate bench`: the benchmark rows of bench/rows.txt on flashgate alone (the C++ path for users without
// Python; bench/run.py compares against the peers).
#pragma once

#include <string>
#include <vector>

namespace flashgate::cli {

int run_bench(const std::vector<std::string>& args);

}  // namespace flashgate::cli
