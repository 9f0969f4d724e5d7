// The plain parameter struct of the serving kernels. decode (SPEC §5) and paged_attention (SPEC §6) share
// it: decode is paged attention whose "pages" are one contiguous run of keys per sequence (no block table,
// key offsets from cu_seqlens) and whose queries are one per sequence (no cu_seqlens_q).
// Built on the host by serving.cpp from the checked arguments; passed by value to every serving kernel.
#pragma once

#include <cstdint>

#include "cuda/common/host_device.h"
#include "cuda/common/element_type.h"

namespace flashgate::cuda {

enum class CacheScale : int { none = 0, per_tensor = 1, per_token = 2 };

// Element type of the K/V cache on the mma path (one kernel instantiation family each). fp8 caches with a
// per-token scale on K or V take their own family (e4m3_tokens): per-tensor fp8 then compiles without the
// per-token machinery (scale copies, column scaling, the P * scale hi + lo pair and its second mma).
enum class CacheKind : int { f16, bf16, e4m3, e4m3_tokens };

// Packed queries in row blocks of `tq` tokens (ServingParams::tokens_per_block), numbered sequence after
// sequence: sequence n's ceil(Lq / tq) blocks start at n + floor((cu_q[n] - n) / tq). A non-empty sequence
// takes one number for its first token and the floor of the running count of its other tokens for the rest,
// so numbers never collide, and single-token sequences (decode) take consecutive numbers with no gaps (an
// empty sequence takes at most one). The count is at most N + floor((total_q - N) / tq), a bound the host
// takes without reading cu_q (some numbers may have no rows: those CTAs exit).
FG_HOST_DEVICE int64_t floor_div(int64_t a, int64_t b) {  // b > 0
  const int64_t q = a / b;
  return q * b > a ? q - 1 : q;
}
FG_HOST_DEVICE int64_t first_token_block(int64_t n, int64_t cu_q_n, int64_t tq) {
  return n + floor_div(cu_q_n - n, tq);
}
FG_HOST_DEVICE int64_t token_block_bound(int64_t num_seqs, int64_t total_q, int64_t tq) {
  return num_seqs + floor_div(total_q - num_seqs, tq);
}

struct ServingParams {
  // Queries q [rows, HQ, K] and outputs o [rows, HQ, V]; rows = total_q (one per sequence for decode).
  const void* q = nullptr;
  int64_t q_row_stride = 0, q_head_stride = 0;
  void* o = nullptr;
  int64_t o_row_stride = 0, o_head_stride = 0;
  ElementType qo_dtype = ElementType::bf16;  // f16, bf16 or f32

  // Key/value rows. Element offset of key j (local to sequence n) of kv head h:
  //   paged:  block_table[n, j / block_size] * block_stride + (j % block_size) * slot_stride + h * head_stride
  //   decode: (key_start(n) + j) * slot_stride + h * head_stride                (block_table == nullptr)
  const void* k = nullptr;
  const void* v = nullptr;
  int64_t k_block_stride = 0, k_slot_stride = 0, k_head_stride = 0;
  int64_t v_block_stride = 0, v_slot_stride = 0, v_head_stride = 0;
  ElementType cache_dtype = ElementType::bf16;

  // Sequences. Every index read from these is clamped in the kernels (SPEC §8).
  int64_t num_seqs = 0;
  int64_t total_q = 0;                   // query rows
  const void* cu_q = nullptr;            // paged: [N+1] query offsets; nullptr: one query per sequence (decode)
  int64_t cu_q_stride = 1;
  int cu_q_bytes = 4;
  const void* cu_k = nullptr;            // decode: [N+1] key offsets into k/v
  int64_t cu_k_stride = 1;
  int cu_k_bytes = 4;
  int64_t total_k = 0;                   // decode: T (rows of k/v)
  const int32_t* seq_lens_k = nullptr;   // paged: [N] context lengths
  int64_t seq_lens_stride = 1;
  const int32_t* block_table = nullptr;  // paged: [N, max_blocks]
  int64_t table_row_stride = 0, table_col_stride = 1;
  int64_t num_blocks = 0, max_blocks = 0;
  int block_size = 1;
  int block_shift = -1;                  // log2(block_size) when a power of two (a shift, not a division)

  int HQ = 0, H = 0, G = 1, K = 0, V = 0;

  // Softmax terms.
  float scale_log2 = 0;                  // scale * log2(e): scores live in the exp2 domain
  int64_t window = -1;                   // -1: none
  const float* sink = nullptr;           // [HQ] or nullptr
  int64_t sink_stride = 1;
  const float* gate_bias = nullptr;      // decode: [HQ][T] log2-domain gate terms (workspace), or nullptr

  // fp8 scales: per tensor (one float) or per token [num_blocks, H, block_size].
  CacheScale k_scale_mode = CacheScale::none, v_scale_mode = CacheScale::none;
  const float* k_scale = nullptr;
  const float* v_scale = nullptr;
  // Block, head, slot; zero unless per token, so that the per-token kernels read a per-tensor scale through them.
  int64_t k_scale_strides[3] = {0, 0, 0}, v_scale_strides[3] = {0, 0, 0};

  // Row blocks: a CTA takes 16 rows = `tokens_per_block` query tokens x `rows_per_token` query heads of one
  // kv head (G <= 16), or 16 of the G heads of one token (G > 16, `head_blocks` = ceil(G / 16) blocks).
  int rows_per_token = 1, tokens_per_block = 1, head_blocks = 1;
  int64_t row_blocks = 0;                // grid x: upper bound on row blocks (some CTAs find none and exit)
  // Paged, from the caller's max_seqlen_q: > 0 gives each sequence this many consecutive row blocks (row block
  // vt is sequence vt / blocks_per_sequence, no search); 0 numbers them by first_token_block.
  int blocks_per_sequence = 0;
  // A CTA takes `heads_per_cta` kv heads in turn (grid y = ceil(H / heads_per_cta)): one start per several
  // heads' keys where a pass has more CTAs than the GPU holds at once.
  int heads_per_cta = 1;

  // Split-KV: each of `num_splits` CTAs per row block covers one slice of the keys. With more than one,
  // partial outputs (normalised by their own sum) and their log2 sums go to the workspace for the merge.
  int num_splits = 1;
  float* o_partial = nullptr;            // [num_splits][total_q][HQ][V]
  float* lse_partial = nullptr;          // [num_splits][total_q][HQ], log2 domain, -inf for an empty slice
};

}  // namespace flashgate::cuda
