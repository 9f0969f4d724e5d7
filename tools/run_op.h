// `flashgate run`: one op on fresh random inputs, timed, and checked against the fp64 CPU reference.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "options.h"

namespace flashgate::cli {

struct RunResult {
  std::string problem;      // the case, described
  double median_ms = 0;
  double rate = 0;          // TFLOP/s (forward/backward) or GB/s (decode/paged)
  const char* unit = "";
  std::vector<std::pair<std::string, double>> errors;  // output -> relative RMS vs the fp64 reference
  double tolerance = 0.005;
  bool checked = false;
  bool passed() const;
};

// Runs one op as the options say; prints a report unless `quiet`.
RunResult execute(const RunOptions& options, bool quiet = false);

// `flashgate run`: returns the process exit code, 0 when every output is within tolerance, 1 otherwise.
int run_op(const RunOptions& options);

}  // namespace flashgate::cli
