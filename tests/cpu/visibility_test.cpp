// The distance form of the visibility rule (what the forward's masked tiles evaluate) against visible(),
// for every query inside the sequence, every key, and windows none / 0 / 1 / small / past the sequence.
#include <gtest/gtest.h>

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

}  // namespace
}  // namespace flashgate::cuda
