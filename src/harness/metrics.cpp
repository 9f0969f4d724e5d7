#include "harness/metrics.h"

#include <cmath>
#include <limits>

namespace flashgate::harness {

double relative_rms(const std::vector<double>& out, const std::vector<double>& ref, double floor) {
  if (out.size() != ref.size()) return std::numeric_limits<double>::infinity();
  double err = 0, norm = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    const double o = out[i], r = ref[i];
    if (std::isnan(o) || std::isnan(r)) return std::numeric_limits<double>::infinity();
    if (std::isinf(r) || std::isinf(o)) {
      if (o != r) return std::numeric_limits<double>::infinity();
      continue;
    }
    err += (o - r) * (o - r);
    norm += r * r;
  }
  const double n = static_cast<double>(std::max<size_t>(out.size(), 1));
  if (norm == 0 && floor <= 0) return std::sqrt(err / n);
  return std::sqrt(err / n) / std::max(std::sqrt(norm / n), floor);
}

double output_bias(const std::vector<double>& out, const std::vector<double>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < out.size() && i < ref.size(); ++i) {
    if (!std::isfinite(ref[i])) continue;
    num += (out[i] - ref[i]) * ref[i];
    den += ref[i] * ref[i];
  }
  return den == 0 ? 0 : num / den;
}

bool no_nan(const std::vector<double>& v) {
  for (double x : v)
    if (std::isnan(x)) return false;
  return true;
}

}  // namespace flashgate::harness
