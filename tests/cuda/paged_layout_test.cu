// The serving kernel's stage layout (src/cuda/portable/paged_tile.cuh), checked on the host (no GPU needed): within a
// stage every 16-byte chunk of every key and value row has its own place, and the fragment loads of
// paged_kernel.cuh (lane g, c of a warp: key rows g and g + 8 at chunk c of a round; value rows 2c, 2c + 1, 2c + 8,
// 2c + 9 at lane g's words) are free of bank conflicts: within each phase of a load (8 lanes for 16-byte loads, 16
// for 8-byte ones) no two lanes touch different words of one bank.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "cuda/portable/paged_tile.cuh"

namespace {

using flashgate::cuda::CacheKind;
using flashgate::cuda::PagedTile;

// Offsets of every (row, chunk) of `rows` rows of `chunks` chunks: distinct, 16-byte aligned, inside the rows' bytes.
template <class Place>
void expect_bijective(const char* what, int rows, int chunks, Place place) {
  std::set<int> seen;
  for (int r = 0; r < rows; ++r)
    for (int ch = 0; ch < chunks; ++ch) {
      const int at = place(r, ch);
      EXPECT_EQ(at % 16, 0) << what << " row " << r << " chunk " << ch;
      EXPECT_TRUE(at >= 0 && at < rows * chunks * 16) << what << " row " << r << " chunk " << ch << " at " << at;
      EXPECT_TRUE(seen.insert(at).second) << what << " row " << r << " chunk " << ch << " shares byte " << at;
    }
}

// One warp load: lane l reads `bytes` bytes at addr[l]; conflict-free when each phase's lanes keep to their banks.
void expect_conflict_free(const std::string& what, const std::vector<int>& addr, int bytes) {
  const int lanes_per_phase = 128 / bytes;
  for (int phase = 0; phase < 32 / lanes_per_phase; ++phase) {
    std::map<int, std::set<int>> words_of_bank;
    for (int l = phase * lanes_per_phase; l < (phase + 1) * lanes_per_phase; ++l)
      for (int w = 0; w < bytes / 4; ++w) {
        const int word = addr[l] / 4 + w;
        words_of_bank[word % 32].insert(word);
      }
    for (const auto& [bank, words] : words_of_bank)
      EXPECT_EQ(words.size(), 1u) << what << ": phase " << phase << " bank " << bank;
  }
}

template <class Tile>
void check_tile(const char* name) {
  SCOPED_TRACE(name);
  constexpr int kKeyChunks = Tile::kKeyRowBytes / 16, kValueChunks = Tile::kValueRowBytes / 16;
  expect_bijective("keys", Tile::KS, kKeyChunks, [](int r, int ch) { return Tile::key_chunk(r, ch); });
  expect_bijective("values", Tile::KS, kValueChunks, [](int r, int ch) { return Tile::value_chunk(r, ch); });
  for (int wk = 0; wk < Tile::WK; ++wk) {
    const int wrow = wk * Tile::kKeysPerWarp;
    for (int round = 0; round < Tile::kKeyRounds; ++round)
      for (int nt = 0; nt < 2; ++nt) {
        std::vector<int> addr(32);
        for (int l = 0; l < 32; ++l) addr[l] = Tile::key_chunk(wrow + nt * 8 + l / 4, round * 4 + l % 4);
        expect_conflict_free("key load, warp row " + std::to_string(wrow) + " round " + std::to_string(round) +
                                 " n-tile " + std::to_string(nt),
                             addr, 16);
      }
    for (int wv = 0; wv < Tile::WV; ++wv)
      for (int round = 0; round < Tile::kValueRounds; ++round)
        for (int k : {0, 1, 8, 9}) {
          std::vector<int> addr(32);
          for (int l = 0; l < 32; ++l) addr[l] = Tile::value_words(wrow + 2 * (l % 4) + k, wv, round, l / 4);
          expect_conflict_free("value load, warp row " + std::to_string(wrow) + " column " + std::to_string(wv) +
                                   " round " + std::to_string(round) + " row +" + std::to_string(k),
                               addr, Tile::kValueWords * 4);
        }
  }
}

TEST(PagedLayout, StageChunksAndFragmentLoads) {
  check_tile<PagedTile<CacheKind::e4m3, 64, 64, 8>>("fp8 D64 8-row");
  check_tile<PagedTile<CacheKind::e4m3_tokens, 64, 64, 16>>("fp8 D64 16-row, per token");
  check_tile<PagedTile<CacheKind::e4m3, 128, 128, 8>>("fp8 D128 8-row");
  check_tile<PagedTile<CacheKind::e4m3, 128, 128, 16>>("fp8 D128 16-row");
  check_tile<PagedTile<CacheKind::e4m3, 256, 256, 16>>("fp8 D256");
  check_tile<PagedTile<CacheKind::bf16, 64, 64, 8>>("bf16 D64 8-row");
  check_tile<PagedTile<CacheKind::bf16, 128, 128, 16>>("bf16 D128 16-row");
  check_tile<PagedTile<CacheKind::bf16, 256, 256, 16>>("bf16 D256");
}

// Per-token scales: over the warps and lanes of a stage's loader, the lanes that copy (PagedTile::copies_scale)
// write each of the stage's 2 * KS scale slots exactly once (the K slots from lanes below kLoadRows, the V ones from
// the lanes above). Wide value tiles load fewer rows a warp than half a warp; their idle lanes had copied the slots
// of the lanes below them again (racecheck).
template <class Tile>
void check_scale_slots(const char* name) {
  SCOPED_TRACE(name);
  std::vector<int> writes(2 * Tile::KS, 0);
  for (int warp = 0; warp < Tile::kWarps; ++warp)
    for (int lane = 0; lane < 32; ++lane) {
      if (!Tile::copies_scale(lane)) continue;
      const int slot = Tile::scale_slot(warp, lane);
      ASSERT_TRUE(slot >= 0 && slot < 2 * Tile::KS) << "warp " << warp << " lane " << lane << " slot " << slot;
      EXPECT_EQ(slot >= Tile::KS, lane >= Tile::kLoadRows) << "warp " << warp << " lane " << lane;
      ++writes[slot];
    }
  for (int slot = 0; slot < 2 * Tile::KS; ++slot) EXPECT_EQ(writes[slot], 1) << "scale slot " << slot;
}

TEST(PagedLayout, EveryScaleSlotHasOneWriter) {
  check_scale_slots<PagedTile<CacheKind::e4m3_tokens, 64, 64, 8>>("D64 8-row");
  check_scale_slots<PagedTile<CacheKind::e4m3_tokens, 64, 64, 16>>("D64 16-row");
  check_scale_slots<PagedTile<CacheKind::e4m3_tokens, 128, 128, 8>>("D128 8-row");
  check_scale_slots<PagedTile<CacheKind::e4m3_tokens, 128, 128, 16>>("D128 16-row");
  check_scale_slots<PagedTile<CacheKind::e4m3_tokens, 256, 256, 16>>("D256");
  check_scale_slots<PagedTile<CacheKind::e4m3_tokens, 512, 512, 16>>("D512");
  check_scale_slots<PagedTile<CacheKind::e4m3_tokens, 576, 512, 16>>("K576 V512");
}

}  // namespace
