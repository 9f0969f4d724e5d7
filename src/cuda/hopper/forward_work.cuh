// The Hopper forward's work order: which (query tile, query head) items a persistent CTA runs, in which order,
// and the key blocks of each. Every role of a CTA walks the same items (for_each_work).
#pragma once

#include <cstdint>

#include "cuda/common/attention_params.h"
#include "cuda/common/sequence.h"
#include "cuda/common/tile_scheduler.h"
#include "cuda/common/visibility.h"
#include "cuda/hopper/forward.h"

namespace flashgate::cuda::hopper {

#if defined(__CUDACC__)
namespace detail {

// One work item: query tile `m0 / BM` of one sequence and one query head, and its key blocks (block i of the
// tile is key block last - i: the diagonal block first; a slice pair's rows sit key_shift after its keys). Item
// numbers and heads are 32-bit (the host refuses problems with 2^31 items or more): the producer runs on 24-40
// registers.
struct Work {
  SequenceSpan seq;
  int h = 0;
  int m0 = 0, last = -1, blocks = 0;
  bool valid = false;
};

// Item number `item` in the order the grid runs them: its (sequence, query head) pair and tile. Dense: in
// sections of `section_heads` pairs whose K and V fit in L2, longest query tiles first inside a section, so the
// CTAs running at one time share K/V blocks; packed: tile-major over the longest-first tile map (tile_scheduler.h).
__device__ __forceinline__ TileMapEntry item_at(const ForwardParams& p, const TileSchedule& sched, int item,
                                                int& pair) {
  const int HQ = static_cast<int>(p.a.HQ);
  if (sched.map) {
    pair = item % HQ;
    return tile_longest_first(sched, item / HQ);
  }
  const int tiles = static_cast<int>(sched.tiles_per_seq);
  const int per_section = p.section_heads * tiles, section = item / per_section;
  const int first = section * p.section_heads, pairs = static_cast<int>(p.a.B) * HQ;
  const int heads = min(p.section_heads, pairs - first);
  const int within = item - section * per_section;
  pair = first + within % heads;
  return {pair / HQ, tiles - 1 - within / heads};
}

template <int BM, int BN>
__device__ __forceinline__ Work work_at(const ForwardParams& p, const TileSchedule& sched, int item) {
  const AttentionParams& a = p.a;
  Work w;
  int pair = 0;
  const TileMapEntry t = item_at(p, sched, item, pair);
  if (t.seq < 0) return w;
  w.seq = sequence_span(a, t.seq);
  w.h = pair % static_cast<int>(a.HQ);
  w.m0 = t.tile * BM;
  if (w.m0 >= w.seq.len) return w;
  w.valid = true;
  const KeySpan keys = keys_seen_by_rows(w.m0, min(w.m0 + BM, w.seq.len), w.seq.len, a.window, a.key_shift,
                                         a.key_len(w.seq.len));
  if (keys.empty()) return w;
  w.last = (keys.end - 1) / BN;
  w.blocks = w.last - keys.begin / BN + 1;
  return w;
}

// Item `within` of round `round` of this CTA: rounds of gridDim.x items, every other one backwards so that each
// CTA's total work evens out over a longest-first list.
__device__ __forceinline__ int item_of_round(int round) {
  const int cta = static_cast<int>(blockIdx.x), ctas = static_cast<int>(gridDim.x);
  return round * ctas + ((round & 1) ? ctas - 1 - cta : cta);
}

// Calls f(work) for each of this CTA's items, in the order every role of the CTA walks them: section after
// section (item_at), each dealt out in rounds over the persistent grid.
template <int BM, int BN, class F>
__device__ __forceinline__ void for_each_work(const ForwardParams& p, const TileSchedule& sched, F&& f) {
  const int items = static_cast<int>(sched.num_tiles * p.a.HQ);
  const int per_section = sched.map ? items : p.section_heads * static_cast<int>(sched.tiles_per_seq);
  for (int first = 0; first < items; first += per_section) {
    const int count = min(per_section, items - first);
    for (int round = 0;; ++round) {
      const int within = item_of_round(round);
      if (within >= count) break;
      f(work_at<BM, BN>(p, sched, first + within));
    }
  }
}

}  // namespace detail
#endif  // __CUDACC__

}  // namespace flashgate::cuda::hopper
