// The backward's plain parameter struct (host and device) and the layout of its fp32 dq accumulator.
#pragma once

#include <cstddef>
#include <cstdint>

#include "cuda/common/attention_params.h"
#include "cuda/common/host_device.h"

namespace flashgate::cuda::bwd {

// Everything the backward kernels read and write. Row vectors of the workspace (lse, D, E, mass) are
// laid out like the gate prefix sums: [B][HQ][T] fp32, see row_index; the per-key ones (colsum, the dK/dV head
// parts) the same over the keys, key_rows of them per sequence (a slice pair's Tk, else T; see key_index).
//
// A slice pair (attention_backward_slice, dense) runs the MMA path with a.Tk keys and its rows shifted
// (AttentionParams::Tk, key_shift, gc_k): lse and D are copies of the given merged rows' (no D pass), and
// E, mass and colsum are turned into the two cumulative gates' gradients by launch_slice_grads.
struct BackwardParams {
  AttentionParams a;                    // q, k, v, o, lse, g, sink, cu_seqlens, gc, sizes, scale, window
  TokenHeadTensor dout, dq, dk, dv, dg;
  float* dsink = nullptr;
  int do_width = 16, dq_width = 16, dk_width = 16, dv_width = 16;  // row byte alignment (row_copy_width)
  int K16 = 16, V16 = 16;               // head dims rounded up to the MMA k-step
  bool deterministic = false;
  bool need_E = false;                  // gate or sink (unless sink_parts): E[i] = sum_j P dP is needed
  bool exact_D = false;                 // D[i] = sum_j P dP by a query-major pre-pass, not o·do (backward.h)

  // Workspace.
  float* lse = nullptr;     // contiguous copy of the forward's lse (natural log)
  float* D = nullptr;       // o·do
  float* E = nullptr;       // sum_j P dP (need_E)
  float* mass = nullptr;    // sum_j P, the visible keys' share of the row's softmax mass (gate)
  float* colsum = nullptr;  // sum_i dS[i,t] per query head (gate), key_index's layout
  // The Hopper narrow dK/dV kernel with a sink and no gate (sink_part_index): each consumer warp's part of
  // sum exp(sink - lse_i) P_ij dP_ij over one key tile and query head, in place of E (dsink sums them in order).
  float* sink_parts = nullptr;
  int64_t sink_part_tiles = 0;  // key tiles of that kernel's schedule
  float* dq_acc = nullptr;  // fp32 dq / scale (MMA kernels: default mode; Hopper: both) in dq_acc_offset's layout
  int* dq_order = nullptr;  // Hopper deterministic mode: per dQ row block (dq_order_index), the adds made so far
  // Hopper deterministic mode's order (hopper_backward.cpp): false, the key tiles lightest first walking each head's
  // rows down and adding dQ from the last tile to the first; true, heaviest first walking the rows up with the query
  // heads innermost and adding from the first tile to the last.
  bool dq_ascending = false;
  unsigned* next_item = nullptr;  // Hopper: the persistent dK/dV kernel's item dispenser (starts at 0)
  float* dk_part = nullptr; // [head_parts][B][H][key_rows][K16] scaled dk partials (head_parts > 1)
  float* dv_part = nullptr; // [head_parts][B][H][key_rows][V16]
  int head_parts = 1;       // the G query heads of a kv head split over this many CTAs (divides G)
  // Hopper dK/dV kernels: their items take the kv heads in groups of this many, each group's key tiles heaviest
  // first, so that the query rows a group's tiles walk (q, dO, dQ) stay in L2 while they do.
  int kv_heads_together = 1;

  // The key-major kernel's variant with E/mass row sums and the gate's terms (dkdv_kernel kRowSums); the
  // one without them is for neither a gate nor a sink (or a sink summed into sink_parts).
  FG_HOST_DEVICE bool needs_row_sums() const { return need_E || a.has_gate; }

  FG_HOST_DEVICE int64_t row_index(int64_t b, int64_t h, int64_t t) const { return (b * a.HQ + h) * a.T + t; }
  FG_HOST_DEVICE int64_t key_rows() const { return a.Tk > 0 ? a.Tk : a.T; }
  FG_HOST_DEVICE int64_t key_index(int64_t b, int64_t h, int64_t t) const { return (b * a.HQ + h) * key_rows() + t; }
  FG_HOST_DEVICE int64_t kv_row_index(int64_t part, int64_t b, int64_t hk, int64_t t) const {
    return ((part * a.B + b) * a.H + hk) * key_rows() + t;
  }
};

// dq_acc's layout (the one place for this rule): per (b, query head) dq_acc_rows_per_head rows of K16 floats;
// sequence n starts at row dq_row (16-aligned, 16-row groups clear of the next sequence's), and each 16-row group
// of a sequence is stored in MMA accumulator order: its 16 x 8 block of columns 8C.. is 128 consecutive
// floats, where lane 4g + c of an m16n8 fragment (rows g, g+8; columns 2c, 2c+1) keeps its four values at
// 4 (4g + c) .. +3. So a warp adds a whole block with one 16-byte reduction per lane, 512 consecutive bytes
// (plain rows put the block on eight cache lines: the dK/dV kernel ran 7-15% slower at D128-D256 on the H200,
// measured on the H200). Rows of a group past the sequence's end are padding nobody reads.
FG_HOST_DEVICE int64_t dq_acc_rows_per_head(const AttentionParams& a) {
  const int64_t rows = a.packed ? a.T + 16 * a.num_seqs : a.T;  // a group may start 15 rows after a sequence
  return (rows + 15) / 16 * 16;
}
// Floats of the whole accumulator.
FG_HOST_DEVICE int64_t dq_acc_floats(const AttentionParams& a, int K16) {
  return a.B * a.HQ * dq_acc_rows_per_head(a) * K16;
}
// Packed: row of local position 0 of sequence n (start: its first token) inside a query head's rows.
FG_HOST_DEVICE int64_t dq_packed_row(int64_t n, int64_t start) { return (start + 16 * n) / 16 * 16; }
// Row of local position 0 of sequence n (batch b when dense; start: its first token) in query head h.
FG_HOST_DEVICE int64_t dq_row(const AttentionParams& a, int64_t b, int64_t h, int64_t n, int64_t start) {
  return (b * a.HQ + h) * dq_acc_rows_per_head(a) + (a.packed ? dq_packed_row(n, start) : 0);
}
// Float index of local row i, column d of the sequence whose row 0 is row0 (dq_row).
FG_HOST_DEVICE int64_t dq_acc_offset(int64_t row0, int i, int d, int K16) {
  const int r = i & 15;
  return (row0 + (i - r)) * K16 + (d & ~7) * 16 + 4 * (4 * (r & 7) + ((d & 7) >> 1)) + 2 * (r >> 3) + (d & 1);
}

// The deterministic Hopper backward adds each block of `rows` dQ rows (a step's query tile) in the order of the
// key tiles, counted per block (the one place for this rule): per (b, query head) dq_order_blocks blocks, and
// sequence n's blocks start at start / rows + n (packed), so that no two sequences share one.
FG_HOST_DEVICE int64_t dq_order_blocks(const AttentionParams& a, int rows) {
  return (a.T + rows - 1) / rows + (a.packed ? a.num_seqs : 0);
}
FG_HOST_DEVICE int64_t dq_order_index(const AttentionParams& a, int64_t b, int64_t h, int64_t n, int64_t start, int i,
                                      int rows) {
  return (b * a.HQ + h) * dq_order_blocks(a, rows) + (a.packed ? start / rows + n : 0) + i / rows;
}

// The Hopper dK/dV kernels' item `item` (of num_key_tiles * H): its kv head and its place in the key tiles' order.
// The kv heads come in groups of p.kv_heads_together; inside a group the key tiles come in order (heaviest first),
// the group's heads taking turns at each tile.
struct KeyItem {
  int64_t hk, order;
};
FG_HOST_DEVICE KeyItem key_item(const BackwardParams& p, int64_t num_key_tiles, int64_t item) {
  const int64_t together = p.kv_heads_together, per_group = together * num_key_tiles;
  const int64_t group = item / per_group, in_group = item - group * per_group;
  const int64_t heads = p.a.H - group * together < together ? p.a.H - group * together : together;
  return {group * together + in_group % heads, in_group / heads};
}

// sink_parts' layout: [kv head][key tile order][query head of the group][8 consumer warps].
FG_HOST_DEVICE int64_t sink_part_index(const BackwardParams& p, int64_t hk, int64_t order, int64_t h, int warp) {
  return ((hk * p.sink_part_tiles + order) * p.a.group + (h - hk * p.a.group)) * 8 + warp;
}
FG_HOST_DEVICE int64_t sink_part_count(const BackwardParams& p) { return p.a.H * p.sink_part_tiles * p.a.group * 8; }

// A slice pair's backward (attention_backward_slice): the tensors as given ([B,T,heads(,dim)] views; lse, D, the
// cumulative gates and their gradients fp32), the rows shifted against the keys as in the forward
// (AttentionParams::key_shift, its window), and a workspace row per query row for the sink's parts.
struct SliceBackwardParams {
  TokenHeadTensor q, k, v, dout, lse, D, gate_q, gate_k;
  TokenHeadTensor dq, dk, dv, dgate_q, dgate_k;
  const float* sink = nullptr;
  float* dsink = nullptr;
  float* dsink_rows = nullptr;  // [B][HQ][Tq] workspace: -exp(sink - lse) D per row
  int64_t B = 0, Tq = 0, Tk = 0, HQ = 0, H = 0, group = 1;
  int K = 0, V = 0;
  int shift = 0, window = -1;
  float scale = 0;
  ElementType dtype = ElementType::bf16;
  bool has_gate = false, has_sink = false;
};

}  // namespace flashgate::cuda::bwd
