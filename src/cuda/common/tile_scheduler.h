// Tiles of `tile_rows` consecutive positions over all sequences (query tiles of a forward, key tiles of a
// backward), numbered 0 .. num_tiles-1 so that one grid axis can carry them all.
//
// Dense: tile = batch * tiles_per_seq + tile_in_seq, computed in the kernel.
// Packed: the lengths live in cu_seqlens (maybe on the GPU), so the host only knows an upper bound on the
// tile count, ceil(T / tile_rows) + N; a one-block pre-kernel (launch_build_tile_map) scans the lengths and
// writes, for every tile number, its (sequence, tile in sequence) into the workspace, and -1 for numbers past
// the real count (sequence after sequence; the Hopper forward's map lists them longest first). No host
// synchronisation, so it is CUDA-graph safe.
#pragma once

#include <cstdint>

#include "cuda/common/attention_params.h"
#include "cuda/common/host_device.h"

struct CUstream_st;

namespace flashgate::cuda {

struct TileMapEntry {
  int32_t seq;   // -1: no tile behind this number
  int32_t tile;  // tile index within the sequence
};

struct TileSchedule {
  int tile_rows = 64;
  int64_t num_tiles = 0;        // exact (dense) or an upper bound (packed)
  int64_t tiles_per_seq = 0;    // dense only
  const TileMapEntry* map = nullptr;  // packed only: num_tiles entries in the workspace
  bool longest_first = false;         // packed only: the map holds the tiles longest first (build_longest_first_map)
};

FG_HOST_DEVICE int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Map entries the workspace must hold for packed input (0 when dense).
inline int64_t tile_map_entries(const AttentionParams& p, int tile_rows) {
  return p.packed ? ceil_div(p.T, tile_rows) + p.num_seqs : 0;
}

// The schedule for `p`; `map` is the workspace for tile_map_entries(p, tile_rows) entries (packed only).
inline TileSchedule make_tile_schedule(const AttentionParams& p, int tile_rows, const TileMapEntry* map) {
  TileSchedule s;
  s.tile_rows = tile_rows;
  if (p.packed) {
    s.num_tiles = tile_map_entries(p, tile_rows);
    s.map = map;
  } else {
    s.tiles_per_seq = ceil_div(p.T, tile_rows);
    s.num_tiles = p.B * s.tiles_per_seq;
  }
  return s;
}

// The key tiles of a backward: over a slice pair's Tk keys (AttentionParams::Tk; slices are dense), else as
// make_tile_schedule.
inline TileSchedule make_key_tile_schedule(const AttentionParams& p, int tile_rows, const TileMapEntry* map) {
  if (p.Tk <= 0) return make_tile_schedule(p, tile_rows, map);
  TileSchedule s;
  s.tile_rows = tile_rows;
  s.tiles_per_seq = ceil_div(p.Tk, tile_rows);
  s.num_tiles = p.B * s.tiles_per_seq;
  return s;
}

// Fills the tile map of a packed schedule (no-op when dense).
void launch_build_tile_map(const AttentionParams& p, const TileSchedule& s, TileMapEntry* map, CUstream_st* stream);

// The largest tile count of one sequence that the longest-first map sorts by (its counts sit in shared memory).
inline constexpr int64_t kLongestFirstMaxTiles = 12 * 1024 - 32;

// Fills the tile map of a packed schedule with its tiles longest first, as causal query tiles should start: every
// sequence's tile of the highest index, then those of the next, ... (the order inside one index is unspecified:
// it only decides which CTA runs a tile). Returns `s` with longest_first set, or where a sequence may hold more
// than kLongestFirstMaxTiles tiles, `s` after launch_build_tile_map (sequence by sequence; read backwards).
TileSchedule launch_build_longest_first_map(const AttentionParams& p, TileSchedule s, TileMapEntry* map,
                                            CUstream_st* stream);

#if defined(__CUDACC__)
// Sequence and tile in that sequence of tile number `tile`; seq < 0 when the number has no tile.
__device__ __forceinline__ TileMapEntry tile_at(const TileSchedule& s, int64_t tile) {
  if (s.map) return s.map[tile];
  return {static_cast<int32_t>(tile / s.tiles_per_seq), static_cast<int32_t>(tile % s.tiles_per_seq)};
}

// The same tiles in the order causal query tiles should start, longest work first: dense runs the last
// tile of every sequence, then the one before, ...; packed runs the longest-first map in order, or a map of
// sequence after sequence backwards (the last tiles of the later sequences first: an approximation).
__device__ __forceinline__ TileMapEntry tile_longest_first(const TileSchedule& s, int64_t order) {
  if (s.map) return s.map[s.longest_first ? order : s.num_tiles - 1 - order];
  const int64_t seqs = s.num_tiles / s.tiles_per_seq;
  return {static_cast<int32_t>(order % seqs), static_cast<int32_t>(s.tiles_per_seq - 1 - order / seqs)};
}

// Key tiles in the order key-major backward CTAs should start, most work first: under the causal mask the first
// key tile of a sequence is seen by the most query rows. Dense: tile 0 of every sequence, then tile 1, ...;
// packed: the map's order (sequence by sequence, each from its first tile).
__device__ __forceinline__ TileMapEntry key_tile_heaviest_first(const TileSchedule& s, int64_t order) {
  if (s.map) return s.map[order];
  const int64_t seqs = s.num_tiles / s.tiles_per_seq;
  return {static_cast<int32_t>(order % seqs), static_cast<int32_t>(order / seqs)};
}
#endif

}  // namespace flashgate::cuda
