// A slice pair's gate terms in the backward (the one place for this rule, portable and Hopper dK/dV kernels alike):
// far from the sequence's start the cumulative gate Gc and lse run to hundreds or more while what enters a visible
// score, Gc_i - Gc_j - lse_i, is small. Rounded at the scale of Gc, P would keep a relative error of ~1e-5, which
// the row sums of dS (a slice's dgate_q, E - D mass: a cancellation) would show. So both the row term and the key
// term are taken relative to the keys' Gc at one key of the key tile (the anchor).
#pragma once

#include "cuda/common/host_device.h"

namespace flashgate::cuda::bwd {

// The key of tile j0.. (tile_keys keys, key_len keys in all) whose Gc anchors the tile's gate terms: its middle key,
// or its last where the keys end sooner.
FG_HOST_DEVICE int gate_anchor_key(int j0, int tile_keys, int key_len) {
  const int last = key_len - 1 - j0;
  return j0 + (tile_keys / 2 < last ? tile_keys / 2 : last);
}

#if defined(__CUDACC__)
// Gc_i - lse_i - anchor, rounded once at the scale of the result: the difference Gc_i - lse_i exactly as a float
// pair (Knuth's TwoSum), then the anchor taken from its leading part. With anchor 0 the result is Gc_i - lse_i
// rounded once, bit for bit the plain difference.
__device__ __forceinline__ float anchored_gate_term(float gc, float lse, float anchor) {
  const float w = __fsub_rn(gc, lse);
  const float b = __fsub_rn(w, gc);  // the part of w that came from -lse
  const float err = __fadd_rn(__fsub_rn(gc, __fsub_rn(w, b)), __fsub_rn(__fsub_rn(0.f, lse), b));
  return __fadd_rn(__fsub_rn(w, anchor), err);
}
#endif

}  // namespace flashgate::cuda::bwd
