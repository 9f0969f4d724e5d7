// `flashgate run`: one op on fresh random inputs, timed, and checked against the fp64 CPU reference.
#pragma once

#include "options.h"

namespace flashgate::cli {

// Returns the process exit code: 0 when every output is within tolerance, 1 otherwise.
int run_op(const RunOptions& options);

}  // namespace flashgate::cli
