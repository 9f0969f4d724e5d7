// The SPEC §7 error metric and friends.
#pragma once

#include <vector>

namespace flashgate::harness {

// rms(out - ref) / rms(ref). Elements where both are the same infinity (lse of empty rows) count as equal;
// any NaN in `out`, or an infinity that `ref` does not have, gives +infinity (a failure).
// The denominator is max(rms(ref), floor): SPEC §7's floor, for a gradient whose true value nearly vanishes. When
// ref is all zero and there is no floor, returns rms(out) (so an exact zero output scores 0).
double relative_rms(const std::vector<double>& out, const std::vector<double>& ref, double floor = 0);

// sum((out - ref) * ref) / sum(ref * ref): systematic scaling error (SPEC §6, fp8 per-token V scales).
double output_bias(const std::vector<double>& out, const std::vector<double>& ref);

// True when no element is NaN.
bool no_nan(const std::vector<double>& v);

}  // namespace flashgate::harness
