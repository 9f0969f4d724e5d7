// attention_forward on the CPU (SPEC §3). Work items are (sequence, kv head, chunk of query rows): each
// loads the keys its rows can see once and serves all query heads of the group.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "cpu/attention_core.h"
#include "cpu/host_tensor.h"
#include "cpu/parallel.h"
#include "cpu/reference.h"
#include "cpu/sequences.h"

namespace flashgate::cpu {
namespace {

constexpr int64_t kRowsPerJob = 128;

struct ForwardJob {
  int64_t seq, kv_head, row0, row1;  // query rows [row0, row1) of the sequence
};

}  // namespace

void attention_forward(const ForwardArgs& a, const detail::AttentionProblem& p) {
  const HostTensor q(a.q), k(a.k), v(a.v), o(a.o), lse(a.lse), o_residual(a.o_residual), g(a.g), sink(a.sink);
  const std::vector<Sequence> seqs = attention_sequences(a.cu_seqlens, p);
  const ScoreRule rule{p.scale, p.window, 1.0};
  const int64_t G = p.group(), K = p.K, V = p.V;

  std::vector<ForwardJob> jobs;
  for (int64_t n = 0; n < static_cast<int64_t>(seqs.size()); ++n)
    for (int64_t hk = 0; hk < p.H; ++hk)
      for (int64_t r0 = 0; r0 < seqs[n].length; r0 += kRowsPerJob)
        jobs.push_back({n, hk, r0, std::min(seqs[n].length, r0 + kRowsPerJob)});
  // Causal chunks grow with their position: hand out the long ones first for an even finish.
  auto keys_of = [&](const ForwardJob& j) { return j.row1 - rule.first_key(j.row0); };
  std::stable_sort(jobs.begin(), jobs.end(),
                   [&](const ForwardJob& x, const ForwardJob& y) { return keys_of(x) > keys_of(y); });

  parallel_for(static_cast<int64_t>(jobs.size()), [&](int64_t job_index) {
    const ForwardJob& job = jobs[job_index];
    const Sequence& s = seqs[job.seq];
    const int64_t first = rule.first_key(job.row0), rows = job.row1 - job.row0;

    KeySlab slab;
    slab.resize(first, job.row1 - first, K, V);
    for (int64_t j = 0; j < slab.count; ++j) {
      k.load_row(slab.key_row(j), K, s.batch, s.start + first + j, job.kv_head);
      v.load_row(slab.value_row(j), V, s.batch, s.start + first + j, job.kv_head);
    }
    slab.finish(/*values_too=*/false);

    std::vector<int64_t> pos(rows);
    for (int64_t r = 0; r < rows; ++r) pos[r] = job.row0 + r;
    std::vector<double> qrows(rows * K), out(rows * V), row_lse(rows);
    for (int64_t h = job.kv_head * G; h < (job.kv_head + 1) * G; ++h) {
      for (int64_t r = 0; r < rows; ++r) q.load_row(&qrows[r * K], K, s.batch, s.start + pos[r], h);
      std::vector<double> gc;  // Gc over [0, row1) of this head
      if (p.has_gate) gc = inclusive_prefix_sum(job.row1, [&](int64_t t) { return g.get(s.batch, s.start + t, h); });
      const double sink_logit = p.has_sink ? sink.get(h) : 0.0;

      const QueryRows query{rows, qrows.data(), pos.data(), p.has_gate ? gc.data() + job.row0 : nullptr};
      const HeadTerms head{p.has_gate ? gc.data() + first : nullptr, p.has_sink ? &sink_logit : nullptr};
      attend(rule, query, slab, head, out.data(), row_lse.data());

      for (int64_t r = 0; r < rows; ++r) {
        o.store_row(&out[r * V], V, s.batch, s.start + pos[r], h);
        if (p.has_lse) lse.set(row_lse[r], s.batch, s.start + pos[r], h);
        if (p.has_o_residual) store_residual_row(o, o_residual, &out[r * V], V, s.batch, s.start + pos[r], h);
      }
    }
  });
}

}  // namespace flashgate::cpu
