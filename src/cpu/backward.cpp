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
#include "cpu/backward_block.h"
#include "cpu/dense_kernels.h"
#include "cpu/host_tensor.h"
#include "cpu/parallel.h"
#include "cpu/reference.h"
#include "cpu/sequences.h"

namespace flashgate::cpu {

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
      std::vector<double> dgc(L, 0.0);
      HeadSums sums{dgc.data(), dgc.data(), 0.0};

      for (int64_t r0 = 0; r0 < L; r0 += ProbabilityBlock::kMaxRows) {
        const int64_t rows = std::min(ProbabilityBlock::kMaxRows, L - r0);
        pb.compute(rule, QueryRows{rows, &qrows[r0 * K], &pos[r0], p.has_gate ? &gc[r0] : nullptr}, slab, head);
        backward_block(pb, r0, &qrows[r0 * K], &dorows[r0 * V], slab, head.sink, nullptr, nullptr, ds,
                       dq_block.data(), dk_acc.data(), dv_acc.data(), sums);
        for (int64_t r = 0; r < rows; ++r) {
          for (int64_t d = 0; d < K; ++d) dq_block[r * K + d] *= p.scale;
          dq.store_row(&dq_block[r * K], K, s.batch, s.start + r0 + r, h);
        }
      }

      if (p.has_gate) {  // Gc[t] = g[0] + ... + g[t], so dg[t] = sum over u >= t of dGc[u]
        double suffix = 0;
        for (int64_t t = L - 1; t >= 0; --t) dg.set(suffix += dgc[t], s.batch, s.start + t, h);
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
