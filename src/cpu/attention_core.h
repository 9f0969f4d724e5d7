// The pieces all four ops share (SPEC §3-§6): which keys a query sees, the score of a pair with its gate
// term, the softmax with an optional sink, and the blocked score/probability computation over a slab of
// keys. Forward, decode and paged differ only in where queries and keys come from (positions counted from
// the start of the sequence); the backward reuses the probabilities.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "api/problem.h"

namespace flashgate::cpu {

// Visibility and score of a (query position p, key position j) pair.
struct ScoreRule {
  double scale = 1;
  int64_t window = detail::kNoWindow;
  double gate_scale = 1;  // factor of the gate term: 1, or the softmax scale for decode's gate_scale

  // Visible keys of the query at p are [first_key(p), end_key(p)): j <= p and p - j < window (when set);
  // window 0 leaves none.
  int64_t first_key(int64_t p) const { return window < 0 ? 0 : std::max<int64_t>(0, p - window + 1); }
  int64_t end_key(int64_t p) const { return std::max(p + 1, first_key(p)); }

  // `gate_q`/`gate_k`: the cumulative gate Gc at the two positions (0 without a gate).
  double score(double dot, double gate_q, double gate_k) const { return scale * dot + gate_scale * (gate_q - gate_k); }
};

// The softmax of one row with an optional sink, in place: the `n` visible scores s become their
// probabilities exp(s) / Z, where Z = sum of exp(s) + exp(sink) (the sink adds mass, no value). Returns
// lse = log Z, which is -inf when Z == 0 (no visible key, no sink).
double softmax_with_sink(double* s, int64_t n, const double* sink);

// Keys and values of one kv head over the positions [first, first + count) of a sequence, in fp64.
// `kt` (and `vt`, when asked for) hold the transposes, so products with them run along keys.
struct KeySlab {
  int64_t first = 0, count = 0, K = 0, V = 0;
  std::vector<double> k, v, kt, vt;

  void resize(int64_t first_pos, int64_t n, int64_t key_dim, int64_t value_dim);
  double* key_row(int64_t j) { return k.data() + j * K; }
  double* value_row(int64_t j) { return v.data() + j * V; }
  // Fills kt (and vt when `values_too`) from k and v once the rows are loaded.
  void finish(bool values_too);
};

// Query rows of one query head: q [rows][K] at increasing positions, with Gc at each position (or none).
struct QueryRows {
  int64_t rows = 0;
  const double* q = nullptr;
  const int64_t* pos = nullptr;
  const double* gate = nullptr;
};

// What a head adds to every score and softmax row beyond q and k.
struct HeadTerms {
  const double* key_gate = nullptr;  // Gc at slab key j is key_gate[j] (nullptr: no gate)
  const double* sink = nullptr;      // the head's sink logit (nullptr: no sink)
};

// Probabilities of a block of query rows against a slab: P[r][j] = exp(s[r][j] - lse[r]) over each row's
// visible keys, exactly 0 elsewhere, for the slab columns [col0, col0 + width) (the union of the rows'
// visible keys). Products with P (and with dS, which has the same zeros) then run over that rectangle.
class ProbabilityBlock {
 public:
  static constexpr int64_t kMaxRows = 36;  // rows per block: a multiple of the multiply-add's row tile (6)

  void compute(const ScoreRule& rule, const QueryRows& rows, const KeySlab& slab, const HeadTerms& head);

  int64_t rows() const { return rows_; }
  int64_t col0() const { return col0_; }
  int64_t width() const { return width_; }
  // Slab columns [lo(r), hi(r)) are row r's visible keys.
  int64_t lo(int64_t r) const { return lo_[r]; }
  int64_t hi(int64_t r) const { return hi_[r]; }
  double lse(int64_t r) const { return lse_[r]; }
  // P as a rows x width matrix (leading dimension width); element (r, j - col0) is slab column j.
  double* data() { return p_.data(); }
  const double* data() const { return p_.data(); }

 private:
  int64_t rows_ = 0, col0_ = 0, width_ = 0;
  std::vector<int64_t> lo_, hi_;
  std::vector<double> lse_, p_;
};

// Softmax attention of query rows of one head over a slab (forward, decode and paged):
// out [rows][V] = P v, lse [rows]; rows without a visible key give out = 0.
void attend(const ScoreRule& rule, const QueryRows& rows, const KeySlab& slab, const HeadTerms& head, double* out,
            double* lse);

// Inclusive prefix sum of value(0..n-1): the cumulative gate Gc of one head of one sequence.
template <class ValueAt>
std::vector<double> inclusive_prefix_sum(int64_t n, ValueAt value) {
  std::vector<double> c(static_cast<size_t>(n));
  double acc = 0;
  for (int64_t t = 0; t < n; ++t) c[t] = acc += value(t);
  return c;
}

}  // namespace flashgate::cpu
