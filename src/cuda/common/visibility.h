// The visibility rule of SPEC §3 (causal + sliding window + sequence bounds) in one place, with the key
// ranges and "does this tile need masking" questions that tiled kernels derive from it.
// Positions are local to one sequence (0 .. len-1); window < 0 means none (see AttentionParams::window). The
// serving kernels take the same rule with their queries' positions (query_position).
#pragma once

#include <cstdint>

#include "cuda/common/host_device.h"

namespace flashgate::cuda {

// Whether query i sees key j: j <= i, i - j < window, both inside the sequence. Bitwise, not short-circuit:
// kernels evaluate it per score element, where a branch per element costs more than the three compares.
FG_HOST_DEVICE bool visible(int i, int j, int len, int window) {
  return (j <= i) & (i < len) & ((window < 0) | (i - j < window));
}

// The key side of the rule for a row at key position pos among key_len keys: j <= pos, pos - j < window, j inside
// the keys. Kernels whose rows past the sequence carry no weight anyway (their lse term is -inf) mask with it alone.
FG_HOST_DEVICE bool visible_key(int pos, int j, int window, int key_len) {
  return (j <= pos) & (j < key_len) & ((window < 0) | (pos - j < window));
}

// The same for a slice pair (attention_forward_slice / attention_backward_slice): row i sits at key position
// i + shift among key_len keys, which also ends what it may see (rows may lie past every key).
FG_HOST_DEVICE bool visible(int i, int j, int len, int window, int shift, int key_len) {
  return visible_key(i + shift, j, window, key_len) & (i < len);
}

// visible() for a query inside the sequence (i < len) as one unsigned compare of the distance d = i - j:
// 0 <= d < window, or 0 <= d without a window. Kernels that mask a whole tile keep d per thread and add
// constant offsets, instead of evaluating visible() per score.
FG_HOST_DEVICE unsigned distance_bound(int window) { return window < 0 ? 0x80000000u : static_cast<unsigned>(window); }
FG_HOST_DEVICE bool visible_at_distance(int d, unsigned bound) { return static_cast<unsigned>(d) < bound; }

// The first key a query at position `pos` sees through a window (window < 0: none, key 0); callers clamp it
// to the sequence. The one form of "i - j < window" that key ranges are built from.
FG_HOST_DEVICE int64_t window_start(int64_t pos, int64_t window) { return window < 0 ? 0 : pos - window + 1; }

// Serving queries (paged attention, decode, speculative verify; SPEC §6): query t of a sequence with q_len
// query tokens over k_len keys (this step's included) sits at key position k_len - q_len + t.
FG_HOST_DEVICE int64_t query_position(int64_t k_len, int64_t q_len, int64_t t) { return k_len - q_len + t; }

// A span [begin, end) of key or query positions (empty: begin >= end).
struct KeySpan {
  int begin = 0, end = 0;
  FG_HOST_DEVICE bool empty() const { return begin >= end; }
};

// Keys [begin, end) that any query of rows [row_begin, row_end) may see.
FG_HOST_DEVICE KeySpan keys_seen_by_rows(int row_begin, int row_end, int len, int window) {
  KeySpan s;
  if (window == 0) return s;  // window 0 hides every key
  const int last_row = (row_end < len ? row_end : len) - 1;
  s.end = last_row + 1;
  s.begin = static_cast<int>(window_start(row_begin, window));
  if (s.begin < 0) s.begin = 0;
  return s;
}

// The same for a slice pair (attention_forward_slice): row r sits at key position r + shift among key_len keys
// (the host keeps |shift|, len and key_len below 2^30, so positions stay 32-bit).
FG_HOST_DEVICE KeySpan keys_seen_by_rows(int row_begin, int row_end, int len, int window, int shift, int key_len) {
  KeySpan s = keys_seen_by_rows(row_begin + shift, row_end + shift, len + shift, window);
  if (s.end > key_len) s.end = key_len;
  return s;
}

// Queries [begin, end) that any key of columns [col_begin, col_end) is seen by (for key-major backward loops).
FG_HOST_DEVICE KeySpan rows_seeing_keys(int col_begin, int col_end, int len, int window) {
  KeySpan s;
  if (window == 0 || col_begin >= len) return s;
  s.begin = col_begin;
  const int last_col = (col_end < len ? col_end : len) - 1;
  s.end = window < 0 ? len : last_col + window;  // the last query that still sees last_col, plus one
  if (s.end > len) s.end = len;
  return s;
}

// The same for a slice pair: rows [begin, end) of the len rows, row r at key position r + shift, that any key of
// columns [col_begin, col_end) (clipped to the key_len keys) is seen by.
FG_HOST_DEVICE KeySpan rows_seeing_keys(int col_begin, int col_end, int len, int window, int shift, int key_len) {
  if (col_begin >= key_len) return KeySpan{};
  KeySpan s = rows_seeing_keys(col_begin, col_end < key_len ? col_end : key_len, len + shift, window);
  if (s.empty()) return KeySpan{};
  s.begin -= shift, s.end -= shift;
  if (s.begin < 0) s.begin = 0;
  return s;
}

// The first row of a key tile's walk over row blocks of `rows`, from its first seeing row `seen_begin`: that row's
// 16-row group (dQ's adds go by whole groups); where `rows` does not divide the tile's `cols`, the row block holding
// it, so that every tile's walk covers the same row blocks (deterministic mode counts the adds per block).
FG_HOST_DEVICE int walk_begin(int seen_begin, int cols, int rows) {
  return cols % rows == 0 ? seen_begin & ~15 : seen_begin / rows * rows;
}

// Deterministic mode's descending order: how many key tiles after tile `tile` walk the row block at row_begin (of
// `rows` rows, in a sequence of `len`): every tile up to the one holding the block's last row as a key (the block's
// first row's where `rows` divides `cols`: the walks begin on tile boundaries there).
FG_HOST_DEVICE int later_tiles_walking(int row_begin, int tile, int len, int cols, int rows) {
  const int last = cols % rows == 0 ? row_begin : (row_begin + rows < len ? row_begin + rows : len) - 1;
  return last / cols - tile;
}

// A key-major walk over row blocks: the key tile at col_begin = t * cols walks the rows_seeing_keys of its columns
// in blocks of `rows` from col_begin (the last block may reach past them). The first key tile whose walk includes
// the row block at row_begin (< len): 0 without a window; with one, the first whose seen rows, rounded up to whole
// blocks, reach it (a tile cut off by the sequence's end reaches len, past every row).
FG_HOST_DEVICE int first_key_tile_walking(int row_begin, int window, int cols, int rows) {
  if (window <= 0) return 0;
  const int64_t reach = (int64_t{cols} - 1 + window + rows - 1) / rows * rows;  // a tile's walk, from its first row
  return row_begin < reach ? 0 : static_cast<int>((row_begin - reach) / cols + 1);
}

// False when every (i, j) of the rows x cols block with i < len is visible, so the kernel may skip the
// per-element mask. Columns at or past len only meet rows at or past len (j >= len > i otherwise) or
// rows before them (causal), both covered by the checks below.
FG_HOST_DEVICE bool block_needs_mask(int row_begin, int row_end, int col_begin, int col_end, int len, int window) {
  if (col_end - 1 > row_begin) return true;                                  // crosses the diagonal
  if (window >= 0 && (row_end - 1) - col_begin >= window) return true;       // reaches past the window
  if (col_end > len) return true;                                            // keys past the sequence
  return false;
}

// The same for a slice pair: rows at r + shift among key_len keys.
FG_HOST_DEVICE bool block_needs_mask(int row_begin, int row_end, int col_begin, int col_end, int len, int window,
                                     int shift, int key_len) {
  return block_needs_mask(row_begin + shift, row_end + shift, col_begin, col_end, len + shift, window) ||
         col_end > key_len;
}

}  // namespace flashgate::cuda
