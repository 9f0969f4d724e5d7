// The backward's dq accumulator layout (dq_acc_offset / dq_row in src/cuda/common/backward_params.h) on
// the CPU: every (head, sequence, row, column) of a dense or packed problem, including the padding rows of
// each sequence's last 16-row group, has its own float inside the buffer, and a warp's m16n8 accumulator
// fragment is 128 consecutive floats, lane l's four values at 4 l .. 4 l + 3 (what add_dq_fragment adds with
// one 16-byte reduction per lane). Also the deterministic Hopper backward's order counters (dq_order_index):
// one counter of its own per (head, sequence, row block) for both query tile heights, and the Hopper dK/dV kernels'
// item order (key_item). Fresh random lengths.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "cuda/common/backward_params.h"
#include "harness/owned_tensor.h"

namespace {

using flashgate::cuda::AttentionParams;
using flashgate::cuda::bwd::dq_acc_offset;
using flashgate::cuda::bwd::dq_acc_rows_per_head;
using flashgate::cuda::bwd::dq_order_blocks;
using flashgate::cuda::bwd::dq_order_index;
using flashgate::cuda::bwd::dq_row;
using flashgate::cuda::bwd::key_item;

struct Sequence {
  int64_t batch, start;
  int len;
};

// One sequence of a.T tokens per batch entry.
std::vector<Sequence> dense_sequences(const AttentionParams& a) {
  std::vector<Sequence> seqs;
  for (int64_t b = 0; b < a.B; ++b) seqs.push_back({b, 0, static_cast<int>(a.T)});
  return seqs;
}

// 1..max_segments packed segments of up to max_len tokens, a quarter of them empty; sets a.T and a.num_seqs.
std::vector<Sequence> packed_sequences(std::mt19937_64& rng, AttentionParams& a, int max_segments, int max_len) {
  std::vector<Sequence> seqs;
  int64_t t = 0;
  const int n = 1 + static_cast<int>(rng() % max_segments);
  for (int i = 0; i < n; ++i) {
    const int len = rng() % 4 == 0 ? 0 : 1 + static_cast<int>(rng() % max_len);
    seqs.push_back({0, t, len});
    t += len;
  }
  a.T = t, a.num_seqs = n;
  return seqs;
}

// Marks every float that the (padded) rows of every sequence and head map to; fails on a collision or an
// index outside the buffer.
void check_distinct(const AttentionParams& a, const std::vector<Sequence>& seqs, int K16) {
  const int64_t floats = a.B * a.HQ * dq_acc_rows_per_head(a) * K16;
  std::vector<uint8_t> used(static_cast<size_t>(floats), 0);
  for (int64_t h = 0; h < a.HQ; ++h)
    for (size_t n = 0; n < seqs.size(); ++n) {
      const Sequence& s = seqs[n];
      const int64_t row0 = dq_row(a, s.batch, h, static_cast<int64_t>(n), s.start);
      ASSERT_EQ(row0 % 16, 0) << "sequence " << n << " head " << h;
      const int padded = (s.len + 15) / 16 * 16;
      for (int i = 0; i < padded; ++i)
        for (int d = 0; d < K16; ++d) {
          const int64_t at = dq_acc_offset(row0, i, d, K16);
          ASSERT_GE(at, 0);
          ASSERT_LT(at, floats) << "sequence " << n << " row " << i << " column " << d;
          ASSERT_EQ(used[at], 0) << "sequence " << n << " head " << h << " row " << i << " column " << d;
          used[at] = 1;
        }
    }
}

TEST(DqAccLayout, DenseRowsAreDistinct) {
  const uint64_t seed = flashgate::harness::fresh_seed();
  std::mt19937_64 rng(seed);
  AttentionParams a;
  a.B = 3, a.HQ = 2, a.T = 1 + static_cast<int64_t>(rng() % 100), a.num_seqs = a.B;
  SCOPED_TRACE("seed " + std::to_string(seed) + ", T " + std::to_string(a.T));
  check_distinct(a, dense_sequences(a), 48);
}

TEST(DqAccLayout, PackedRowsAreDistinctAndGroupsStayClear) {
  const uint64_t seed = flashgate::harness::fresh_seed();
  std::mt19937_64 rng(seed);
  AttentionParams a;
  a.packed = true, a.B = 1, a.HQ = 3;
  const std::vector<Sequence> seqs = packed_sequences(rng, a, 24, 70);
  SCOPED_TRACE("seed " + std::to_string(seed) + ", segments " + std::to_string(seqs.size()) + ", T " +
               std::to_string(a.T));
  check_distinct(a, seqs, 32);
}

// Every (head, sequence, `rows`-row block) of the sequences gets a counter of its own inside B * HQ * blocks.
void check_order_counters(const AttentionParams& a, const std::vector<Sequence>& seqs, int rows) {
  const int64_t counters = a.B * a.HQ * dq_order_blocks(a, rows);
  std::vector<uint8_t> used(static_cast<size_t>(counters), 0);
  for (int64_t h = 0; h < a.HQ; ++h)
    for (size_t n = 0; n < seqs.size(); ++n) {
      const Sequence& s = seqs[n];
      for (int i = 0; i < s.len; i += rows) {
        const int64_t at = dq_order_index(a, s.batch, h, static_cast<int64_t>(n), s.start, i, rows);
        ASSERT_GE(at, 0);
        ASSERT_LT(at, counters) << "rows " << rows << " sequence " << n << " block at " << i;
        ASSERT_EQ(used[at], 0) << "rows " << rows << " sequence " << n << " head " << h << " block at " << i;
        used[at] = 1;
      }
    }
}

TEST(DqOrderCounters, DenseAndPackedBlocksAreDistinct) {
  const uint64_t seed = flashgate::harness::fresh_seed();
  std::mt19937_64 rng(seed);
  SCOPED_TRACE("seed " + std::to_string(seed));
  AttentionParams dense;
  dense.B = 3, dense.HQ = 2, dense.T = 1 + static_cast<int64_t>(rng() % 500), dense.num_seqs = dense.B;
  const std::vector<Sequence> dense_seqs = dense_sequences(dense);
  AttentionParams packed;
  packed.packed = true, packed.B = 1, packed.HQ = 3;
  const std::vector<Sequence> packed_seqs = packed_sequences(rng, packed, 40, 300);
  for (int rows : {64, 128}) {
    check_order_counters(dense, dense_seqs, rows);
    check_order_counters(packed, packed_seqs, rows);
  }
}

TEST(DqAccLayout, FragmentsAreConsecutive) {
  const int K16 = 64;
  const int64_t row0 = 48;
  for (int i0 = 0; i0 < 64; i0 += 16)
    for (int col = 0; col < K16; col += 8) {
      const int64_t base = dq_acc_offset(row0, i0, col, K16);
      for (int lane = 0; lane < 32; ++lane)
        for (int e = 0; e < 4; ++e) {
          const int g = lane / 4, c = lane % 4;  // fragment element e: row g + 8 (e / 2), column 2c + e % 2
          EXPECT_EQ(dq_acc_offset(row0, i0 + g + 8 * (e / 2), col + 2 * c + e % 2, K16), base + 4 * lane + e)
              << "rows " << i0 << " columns " << col << " lane " << lane << " element " << e;
        }
      // add_dq_fragment's steps: the next n8 tile 128 floats on, the next m16 tile 16 rows on.
      EXPECT_EQ(dq_acc_offset(row0, i0, col + 8, K16) - base, 128);
      EXPECT_EQ(dq_acc_offset(row0, i0 + 16, col, K16) - base, 16 * K16);
    }
}

// Every (kv head, key tile) pair is exactly one item; inside a group of kv_heads_together heads the tiles come in
// order with the heads taking turns, and a group's items all come before the next group's.
TEST(HopperKeyItems, EveryPairOnceGroupByGroup) {
  const uint64_t seed = flashgate::harness::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (int trial = 0; trial < 200; ++trial) {
    flashgate::cuda::bwd::BackwardParams p;
    p.a.H = 1 + static_cast<int64_t>(rng() % 12);
    p.kv_heads_together = 1 + static_cast<int>(rng() % p.a.H);
    const int64_t tiles = 1 + static_cast<int64_t>(rng() % 40);
    std::vector<uint8_t> seen(static_cast<size_t>(p.a.H * tiles), 0);
    int64_t last_group = 0, last_order = -1;
    for (int64_t item = 0; item < p.a.H * tiles; ++item) {
      const auto ki = key_item(p, tiles, item);
      const std::string at = "H " + std::to_string(p.a.H) + " together " + std::to_string(p.kv_heads_together) +
                             " tiles " + std::to_string(tiles) + " item " + std::to_string(item);
      ASSERT_GE(ki.hk, 0) << at;
      ASSERT_LT(ki.hk, p.a.H) << at;
      ASSERT_GE(ki.order, 0) << at;
      ASSERT_LT(ki.order, tiles) << at;
      ASSERT_EQ(seen[ki.hk * tiles + ki.order], 0) << at;
      seen[ki.hk * tiles + ki.order] = 1;
      const int64_t group = ki.hk / p.kv_heads_together;
      ASSERT_GE(group, last_group) << at;
      if (group != last_group) last_order = -1;
      ASSERT_GE(ki.order, last_order) << at;  // tiles in order inside a group
      last_group = group, last_order = ki.order;
    }
  }
}

}  // namespace
