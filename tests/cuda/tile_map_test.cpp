// GPU tests of the packed tile maps (src/cuda/common/tile_scheduler.cu): the longest-first map holds every tile of
// every sequence once, tile indices never rising along it, and no tile past the real count; where a sequence may
// hold more tiles than it sorts by, the map of sequence after sequence. Fresh random lengths (zero-length segments
// among them), three tile heights; the maps are poisoned before each build.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <set>
#include <utility>
#include <vector>

#include "cuda/common/attention_params.h"
#include "cuda/common/tile_scheduler.h"
#include "support/compare.h"
#include "support/device_vector.h"

namespace {

using flashgate::cuda::TileMapEntry;
using flashgate::cuda::TileSchedule;

struct Built {
  TileSchedule sched;
  std::vector<TileMapEntry> map;
};

// The map of packed segments `lengths` at tile height `rows`, built by the longest-first builder.
Built build(const std::vector<int32_t>& lengths, int rows) {
  std::vector<int32_t> cu(1, 0);
  for (int32_t len : lengths) cu.push_back(cu.back() + len);
  flashgate::cuda::AttentionParams p;
  p.packed = true;
  p.B = 1;
  p.T = cu.back();
  p.num_seqs = static_cast<int64_t>(lengths.size());
  fgtest::DeviceVector<int32_t> d_cu(cu);
  p.cu_seqlens = d_cu.ptr;
  p.cu_seqlens_bytes = 4;
  const int64_t entries = flashgate::cuda::tile_map_entries(p, rows);
  fgtest::DeviceVector<TileMapEntry> d_map(std::vector<TileMapEntry>(entries, TileMapEntry{12345, 67890}));
  Built b;
  b.sched = flashgate::cuda::launch_build_longest_first_map(
      p, flashgate::cuda::make_tile_schedule(p, rows, d_map.ptr), d_map.ptr, nullptr);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  b.map = d_map.get();
  return b;
}

// Every (sequence, tile) of `lengths` at height `rows`.
std::set<std::pair<int, int>> all_tiles(const std::vector<int32_t>& lengths, int rows) {
  std::set<std::pair<int, int>> tiles;
  for (int s = 0; s < static_cast<int>(lengths.size()); ++s)
    for (int t = 0; t * rows < lengths[s]; ++t) tiles.insert({s, t});
  return tiles;
}

TEST(TileMap, LongestFirstHoldsEveryTileOnceIndicesFalling) {
  FLASHGATE_REQUIRE_GPU();
  std::mt19937 rng(std::random_device{}());
  for (int rows : {64, 128, 192}) {
    for (int trial = 0; trial < 20; ++trial) {
      const int n = 1 + static_cast<int>(rng() % (trial < 10 ? 20 : 700));
      std::vector<int32_t> lengths(n);
      // Long sequences among few (the builder sorts where no sequence can hold more than kLongestFirstMaxTiles).
      const uint32_t longest = n <= 20 && trial % 3 == 0 ? 9000 : 700;
      for (int32_t& len : lengths) len = rng() % 5 == 0 ? 0 : static_cast<int32_t>(rng() % longest);
      const Built b = build(lengths, rows);
      ASSERT_TRUE(b.sched.longest_first);
      const std::set<std::pair<int, int>> want = all_tiles(lengths, rows);
      std::set<std::pair<int, int>> seen;
      int last_index = 1 << 30;
      size_t i = 0;
      for (; i < want.size(); ++i) {
        const TileMapEntry e = b.map[i];
        ASSERT_TRUE(e.seq >= 0 && e.seq < n) << "rows " << rows << " place " << i << " seq " << e.seq;
        ASSERT_TRUE(seen.insert({e.seq, e.tile}).second) << "tile listed twice: " << e.seq << ", " << e.tile;
        ASSERT_LE(e.tile, last_index) << "place " << i;
        last_index = e.tile;
      }
      EXPECT_EQ(seen, want) << "rows " << rows;
      for (; i < b.map.size(); ++i) ASSERT_EQ(b.map[i].seq, -1) << "place " << i;
    }
  }
}

// A packed batch whose one sequence could hold more tiles than the longest-first map sorts by: the builder falls
// back to sequence after sequence, which tile_longest_first reads backwards.
TEST(TileMap, LongSequencesFallBackToSequenceOrder) {
  FLASHGATE_REQUIRE_GPU();
  const int rows = 64;
  const std::vector<int32_t> lengths = {100, 0, static_cast<int32_t>(flashgate::cuda::kLongestFirstMaxTiles * rows), 7};
  const Built b = build(lengths, rows);
  EXPECT_FALSE(b.sched.longest_first);
  size_t i = 0;
  for (int s = 0; s < static_cast<int>(lengths.size()); ++s)
    for (int t = 0; t * rows < lengths[s]; ++t, ++i) {
      ASSERT_EQ(b.map[i].seq, s) << "place " << i;
      ASSERT_EQ(b.map[i].tile, t) << "place " << i;
    }
  for (; i < b.map.size(); ++i) ASSERT_EQ(b.map[i].seq, -1) << "place " << i;
}

}  // namespace
