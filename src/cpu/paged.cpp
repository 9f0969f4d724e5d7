// paged_attention on the CPU (SPEC §6). Query t of sequence n sits at position seq_lens_k[n] - Lq + t;
// keys are gathered through the block table and dequantised (fp8 code times its scale) into fp64 once per
// work item, which is (sequence, kv head, chunk of queries). Only slots before seq_lens_k[n] are read, so
// whatever the unused slots, scales and table entries hold (NaN, -1) has no effect.
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

constexpr int64_t kQueriesPerJob = 128;

struct PagedJob {
  int64_t seq, kv_head, t0, t1;  // queries [t0, t1) of the sequence
};

// The multiplier of a cached element: 1, one scalar, or one per (block, kv head, slot).
class CacheScale {
 public:
  CacheScale(const Tensor& t, detail::ScaleMode mode) : t_(t), mode_(mode) {
    if (mode == detail::ScaleMode::per_tensor) scalar_ = t_.get();
  }
  double at(int64_t block, int64_t head, int64_t slot) const {
    return mode_ == detail::ScaleMode::per_token ? t_.get(block, head, slot) : scalar_;
  }

 private:
  HostTensor t_;
  detail::ScaleMode mode_;
  double scalar_ = 1.0;
};

}  // namespace

void paged_attention(const PagedArgs& a, const detail::PagedProblem& p) {
  const HostTensor q(a.q), k_cache(a.k_cache), v_cache(a.v_cache), table(a.block_table), lens(a.seq_lens_k);
  const HostTensor o(a.o), sink(a.sink);
  const CacheScale k_scale(a.k_scale, p.k_scale), v_scale(a.v_scale, p.v_scale);
  const std::vector<Sequence> queries = segments(a.cu_seqlens_q);
  const ScoreRule rule{p.scale, p.window, 1.0};
  const int64_t G = p.group(), K = p.K, V = p.V, BS = p.block_size;

  std::vector<PagedJob> jobs;
  for (int64_t n = 0; n < p.N; ++n)
    for (int64_t hk = 0; hk < p.H; ++hk)
      for (int64_t t0 = 0; t0 < queries[n].length; t0 += kQueriesPerJob)
        jobs.push_back({n, hk, t0, std::min(queries[n].length, t0 + kQueriesPerJob)});

  parallel_for(static_cast<int64_t>(jobs.size()), [&](int64_t job_index) {
    const PagedJob& job = jobs[job_index];
    const Sequence& qs = queries[job.seq];
    const int64_t context = lens.index(job.seq), offset = context - qs.length;  // position of query t: offset + t
    const int64_t rows = job.t1 - job.t0, first = rule.first_key(offset + job.t0), end = offset + job.t1;

    KeySlab slab;
    slab.resize(first, end - first, K, V);
    for (int64_t j = 0; j < slab.count; ++j) {
      const int64_t pos = first + j, block = table.index(job.seq, pos / BS), slot = pos % BS;
      double* krow = slab.key_row(j);
      double* vrow = slab.value_row(j);
      k_cache.load_row(krow, K, block, slot, job.kv_head);
      v_cache.load_row(vrow, V, block, slot, job.kv_head);
      const double ks = k_scale.at(block, job.kv_head, slot), vs = v_scale.at(block, job.kv_head, slot);
      for (int64_t d = 0; d < K; ++d) krow[d] *= ks;
      for (int64_t e = 0; e < V; ++e) vrow[e] *= vs;
    }
    slab.finish(/*values_too=*/false);

    std::vector<int64_t> pos(rows);
    for (int64_t r = 0; r < rows; ++r) pos[r] = offset + job.t0 + r;
    std::vector<double> qrows(rows * K), out(rows * V), lse(rows);
    for (int64_t h = job.kv_head * G; h < (job.kv_head + 1) * G; ++h) {
      for (int64_t r = 0; r < rows; ++r) q.load_row(&qrows[r * K], K, qs.start + job.t0 + r, h);
      const double sink_logit = p.has_sink ? sink.get(h) : 0.0;
      const QueryRows query{rows, qrows.data(), pos.data(), nullptr};
      const HeadTerms head{nullptr, p.has_sink ? &sink_logit : nullptr};
      attend(rule, query, slab, head, out.data(), lse.data());
      for (int64_t r = 0; r < rows; ++r) o.store_row(&out[r * V], V, qs.start + job.t0 + r, h);
    }
  });
}

}  // namespace flashgate::cpu
