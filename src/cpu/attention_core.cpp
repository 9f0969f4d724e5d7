#include "cpu/attention_core.h"

#include <cmath>
#include <limits>

#include "cpu/dense_kernels.h"

namespace flashgate::cpu {

// Terms below e^-600 of a row's largest are set to 0: no fp64 sum can see them, and left to underflow into
// subnormals (the gate drives far keys' scores far down) they slow every later product a hundredfold.
constexpr double kNegligibleExponent = -600.0;

double softmax_with_sink(double* s, int64_t n, const double* sink) {
  double m = sink ? *sink : -std::numeric_limits<double>::infinity();
  for (int64_t j = 0; j < n; ++j) m = std::max(m, s[j]);
  if (m == -std::numeric_limits<double>::infinity()) return m;  // nothing carries mass
  auto shifted_exp = [m](double x) { return x - m < kNegligibleExponent ? 0.0 : std::exp(x - m); };
  double z = sink ? shifted_exp(*sink) : 0.0;  // shifted by the row max: no overflow
  for (int64_t j = 0; j < n; ++j) z += s[j] = shifted_exp(s[j]);
  for (int64_t j = 0; j < n; ++j) s[j] /= z;
  return m + std::log(z);
}

void KeySlab::resize(int64_t first_pos, int64_t n, int64_t key_dim, int64_t value_dim) {
  first = first_pos, count = n, K = key_dim, V = value_dim;
  k.assign(static_cast<size_t>(n * K), 0.0);
  v.assign(static_cast<size_t>(n * V), 0.0);
  kt.clear();
  vt.clear();
}

void KeySlab::finish(bool values_too) {
  kt.resize(k.size());
  transpose(k.data(), count, K, kt.data());
  if (values_too) {
    vt.resize(v.size());
    transpose(v.data(), count, V, vt.data());
  }
}

void ProbabilityBlock::compute(const ScoreRule& rule, const QueryRows& rows, const KeySlab& slab,
                               const HeadTerms& head) {
  rows_ = rows.rows;
  lo_.resize(rows_);
  hi_.resize(rows_);
  lse_.resize(rows_);
  int64_t first_col = slab.count, end_col = 0;
  for (int64_t r = 0; r < rows_; ++r) {
    const int64_t p = rows.pos[r];
    lo_[r] = std::clamp<int64_t>(rule.first_key(p) - slab.first, 0, slab.count);
    hi_[r] = std::clamp<int64_t>(rule.end_key(p) - slab.first, lo_[r], slab.count);
    if (lo_[r] < hi_[r]) first_col = std::min(first_col, lo_[r]), end_col = std::max(end_col, hi_[r]);
  }
  col0_ = end_col > first_col ? first_col : 0;
  width_ = end_col > first_col ? end_col - first_col : 0;
  p_.assign(static_cast<size_t>(rows_ * width_), 0.0);

  // q.k over the whole rectangle, then each row keeps its visible keys only.
  multiply_add(rows_, width_, slab.K, rows.q, slab.K, 1, slab.kt.data() + col0_, slab.count, p_.data(), width_);
  for (int64_t r = 0; r < rows_; ++r) {
    double* s = p_.data() + r * width_;  // s[j - col0] is slab column j
    const double gate_q = rows.gate ? rows.gate[r] : 0.0;
    for (int64_t j = col0_; j < col0_ + width_; ++j)
      if (j < lo_[r] || j >= hi_[r]) s[j - col0_] = 0;
    for (int64_t j = lo_[r]; j < hi_[r]; ++j)
      s[j - col0_] = rule.score(s[j - col0_], gate_q, head.key_gate ? head.key_gate[j] : 0.0);
    lse_[r] = softmax_with_sink(hi_[r] > lo_[r] ? s + (lo_[r] - col0_) : s, hi_[r] - lo_[r], head.sink);
  }
}

void attend(const ScoreRule& rule, const QueryRows& rows, const KeySlab& slab, const HeadTerms& head, double* out,
            double* lse) {
  ProbabilityBlock pb;
  std::fill(out, out + rows.rows * slab.V, 0.0);
  for (int64_t r0 = 0; r0 < rows.rows; r0 += ProbabilityBlock::kMaxRows) {
    QueryRows block = rows;
    block.rows = std::min(ProbabilityBlock::kMaxRows, rows.rows - r0);
    block.q = rows.q + r0 * slab.K;
    block.pos = rows.pos + r0;
    block.gate = rows.gate ? rows.gate + r0 : nullptr;
    pb.compute(rule, block, slab, head);
    // o = P v over the block's keys; the sink adds mass to Z only, no value.
    multiply_add(pb.rows(), slab.V, pb.width(), pb.data(), pb.width(), 1, slab.v.data() + pb.col0() * slab.V, slab.V,
                 out + r0 * slab.V, slab.V);
    for (int64_t r = 0; r < block.rows; ++r) lse[r0 + r] = pb.lse(r);
  }
}

}  // namespace flashgate::cpu
