// The distance form of the visibility rule (what the forward's masked tiles evaluate) against visible(),
// for every query inside the sequence, every key, and windows none / 0 / 1 / small / past the sequence; and the slice
// pair's forms (rows shifted against their keys) against the rule on positions.
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "cuda/common/visibility.h"

namespace flashgate::cuda {
namespace {

TEST(Visibility, DistanceFormMatchesVisible) {
  const int len = 37;
  for (int window : {-1, 0, 1, 2, 5, 36, 37, 100}) {
    const unsigned bound = distance_bound(window);
    for (int i = 0; i < len; ++i)
      for (int j = 0; j < len + 8; ++j)
        ASSERT_EQ(visible_at_distance(i - j, bound), visible(i, j, len, window))
            << "i=" << i << " j=" << j << " window=" << window;
  }
}

TEST(Visibility, DistanceFormAtIntExtremes) {
  const unsigned none = distance_bound(-1);
  EXPECT_TRUE(visible_at_distance(0x7fffffff, none));
  EXPECT_FALSE(visible_at_distance(-1, none));
  EXPECT_FALSE(visible_at_distance(-0x7fffffff - 1, none));
  EXPECT_FALSE(visible_at_distance(-1, distance_bound(0x7fffffff)));
}

// A slice pair's rule from positions: row i at key position i + shift sees key j of key_len keys when
// 0 <= i + shift - j < window (or no window), both inside their slices.
bool sees(int i, int j, int len, int window, int shift, int key_len) {
  const int d = i + shift - j;
  return i >= 0 && i < len && j >= 0 && j < key_len && d >= 0 && (window < 0 || d < window);
}

TEST(Visibility, SliceFormsMatchThePositions) {
  for (int shift : {-40, -17, -1, 0, 1, 5, 16, 33, 64})
    for (int window : {-1, 0, 1, 2, 7, 30})
      for (int len : {1, 13, 32})
        for (int key_len : {1, 9, 32, 45})
          for (int i = 0; i < len; ++i)
            for (int j = 0; j < key_len + 8; ++j) {
              const bool want = sees(i, j, len, window, shift, key_len);
              ASSERT_EQ(visible(i, j, len, window, shift, key_len), want)
                  << "i=" << i << " j=" << j << " shift=" << shift << " window=" << window;
              ASSERT_EQ(visible_key(i + shift, j, window, key_len), want)
                  << "i=" << i << " j=" << j << " shift=" << shift << " window=" << window;
            }
}

// The rows a key block is seen by (the key-major backward's row range): exactly the first to the last row that sees
// one of its keys, empty when none does; blocks whose mask block_needs_mask skips hold only visible pairs.
TEST(Visibility, SliceRowsSeeingKeysAreExact) {
  for (int shift : {-40, -17, -1, 0, 1, 5, 16, 33, 64, 200})
    for (int window : {-1, 0, 1, 2, 7, 30})
      for (int len : {1, 13, 32, 70})
        for (int key_len : {1, 9, 32, 45})
          for (int cols : {8, 16})
            for (int c0 = 0; c0 < key_len; c0 += cols) {
              int first = -1, last = -1;
              for (int i = 0; i < len; ++i)
                for (int j = c0; j < c0 + cols; ++j)
                  if (sees(i, j, len, window, shift, key_len)) {
                    if (first < 0) first = i;
                    last = i;
                  }
              const KeySpan s = rows_seeing_keys(c0, c0 + cols, len, window, shift, key_len);
              const std::string at = "c0=" + std::to_string(c0) + " shift=" + std::to_string(shift) +
                                     " window=" + std::to_string(window) + " len=" + std::to_string(len) +
                                     " key_len=" + std::to_string(key_len);
              if (first < 0) {
                ASSERT_TRUE(s.empty()) << at << " got [" << s.begin << ", " << s.end << ")";
                continue;
              }
              ASSERT_EQ(s.begin, first) << at;
              ASSERT_EQ(s.end, last + 1) << at;
              for (int r0 = 0; r0 < len; r0 += 4) {
                if (block_needs_mask(r0, r0 + 4, c0, c0 + cols, len, window, shift, key_len)) continue;
                for (int i = r0; i < r0 + 4 && i < len; ++i)
                  for (int j = c0; j < c0 + cols; ++j)
                    ASSERT_TRUE(sees(i, j, len, window, shift, key_len)) << at << " unmasked i=" << i << " j=" << j;
              }
            }
}

// With no shift and the sequence's own keys the slice forms are the whole-sequence ones.
TEST(Visibility, SliceFormsWithoutShiftAreTheSequenceForms) {
  const int len = 37;
  for (int window : {-1, 0, 1, 5, 36, 100})
    for (int c0 = 0; c0 < len; c0 += 8) {
      const KeySpan a = rows_seeing_keys(c0, c0 + 8, len, window), b = rows_seeing_keys(c0, c0 + 8, len, window, 0, len);
      EXPECT_EQ(a.empty(), b.empty());
      if (!a.empty()) {
        EXPECT_EQ(a.begin, b.begin);
        EXPECT_EQ(a.end, b.end);
      }
      for (int i = 0; i < len; ++i)
        for (int j = 0; j < len; ++j) ASSERT_EQ(visible(i, j, len, window), visible(i, j, len, window, 0, len));
    }
}

// first_key_tile_walking against the walks themselves: for every row block, the first key tile whose walk (its
// rows_seeing_keys, from its first column, in whole row blocks) includes it.
TEST(Visibility, FirstKeyTileWalkingMatchesTheWalks) {
  for (auto [cols, rows] : {std::pair{128, 64}, std::pair{128, 128}, std::pair{64, 64}})
    for (int len : {1, 63, 64, 65, 127, 128, 129, 300, 1000})
      for (int window : {-1, 0, 1, 2, 63, 64, 65, 127, 128, 129, 300, 999, 5000}) {
        for (int block = 0; block * rows < len; ++block) {
          const int row_begin = block * rows;
          int want = -1;
          for (int t = 0; t * cols < len && want < 0; ++t) {
            const KeySpan seen = rows_seeing_keys(t * cols, t * cols + cols, len, window);
            const int blocks = seen.empty() ? 0 : (seen.end - seen.begin + rows - 1) / rows;
            if (row_begin >= seen.begin && row_begin < seen.begin + blocks * rows) want = t;
          }
          if (want < 0) continue;  // no tile walks these rows (window 0)
          ASSERT_EQ(first_key_tile_walking(row_begin, window, cols, rows), want)
              << "cols " << cols << " rows " << rows << " len " << len << " window " << window << " block " << block;
        }
      }
}

// walk_begin and later_tiles_walking against the walks themselves: for every key tile and every row block its walk
// (rows_seeing_keys from walk_begin, in whole blocks) covers, the later tiles whose walks cover that block.
TEST(Visibility, LaterTilesWalkingMatchesTheWalks) {
  for (auto [cols, rows] : {std::pair{64, 64}, std::pair{128, 64}, std::pair{128, 128}, std::pair{96, 64}})
    for (int len : {1, 5, 63, 64, 65, 95, 96, 97, 127, 128, 129, 191, 192, 193, 280, 300, 1000})
      for (int window : {-1, 1, 63, 64, 65, 100, 129, 300, 5000}) {
        std::vector<std::pair<int, int>> walks;  // [first row, end row) of each tile's walk, in whole blocks
        for (int t = 0; t * cols < len; ++t) {
          const KeySpan seen = rows_seeing_keys(t * cols, t * cols + cols, len, window);
          const int begin = seen.empty() ? 0 : walk_begin(seen.begin, cols, rows);
          walks.emplace_back(begin, seen.empty() ? 0 : begin + (seen.end - begin + rows - 1) / rows * rows);
        }
        for (int t = 0; t < static_cast<int>(walks.size()); ++t)
          for (int row_begin = walks[t].first; row_begin < walks[t].second; row_begin += rows) {
            ASSERT_EQ(row_begin % (cols % rows == 0 ? 16 : rows), 0);
            int want = 0;
            for (int later = t + 1; later < static_cast<int>(walks.size()); ++later)
              want += walks[later].first <= row_begin && row_begin < walks[later].second;
            ASSERT_EQ(later_tiles_walking(row_begin, t, len, cols, rows), want)
                << "cols " << cols << " rows " << rows << " len " << len << " window " << window << " tile " << t
                << " block at " << row_begin;
          }
      }
}

}  // namespace
}  // namespace flashgate::cuda
