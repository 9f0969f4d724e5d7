// The gradients of one block of query rows against a key slab given its probabilities: the piece the backward and
// the slice backward share (SPEC §4).
#pragma once

#include <cstdint>
#include <vector>

#include "cpu/attention_core.h"

namespace flashgate::cpu {

// What a query head accumulates besides dq, dk and dv: the gradient of the cumulative gate at the query rows
// (dg_rows[i] for the head's row i) and at the slab's keys (dg_keys[j] for slab key j; the same array as dg_rows
// where queries and keys are one sequence's positions), and its share of the sink gradient.
struct HeadSums {
  double* dg_rows = nullptr;
  double* dg_keys = nullptr;
  double dsink = 0;
};

// Gradients of one block of query rows (rows r0.. of the head) given its probabilities P = exp(s - lse): dq of the
// rows (without the factor scale) into dq_block, and the block's shares of dk (without scale), dv, dGc and dsink.
// `given_d` (the block's rows) and `row_lse` (the block's rows): the rows' D and lse where they come from outside
// (a slice of merged rows); nullptr: D = sum_j P dP over the slab and the block's own lse.
void backward_block(const ProbabilityBlock& pb, int64_t r0, const double* q_block, const double* do_block,
                    const KeySlab& slab, const double* sink_logit, const double* given_d, const double* row_lse,
                    std::vector<double>& ds, double* dq_block, double* dk_acc, double* dv_acc, HeadSums& sums);

}  // namespace flashgate::cpu
