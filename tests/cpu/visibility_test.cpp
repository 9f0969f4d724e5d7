// The distance form of the visibility rule (what the forward's masked tiles evaluate) against visible(),
// for every query inside the sequence, every key, and windows none / 0 / 1 / small / past the sequence.
#include <gtest/gtest.h>

#include <utility>

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

}  // namespace
}  // namespace flashgate::cuda
