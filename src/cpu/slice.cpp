// The slice ops on the CPU (context parallelism): a slice of queries at global positions q_start.. against a slice
// of keys at k_start.., with the cumulative gates at both given. The same pieces as the whole-sequence ops
// (attention_core, backward_block) with the positions and gates taken from the slices, and the backward's P
// normalised by the merged rows' lse instead of the slice's own.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "cpu/attention_core.h"
#include "cpu/backward_block.h"
#include "cpu/host_tensor.h"
#include "cpu/parallel.h"
#include "cpu/reference.h"

namespace flashgate::cpu {
namespace {

// One query head's rows of one sequence (batch b) and the key slice of its kv head, in fp64.
struct SliceHead {
  KeySlab slab;                      // keys at k_start.. (values transposed too where asked)
  std::vector<double> q, gate_q, gate_k;
  std::vector<int64_t> pos;          // the query rows' positions
  double sink = 0;
};

void load_keys(const HostTensor& k, const HostTensor& v, const detail::SliceProblem& p, int64_t b, int64_t hk,
               bool values_too, KeySlab& slab) {
  slab.resize(p.k_start, p.Tk, p.K, p.V);
  for (int64_t j = 0; j < p.Tk; ++j) {
    k.load_row(slab.key_row(j), p.K, b, j, hk);
    v.load_row(slab.value_row(j), p.V, b, j, hk);
  }
  slab.finish(values_too);
}

void load_head(const HostTensor& q, const HostTensor& gate_q, const HostTensor& gate_k, const HostTensor& sink,
               const detail::SliceProblem& p, int64_t b, int64_t h, SliceHead& s) {
  s.q.resize(static_cast<size_t>(p.Tq * p.K));
  s.pos.resize(static_cast<size_t>(p.Tq));
  for (int64_t i = 0; i < p.Tq; ++i) q.load_row(&s.q[i * p.K], p.K, b, i, h), s.pos[i] = p.q_start + i;
  if (p.has_gate) {
    s.gate_q.resize(static_cast<size_t>(p.Tq));
    s.gate_k.resize(static_cast<size_t>(p.Tk));
    for (int64_t i = 0; i < p.Tq; ++i) s.gate_q[i] = gate_q.get(b, i, h);
    for (int64_t j = 0; j < p.Tk; ++j) s.gate_k[j] = gate_k.get(b, j, h);
  }
  s.sink = p.has_sink ? sink.get(h) : 0.0;
}

}  // namespace

void attention_forward_slice(const SliceForwardArgs& a, const detail::SliceProblem& p) {
  const HostTensor q(a.q), k(a.k), v(a.v), o(a.o), lse(a.lse), gate_q(a.gate_q), gate_k(a.gate_k), sink(a.sink);
  const HostTensor o_residual(a.o_residual);
  const ScoreRule rule{p.scale, p.window, 1.0};
  const int64_t G = p.group();
  parallel_for(p.B * p.H, [&](int64_t job) {
    const int64_t b = job / p.H, hk = job % p.H;
    SliceHead s;
    load_keys(k, v, p, b, hk, /*values_too=*/false, s.slab);
    std::vector<double> out(static_cast<size_t>(p.Tq * p.V)), row_lse(static_cast<size_t>(p.Tq));
    for (int64_t h = hk * G; h < (hk + 1) * G; ++h) {
      load_head(q, gate_q, gate_k, sink, p, b, h, s);
      const QueryRows rows{p.Tq, s.q.data(), s.pos.data(), p.has_gate ? s.gate_q.data() : nullptr};
      const HeadTerms head{p.has_gate ? s.gate_k.data() : nullptr, p.has_sink ? &s.sink : nullptr};
      attend(rule, rows, s.slab, head, out.data(), row_lse.data());
      for (int64_t i = 0; i < p.Tq; ++i) {
        o.store_row(&out[i * p.V], p.V, b, i, h);
        lse.set(row_lse[i], b, i, h);
        if (o_residual.present()) store_residual_row(o, o_residual, &out[i * p.V], p.V, b, i, h);
      }
    }
  });
}

void attention_backward_slice(const SliceBackwardArgs& a, const detail::SliceProblem& p) {
  const HostTensor q(a.q), k(a.k), v(a.v), dout(a.dout), lse(a.lse), D(a.D), gate_q(a.gate_q), gate_k(a.gate_k),
      sink(a.sink);
  const HostTensor dq(a.dq), dk(a.dk), dv(a.dv), dgate_q(a.dgate_q), dgate_k(a.dgate_k), dsink(a.dsink);
  const ScoreRule rule{p.scale, p.window, 1.0};
  const int64_t G = p.group(), K = p.K, V = p.V, Tq = p.Tq, Tk = p.Tk;
  std::vector<double> dsink_parts(static_cast<size_t>(p.B * p.HQ), 0.0);  // [batch][head], summed in order

  parallel_for(p.B * p.H, [&](int64_t job) {
    const int64_t b = job / p.H, hk = job % p.H;
    SliceHead s;
    load_keys(k, v, p, b, hk, /*values_too=*/true, s.slab);  // vt for dP = do.v
    std::vector<double> dk_acc(static_cast<size_t>(Tk * K), 0.0), dv_acc(static_cast<size_t>(Tk * V), 0.0);
    std::vector<double> dorows(static_cast<size_t>(Tq * V)), row_lse(static_cast<size_t>(Tq)),
        row_d(static_cast<size_t>(Tq)), dq_block(static_cast<size_t>(ProbabilityBlock::kMaxRows * K)), ds;
    ProbabilityBlock pb;

    for (int64_t h = hk * G; h < (hk + 1) * G; ++h) {
      load_head(q, gate_q, gate_k, sink, p, b, h, s);
      for (int64_t i = 0; i < Tq; ++i) {
        dout.load_row(&dorows[i * V], V, b, i, h);
        row_lse[i] = lse.get(b, i, h), row_d[i] = D.get(b, i, h);
      }
      const HeadTerms head{p.has_gate ? s.gate_k.data() : nullptr, p.has_sink ? &s.sink : nullptr};
      std::vector<double> dg_rows(static_cast<size_t>(Tq), 0.0), dg_keys(static_cast<size_t>(Tk), 0.0);
      HeadSums sums{dg_rows.data(), dg_keys.data(), 0.0};

      for (int64_t r0 = 0; r0 < Tq; r0 += ProbabilityBlock::kMaxRows) {
        const int64_t rows = std::min(ProbabilityBlock::kMaxRows, Tq - r0);
        pb.compute(rule, QueryRows{rows, &s.q[r0 * K], &s.pos[r0], p.has_gate ? &s.gate_q[r0] : nullptr}, s.slab,
                   head);
        // P over the merged row: exp(s - lse) = the slice's own P times exp(own lse - merged lse).
        for (int64_t r = 0; r < rows; ++r) {
          if (pb.lse(r) == -INFINITY) continue;  // the slice gave the row no mass: its P is 0
          const double factor = std::exp(pb.lse(r) - row_lse[r0 + r]);
          double* pr = pb.data() + r * pb.width();
          for (int64_t c = 0; c < pb.width(); ++c) pr[c] *= factor;
        }
        backward_block(pb, r0, &s.q[r0 * K], &dorows[r0 * V], s.slab, head.sink, &row_d[r0], &row_lse[r0], ds,
                       dq_block.data(), dk_acc.data(), dv_acc.data(), sums);
        for (int64_t r = 0; r < rows; ++r) {
          for (int64_t d = 0; d < K; ++d) dq_block[r * K + d] *= p.scale;
          dq.store_row(&dq_block[r * K], K, b, r0 + r, h);
        }
      }
      if (p.has_gate) {
        for (int64_t i = 0; i < Tq; ++i) dgate_q.set(dg_rows[i], b, i, h);
        for (int64_t j = 0; j < Tk; ++j) dgate_k.set(dg_keys[j], b, j, h);
      }
      dsink_parts[b * p.HQ + h] = sums.dsink;
    }

    for (double& x : dk_acc) x *= p.scale;
    for (int64_t j = 0; j < Tk; ++j) {
      dk.store_row(&dk_acc[j * K], K, b, j, hk);
      dv.store_row(&dv_acc[j * V], V, b, j, hk);
    }
  });

  if (p.has_sink)
    for (int64_t h = 0; h < p.HQ; ++h) {
      double total = 0;
      for (int64_t b = 0; b < p.B; ++b) total += dsink_parts[b * p.HQ + h];
      dsink.set(total, h);
    }
}

}  // namespace flashgate::cpu
