// The serving kernels' numbering of packed query tokens in row blocks (first_token_block, token_block_bound in
// src/cuda/common/serving_params.h): on random batches, every sequence's blocks get their own numbers below
// the host's bound, and the kernel's lookup (the last sequence whose first block is at most the number, then
// the token offset) finds each block's owner and no owner for the numbers left over.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "cuda/common/serving_params.h"

namespace flashgate::cuda {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Checks one batch of query lengths at tq tokens per block; returns the bound.
int64_t check_batch(const std::vector<int64_t>& lengths, int64_t tq) {
  const int64_t n_seqs = static_cast<int64_t>(lengths.size());
  std::vector<int64_t> cu(1, 0), first;
  for (int64_t len : lengths) cu.push_back(cu.back() + len);
  for (int64_t n = 0; n < n_seqs; ++n) first.push_back(first_token_block(n, cu[n], tq));
  const int64_t bound = token_block_bound(n_seqs, cu.back(), tq);
  std::vector<int64_t> owner(static_cast<size_t>(std::max<int64_t>(bound, 0)), -1);
  for (int64_t n = 0; n < n_seqs; ++n) {
    if (n > 0) EXPECT_LE(first[n - 1], first[n]) << "numbers must not decrease (the kernel searches them)";
    for (int64_t b = first[n]; b < first[n] + ceil_div(lengths[n], tq); ++b) {
      if (b < 0 || b >= bound) {
        ADD_FAILURE() << "block " << b << " of sequence " << n << " outside [0, " << bound << "), tq " << tq;
        return bound;
      }
      EXPECT_EQ(owner[b], -1) << "block " << b << " taken twice";
      owner[b] = n;
    }
  }
  for (int64_t vt = 0; vt < bound; ++vt) {  // resolve_row_block's rule (paged_work.cuh)
    int64_t lo = -1;
    for (int64_t n = 0; n < n_seqs; ++n)
      if (first[n] <= vt) lo = n;
    const bool has_rows = lo >= 0 && (vt - first[lo]) * tq < lengths[lo];
    EXPECT_EQ(has_rows ? lo : -1, owner[vt]) << "block " << vt;
  }
  return bound;
}

TEST(TokenBlocks, RandomBatches) {
  std::mt19937 rng(std::random_device{}());
  const int64_t tqs[] = {1, 2, 3, 4, 5, 8, 16};
  const int64_t lens[] = {0, 0, 1, 1, 1, 2, 3, 4, 5, 7, 16, 17, 33};
  for (int trial = 0; trial < 3000; ++trial) {
    std::vector<int64_t> lengths(1 + rng() % 12);
    for (auto& len : lengths) len = lens[rng() % (sizeof(lens) / sizeof(lens[0]))];
    check_batch(lengths, tqs[rng() % (sizeof(tqs) / sizeof(tqs[0]))]);
    if (HasFailure()) return;
  }
}

// The serving shapes: a decode batch needs no more numbers than sequences (the CTAs of every number have rows).
TEST(TokenBlocks, DecodeBatchesHaveNoGaps) {
  EXPECT_EQ(check_batch(std::vector<int64_t>(128, 1), 4), 128);  // GQA 32/8: 4 tokens per block
  EXPECT_EQ(check_batch(std::vector<int64_t>(1, 1), 4), 1);
  EXPECT_EQ(check_batch(std::vector<int64_t>(64, 1), 1), 64);
  EXPECT_EQ(check_batch(std::vector<int64_t>(3, 4), 4), 5);      // 3 x 4 verify: 3 blocks of rows in 5 numbers
  EXPECT_EQ(check_batch({0, 0, 1}, 4), 2);                        // empty sequences take at most one each
}

}  // namespace
}  // namespace flashgate::cuda
