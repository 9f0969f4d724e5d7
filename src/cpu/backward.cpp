// attention_backward on the CPU (SPEC §4). Work items are (sequence, kv head): each owns the dk/dv rows of
// its kv head in its sequence, so the sums over the query heads of a group and over query rows need no
// atomics, and the result is the same bit for bit run to run (the deterministic option holds trivially).
//
// Decision: the given o and lse are caches for the GPU kernels; the reference ignores them and recomputes
// the scores, lse and probabilities in fp64 from q, k, v (+ g, sink). A gradient check built on the
// reference must not inherit a rounded or wrong forward result, and D = sum_j P dP is then the exact
// expectation that SPEC §4 asks the sink gradient to use.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "cpu/attention_core.h"
#include "cpu/dense_kernels.h"
#include "cpu/host_tensor.h"
#include "cpu/parallel.h"
#include "cpu/reference.h"
#include "cpu/sequences.h"

namespace flashgate::cpu {
namespace {

// What one query head accumulates over a sequence besides dq: the gradient of the cumulative gate per
// position, and its share of the sink gradient.
struct HeadSums {
  std::vector<double> dgc;
  double dsink = 0;
};

// Gradients of one block of query rows (rows r0.. of the sequence) given its probabilities: dq of the rows
// (without the factor scale) into dq_block, and the block's shares of dk (without scale), dv, dGc and dsink.
void backward_block(const ProbabilityBlock& pb, int64_t r0, const double* q_block, const double* do_block,
                    const KeySlab& slab, const double* sink_logit, std::vector<double>& ds, double* dq_block,
                    double* dk_acc, double* dv_acc, HeadSums& sums) {
  const int64_t rows = pb.rows(), c0 = pb.col0(), w = pb.width(), K = slab.K, V = slab.V;
  const double* prob = pb.data();

  ds.assign(static_cast<size_t>(rows * w), 0.0);
  multiply_add(rows, w, V, do_block, V, 1, slab.vt.data() + c0, slab.count, ds.data(), w);  // dP = do.v
  for (int64_t r = 0; r < rows; ++r) {
    const double* pr = prob + r * w;  // pr[c], dsr[c]: key column c0 + c
    double* dsr = ds.data() + r * w;
    const int64_t lo = pb.lo(r) - c0, hi = pb.hi(r) - c0;
    double expectation = 0;  // D = sum_j P dP
    for (int64_t c = lo; c < hi; ++c) expectation += pr[c] * dsr[c];
    double row_sum = 0;
    for (int64_t c = 0; c < w; ++c)  // dS = P (dP - D), exactly 0 where P is
      row_sum += dsr[c] = (c >= lo && c < hi) ? pr[c] * (dsr[c] - expectation) : 0.0;
    sums.dgc[r0 + r] += row_sum;  // Gc[i] enters s[i, j] with +1
    if (sink_logit && pb.lo(r) < pb.hi(r)) sums.dsink -= std::exp(*sink_logit - pb.lse(r)) * expectation;
  }
  for (int64_t c = 0; c < w; ++c) {  // Gc[j] enters s[i, j] with -1
    double col_sum = 0;
    for (int64_t r = 0; r < rows; ++r) col_sum += ds[r * w + c];
    sums.dgc[c0 + c] -= col_sum;
  }

  std::fill(dq_block, dq_block + rows * K, 0.0);
  multiply_add(rows, K, w, ds.data(), w, 1, slab.k.data() + c0 * K, K, dq_block, K);  // dS k
  multiply_add(w, K, rows, ds.data(), 1, w, q_block, K, dk_acc + c0 * K, K);           // dS^T q
  multiply_add(w, V, rows, prob, 1, w, do_block, V, dv_acc + c0 * V, V);               // P^T do
}

}  // namespace

void attention_backward(const BackwardArgs& a, const detail::AttentionProblem& p) {
  const HostTensor q(a.q), k(a.k), v(a.v), dout(a.dout), g(a.g), sink(a.sink);
  const HostTensor dq(a.dq), dk(a.dk), dv(a.dv), dg(a.dg), dsink(a.dsink);
  const std::vector<Sequence> seqs = attention_sequences(a.cu_seqlens, p);
  const ScoreRule rule{p.scale, p.window, 1.0};
  const int64_t G = p.group(), K = p.K, V = p.V, HQ = p.HQ, num_seqs = static_cast<int64_t>(seqs.size());
  std::vector<double> dsink_parts(static_cast<size_t>(num_seqs * HQ), 0.0);  // [sequence][head], summed in order

  parallel_for(num_seqs * p.H, [&](int64_t job) {
    const int64_t n = job / p.H, hk = job % p.H;
    const Sequence& s = seqs[n];
    const int64_t L = s.length;
    if (L == 0) return;

    KeySlab slab;
    slab.resize(0, L, K, V);
    for (int64_t j = 0; j < L; ++j) {
      k.load_row(slab.key_row(j), K, s.batch, s.start + j, hk);
      v.load_row(slab.value_row(j), V, s.batch, s.start + j, hk);
    }
    slab.finish(/*values_too=*/true);  // vt for dP = do.v

    std::vector<double> dk_acc(L * K, 0.0), dv_acc(L * V, 0.0);
    std::vector<double> qrows(L * K), dorows(L * V), dq_block(ProbabilityBlock::kMaxRows * K), ds;
    std::vector<int64_t> pos(L);
    for (int64_t i = 0; i < L; ++i) pos[i] = i;
    ProbabilityBlock pb;

    for (int64_t h = hk * G; h < (hk + 1) * G; ++h) {
      for (int64_t i = 0; i < L; ++i) {
        q.load_row(&qrows[i * K], K, s.batch, s.start + i, h);
        dout.load_row(&dorows[i * V], V, s.batch, s.start + i, h);
      }
      std::vector<double> gc;
      if (p.has_gate) gc = inclusive_prefix_sum(L, [&](int64_t t) { return g.get(s.batch, s.start + t, h); });
      const double sink_logit = p.has_sink ? sink.get(h) : 0.0;
      const HeadTerms head{p.has_gate ? gc.data() : nullptr, p.has_sink ? &sink_logit : nullptr};
      HeadSums sums{std::vector<double>(L, 0.0), 0.0};

      for (int64_t r0 = 0; r0 < L; r0 += ProbabilityBlock::kMaxRows) {
        const int64_t rows = std::min(ProbabilityBlock::kMaxRows, L - r0);
        pb.compute(rule, QueryRows{rows, &qrows[r0 * K], &pos[r0], p.has_gate ? &gc[r0] : nullptr}, slab, head);
        backward_block(pb, r0, &qrows[r0 * K], &dorows[r0 * V], slab, head.sink, ds, dq_block.data(),
                       dk_acc.data(), dv_acc.data(), sums);
        for (int64_t r = 0; r < rows; ++r) {
          for (int64_t d = 0; d < K; ++d) dq_block[r * K + d] *= p.scale;
          dq.store_row(&dq_block[r * K], K, s.batch, s.start + r0 + r, h);
        }
      }

      if (p.has_gate) {  // Gc[t] = g[0] + ... + g[t], so dg[t] = sum over u >= t of dGc[u]
        double suffix = 0;
        for (int64_t t = L - 1; t >= 0; --t) dg.set(suffix += sums.dgc[t], s.batch, s.start + t, h);
      }
      dsink_parts[n * HQ + h] = sums.dsink;
    }

    for (double& x : dk_acc) x *= p.scale;
    for (int64_t j = 0; j < L; ++j) {
      dk.store_row(&dk_acc[j * K], K, s.batch, s.start + j, hk);
      dv.store_row(&dv_acc[j * V], V, s.batch, s.start + j, hk);
    }
  });

  if (p.has_sink)
    for (int64_t h = 0; h < HQ; ++h) {
      double total = 0;
      for (int64_t n = 0; n < num_seqs; ++n) total += dsink_parts[n * HQ + h];
      dsink.set(total, h);
    }
}

}  // namespace flashgate::cpu
