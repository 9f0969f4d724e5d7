// Who does what in the serving kernels: which sequence, query tokens and heads a CTA's 16 rows are, where a
// key row lives in the cache, and which keys a row sees. Every index read from the caller's index tensors
// is clamped here so that a bad one is never dereferenced out of range (SPEC §8), whatever it holds.
#pragma once

#include <cstdint>

#include "cuda/common/serving_params.h"
#include "cuda/common/visibility.h"

namespace flashgate::cuda {

__device__ __forceinline__ int64_t clamp64(int64_t x, int64_t lo, int64_t hi) {
  return x < lo ? lo : (x > hi ? hi : x);
}

__device__ __forceinline__ int64_t load_offset(const void* base, int bytes, int64_t stride, int64_t i) {
  return bytes == 8 ? static_cast<const int64_t*>(base)[i * stride]
                    : static_cast<int64_t>(static_cast<const int32_t*>(base)[i * stride]);
}

// Query offset cu_q[n], clamped into [0, total_q].
__device__ __forceinline__ int64_t query_offset(const ServingParams& p, int64_t n) {
  return clamp64(load_offset(p.cu_q, p.cu_q_bytes, p.cu_q_stride, n), 0, p.total_q);
}

// One sequence's place: its queries and keys.
struct SequenceKeys {
  int64_t n = 0;
  int64_t q_start = 0;    // first query row
  int64_t q_len = 0;      // Lq
  int64_t key_start = 0;  // decode: first row of k/v (paged: 0)
  int64_t k_len = 0;      // Lk: context length including this step's queries
};

__device__ __forceinline__ void load_key_extent(const ServingParams& p, SequenceKeys& s) {
  if (p.block_table) {
    s.key_start = 0;
    s.k_len = clamp64(p.seq_lens_k[s.n * p.seq_lens_stride], 0, p.max_blocks * p.block_size);
  } else {
    s.key_start = clamp64(load_offset(p.cu_k, p.cu_k_bytes, p.cu_k_stride, s.n), 0, p.total_k);
    const int64_t end = clamp64(load_offset(p.cu_k, p.cu_k_bytes, p.cu_k_stride, s.n + 1), s.key_start, p.total_k);
    s.k_len = end - s.key_start;
  }
}

// A CTA's rows: tokens [tok0, tok0 + ntok) of sequence `seq` and query heads
// kv_head * G + head_block * 16 + (row % rows_per_token).
struct RowBlock {
  SequenceKeys seq;
  int64_t tok0 = 0, ntok = 0;
  int head_block = 0;
};

// The last n in [lo, hi] with first_block(n) <= vt, given first_block(lo) <= vt and first_block
// nondecreasing. The warp searches 32 ways at once (lane l probes lo + l * step, one independent load
// each), so a round trip narrows the range 32-fold: 128 sequences take 2 dependent loads, not 7 as a
// binary search would (a short CTA's start waits on them). Every lane of the warp must call it.
template <class FirstBlock>
__device__ __forceinline__ int64_t warp_search_last_at_most(int64_t lo, int64_t hi, int64_t vt, FirstBlock first_block) {
  const int lane = static_cast<int>(threadIdx.x & 31);
  while (lo < hi) {
    const int64_t step = (hi - lo + 32) / 32;  // ceil((hi - lo + 1) / 32)
    const int64_t probe = lo + lane * step;
    const bool at_most = lane == 0 || (probe <= hi && first_block(probe) <= vt);
    const int last = 31 - __clz(static_cast<int>(__ballot_sync(0xffffffffu, at_most)));  // a prefix of lanes
    const int64_t found = lo + last * step;
    hi = found + step - 1 < hi ? found + step - 1 : hi;
    lo = found;
  }
  return lo;
}

// Row block number `vb` (blockIdx.x); packed queries number their token blocks by first_token_block
// (paged_params.h), or, with p.blocks_per_sequence, sequence n takes blocks [n * bps, (n + 1) * bps) (a sequence
// longer than the caller's bound computes its first bps blocks only). Returns false for a number with no rows
// behind it (the CTA exits). Every thread of the CTA calls it (warp-wide search).
__device__ __forceinline__ bool resolve_row_block(const ServingParams& p, int64_t vb, RowBlock& rb) {
  rb.head_block = static_cast<int>(vb % p.head_blocks);
  const int64_t vt = vb / p.head_blocks;
  if (p.num_seqs <= 0) return false;
  if (!p.cu_q) {
    if (vt >= p.num_seqs) return false;
    rb.seq.n = vt;
    rb.seq.q_start = vt;
    rb.seq.q_len = 1;
    rb.tok0 = 0;
  } else {
    // vt's sequence n and the number of its first block: by division (the caller's bound) or by search.
    const int64_t tq = p.tokens_per_block;
    auto first_block = [&](int64_t n) { return first_token_block(n, query_offset(p, n), tq); };
    int64_t n, first;
    if (p.blocks_per_sequence > 0) {
      n = static_cast<int>(vt) / p.blocks_per_sequence;  // 32 bits: the host refuses 2^31 row blocks
      if (n >= p.num_seqs) return false;
      first = n * p.blocks_per_sequence;
    } else {
      if (first_block(0) > vt) return false;
      n = warp_search_last_at_most(0, p.num_seqs - 1, vt, first_block);
      first = first_block(n);
    }
    rb.seq.n = n;
    rb.seq.q_start = query_offset(p, n);
    rb.seq.q_len = clamp64(query_offset(p, n + 1) - rb.seq.q_start, 0, p.total_q);
    rb.tok0 = (vt - first) * tq;
    if (rb.tok0 >= rb.seq.q_len) return false;
  }
  rb.ntok = rb.seq.q_len - rb.tok0 < p.tokens_per_block ? rb.seq.q_len - rb.tok0 : p.tokens_per_block;
  load_key_extent(p, rb.seq);
  return true;
}

// Row r (0..15) of a block: its query, its causal limit and window start (keys lo <= j <= pos).
struct RowInfo {
  bool valid = false;
  int64_t q_row = 0;  // query row (token) index
  int head = 0;       // query head
  int pos = -1;       // last visible key (local position); -1 sees nothing
  int lo = 0;         // first visible key
};

__device__ __forceinline__ RowInfo row_info(const ServingParams& p, const RowBlock& rb, int kv_head, int r) {
  RowInfo ri;
  const int t = r / p.rows_per_token;
  const int h = rb.head_block * 16 + r % p.rows_per_token;
  if (t >= rb.ntok || h >= p.G) return ri;
  ri.valid = true;
  ri.q_row = rb.seq.q_start + rb.tok0 + t;
  ri.head = kv_head * p.G + h;
  const int64_t pos = query_position(rb.seq.k_len, rb.seq.q_len, rb.tok0 + t);  // < 0 only for Lq > Lk (bad input)
  ri.pos = static_cast<int>(clamp64(pos, -1, rb.seq.k_len - 1));
  ri.lo = static_cast<int>(clamp64(window_start(pos, p.window), 0, ri.pos + 1));
  return ri;
}

// Keys [begin, end) that any row of the block may see.
struct KeyRange {
  int begin = 0, end = 0;
};

__device__ __forceinline__ KeyRange block_key_range(const ServingParams& p, const RowBlock& rb) {
  KeyRange kr;
  const int64_t first_pos = query_position(rb.seq.k_len, rb.seq.q_len, rb.tok0);
  const int64_t last_pos = first_pos + rb.ntok - 1;
  kr.end = static_cast<int>(clamp64(last_pos + 1, 0, rb.seq.k_len));
  kr.begin = static_cast<int>(clamp64(window_start(first_pos, p.window), 0, kr.end));
  if (kr.begin > kr.end) kr.begin = kr.end;
  return kr;
}

// The slice of `range` that split `split` of `num_splits` covers: equal shares rounded up to `granule` keys.
__device__ __forceinline__ KeyRange split_slice(KeyRange range, int split, int num_splits, int granule) {
  const int span = range.end - range.begin;
  KeyRange s;
  if (span <= 0) return s;
  int share = (span + num_splits - 1) / num_splits;
  share = (share + granule - 1) / granule * granule;
  const int64_t b = static_cast<int64_t>(range.begin) + static_cast<int64_t>(share) * split;
  s.begin = static_cast<int>(b < range.end ? b : range.end);
  s.end = static_cast<int>(s.begin + static_cast<int64_t>(share) < range.end ? s.begin + share : range.end);
  return s;
}

// Element offsets of key j's rows in k and v (and of its per-token scales); false when the row cannot be
// read (a block-table entry out of range: the key is then treated as zero and never dereferenced).
struct KeyRow {
  int64_t k_off = 0, v_off = 0;
  int64_t block = 0, slot = 0;
};

// Paged: the block-table entry of key j's page (-1 past the table) and j's slot in it. Its load is the one
// global round trip of a key's lookup, so the serving kernel fetches it a stage ahead of the copy.
struct KeyPage {
  int block = 0, slot = 0;
};

// Page of key j (a shift for power-of-two block sizes).
__device__ __forceinline__ int page_index_of(const ServingParams& p, int j) {
  return p.block_shift >= 0 ? j >> p.block_shift : j / p.block_size;
}

// The sequence's row of the block table (nullptr for decode): found once, so a lookup is one index.
__device__ __forceinline__ const int32_t* table_row_of(const ServingParams& p, const SequenceKeys& s) {
  return p.block_table ? p.block_table + s.n * p.table_row_stride : nullptr;
}

__device__ __forceinline__ KeyPage key_page(const ServingParams& p, const int32_t* table_row, int j) {
  KeyPage page;
  if (!table_row) return page;
  const int page_index = page_index_of(p, j);
  page.slot = j - page_index * p.block_size;
  page.block = page_index < p.max_blocks ? table_row[static_cast<int64_t>(page_index) * p.table_col_stride] : -1;
  return page;
}

__device__ __forceinline__ KeyPage key_page(const ServingParams& p, const SequenceKeys& s, int j) {
  return key_page(p, table_row_of(p, s), j);
}

// `page` is key_page(p, s, j) (unused for decode).
__device__ __forceinline__ bool locate_key(const ServingParams& p, const SequenceKeys& s, int kv_head, int j,
                                           KeyPage page, KeyRow& row) {
  if (p.block_table) {
    const int64_t block = page.block;
    if (block < 0 || block >= p.num_blocks) return false;
    row.block = block;
    row.slot = page.slot;
    row.k_off = block * p.k_block_stride + row.slot * p.k_slot_stride + kv_head * p.k_head_stride;
    row.v_off = block * p.v_block_stride + row.slot * p.v_slot_stride + kv_head * p.v_head_stride;
    return true;
  }
  const int64_t t = s.key_start + j;
  row.k_off = t * p.k_slot_stride + kv_head * p.k_head_stride;
  row.v_off = t * p.v_slot_stride + kv_head * p.v_head_stride;
  return true;
}

__device__ __forceinline__ bool locate_key(const ServingParams& p, const SequenceKeys& s, int kv_head, int j,
                                           KeyRow& row) {
  return locate_key(p, s, kv_head, j, key_page(p, s, j), row);
}

__device__ __forceinline__ int64_t scale_offset(const int64_t (&strides)[3], const KeyRow& row, int kv_head) {
  return row.block * strides[0] + kv_head * strides[1] + row.slot * strides[2];
}

}  // namespace flashgate::cuda
