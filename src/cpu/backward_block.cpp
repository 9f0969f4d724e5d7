#include "cpu/backward_block.h"

#include <algorithm>
#include <cmath>

#include "cpu/dense_kernels.h"

namespace flashgate::cpu {

void backward_block(const ProbabilityBlock& pb, int64_t r0, const double* q_block, const double* do_block,
                    const KeySlab& slab, const double* sink_logit, const double* given_d, const double* row_lse,
                    std::vector<double>& ds, double* dq_block, double* dk_acc, double* dv_acc, HeadSums& sums) {
  const int64_t rows = pb.rows(), c0 = pb.col0(), w = pb.width(), K = slab.K, V = slab.V;
  const double* prob = pb.data();

  ds.assign(static_cast<size_t>(rows * w), 0.0);
  multiply_add(rows, w, V, do_block, V, 1, slab.vt.data() + c0, slab.count, ds.data(), w);  // dP = do.v
  for (int64_t r = 0; r < rows; ++r) {
    const double* pr = prob + r * w;  // pr[c], dsr[c]: key column c0 + c
    double* dsr = ds.data() + r * w;
    const int64_t lo = pb.lo(r) - c0, hi = pb.hi(r) - c0;
    double expectation = 0;  // D = sum_j P dP
    if (given_d) expectation = given_d[r];
    else
      for (int64_t c = lo; c < hi; ++c) expectation += pr[c] * dsr[c];
    double row_sum = 0;
    for (int64_t c = 0; c < w; ++c)  // dS = P (dP - D), exactly 0 where P is
      row_sum += dsr[c] = (c >= lo && c < hi) ? pr[c] * (dsr[c] - expectation) : 0.0;
    sums.dg_rows[r0 + r] += row_sum;  // Gc[i] enters s[i, j] with +1
    const double lse = row_lse ? row_lse[r] : pb.lse(r);
    if (sink_logit && (given_d || pb.lo(r) < pb.hi(r)) && lse != -INFINITY)
      sums.dsink -= std::exp(*sink_logit - lse) * expectation;
  }
  for (int64_t c = 0; c < w; ++c) {  // Gc[j] enters s[i, j] with -1
    double col_sum = 0;
    for (int64_t r = 0; r < rows; ++r) col_sum += ds[r * w + c];
    sums.dg_keys[c0 + c] -= col_sum;
  }

  std::fill(dq_block, dq_block + rows * K, 0.0);
  multiply_add(rows, K, w, ds.data(), w, 1, slab.k.data() + c0 * K, K, dq_block, K);  // dS k
  multiply_add(w, K, rows, ds.data(), 1, w, q_block, K, dk_acc + c0 * K, K);           // dS^T q
  multiply_add(w, V, rows, prob, 1, w, do_block, V, dv_acc + c0 * V, V);               // P^T do
}

}  // namespace flashgate::cpu
