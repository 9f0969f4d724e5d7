// decode on the CPU (SPEC §5): the query of sequence n sits at position L_n - 1 of its packed keys.
// Work items are (sequence, kv head).
#include <cstdint>
#include <vector>

#include "cpu/attention_core.h"
#include "cpu/host_tensor.h"
#include "cpu/parallel.h"
#include "cpu/reference.h"
#include "cpu/sequences.h"

namespace flashgate::cpu {

void decode(const DecodeArgs& a, const detail::DecodeProblem& p) {
  const HostTensor q(a.q), k(a.k), v(a.v), o(a.o), g(a.g), sink(a.sink);
  const std::vector<Sequence> seqs = segments(a.cu_seqlens);
  const ScoreRule rule{p.scale, p.window, p.gate_scale ? static_cast<double>(p.scale) : 1.0};
  const int64_t G = p.group(), K = p.K, V = p.V;

  parallel_for(p.N * p.H, [&](int64_t job) {
    const int64_t n = job / p.H, hk = job % p.H;
    const Sequence& s = seqs[n];
    std::vector<double> out(V, 0.0);
    if (s.length == 0) {  // nothing to attend to: o = 0, whatever the sink
      for (int64_t h = hk * G; h < (hk + 1) * G; ++h) o.store_row(out.data(), V, n, h);
      return;
    }
    const int64_t query_pos = s.length - 1, first = rule.first_key(query_pos);
    KeySlab slab;
    slab.resize(first, s.length - first, K, V);
    for (int64_t j = 0; j < slab.count; ++j) {
      k.load_row(slab.key_row(j), K, s.start + first + j, hk);
      v.load_row(slab.value_row(j), V, s.start + first + j, hk);
    }
    slab.finish(/*values_too=*/false);

    std::vector<double> qrow(K);
    for (int64_t h = hk * G; h < (hk + 1) * G; ++h) {
      q.load_row(qrow.data(), K, n, h);
      std::vector<double> gc;
      if (p.has_gate) gc = inclusive_prefix_sum(s.length, [&](int64_t t) { return g.get(s.start + t, h); });
      const double sink_logit = p.has_sink ? sink.get(h) : 0.0;
      const QueryRows query{1, qrow.data(), &query_pos, p.has_gate ? &gc[query_pos] : nullptr};
      const HeadTerms head{p.has_gate ? gc.data() + first : nullptr, p.has_sink ? &sink_logit : nullptr};
      double lse = 0;
      attend(rule, query, slab, head, out.data(), &lse);
      o.store_row(out.data(), V, n, h);
    }
  });
}

}  // namespace flashgate::cpu
