// The portable backward's tile configurations per head-dim bucket (the MMA kernels' shapes and shared memory).
#pragma once

#include <cstddef>
#include <cstdint>

#include "cuda/common/backward_params.h"

namespace flashgate::cuda::bwd {

// Tiles of the MMA kernels per head-dim bucket (max(K16, V16) <= kD). 8 warps per CTA.
//   key-major dK/dV kernel: kBc keys held, query tiles of kBr rows, dK/dV accumulators for kSliceKV columns;
//                           one CTA per SM. Warp grids (rows x 8/rows warps) of its three products:
//                           kScoreWarpRows for S/dP/P/dS [kBr x kBc], kKvWarpRows for dK/dV [kBc x kSliceKV],
//                           kDqWarpRows for dQ [kBr x kSliceKV] (computed in kDqChunk-column pieces).
//                           Warp tiles of 32 x 32 or more (two m16 tiles) give each warp 8-16 independent
//                           MMAs per operand fetch, which halves the ldmatrix traffic per MMA against 16-row
//                           warp tiles, and 128-key CTAs halve the Q/dO loads and dQ atomics per FLOP
//                           (FlashAttention-2's steps: 128 x 128 at D64, where 64-row steps left the short
//                           GEMMs too little work per barrier and row-term setup; 128 x 64 at D128).
//                           kScorePasses (without row sums) / kScorePassesRowSums (gate or sink): S in
//                           column passes next to dP (registers: with 128-row steps D64 needs 4 to stay
//                           spill-free). These and kDqChunk only shape the dK/dV kernel's registers, so
//                           they may differ per arch (kSm8xDevicePass);
//                           kPeelScorePasses: the S passes' first k-step outside their loop (zero C
//                           operand instead of zeroed registers) without row sums (with them D64 spilled
//                           32 B); dP's always is;
//   query-major dq kernel:  kQueryRows rows held, key tiles of kKeyCols, dq accumulators for kSliceQ columns;
//                           kMinBlocksDq CTAs per SM (2 fit in 128 registers without spills at D64/D128).
template <int kD>
struct TileConfig;
template <>
struct TileConfig<64> {
  static constexpr int kBc = 128, kBr = 128, kSliceKV = 64, kScoreWarpRows = 4, kKvWarpRows = 4, kDqWarpRows = 4,
                       kDqChunk = 32;
  // sm_8x: one n8 column of S per pass (the sum variant spilled 4 / 12 B with two, -Xptxas -v).
  static constexpr int kScorePasses = kSm8xDevicePass ? 8 : 4, kScorePassesRowSums = kScorePasses;
  static constexpr int kQueryRows = 64, kKeyCols = 64, kSliceQ = 64, kMinBlocksDq = 2;
  static constexpr bool kPeelScorePasses = true;
};
template <>
struct TileConfig<128> {
  static constexpr int kBc = 128, kBr = 64, kSliceKV = 128, kScoreWarpRows = 2, kKvWarpRows = 4, kDqWarpRows = 2,
                       kDqChunk = 32;
  // sm_8x sum variant: 4 passes (2 spilled 28 B guarded; 4 for both variants spills the plain kFull 44 B).
  static constexpr int kScorePasses = 2, kScorePassesRowSums = kSm8xDevicePass ? 4 : 2;
  static constexpr int kQueryRows = 64, kKeyCols = 64, kSliceQ = 128, kMinBlocksDq = 2;
  static constexpr bool kPeelScorePasses = false;  // peeled S passes spilled the plain kFull kernel 56 B
};
template <>
struct TileConfig<256> {
  static constexpr int kBc = 64, kBr = 64, kSliceKV = 256, kScoreWarpRows = 4, kKvWarpRows = 2, kDqWarpRows = 2,
                       kDqChunk = kSm8xDevicePass ? 16 : 32;
  // sm_8x: 16-column dQ chunks and 4 S passes (kFull spilled 36 B plain, 32 B with sums, LDL in the loop).
  // sm_90 without row sums: S in one pass (16 ldmatrix per warp and step fewer than two passes, which fetch
  // Q's fragment twice; spill-free at 253 registers); with row sums two (their registers).
  static constexpr int kScorePasses = kSm8xDevicePass ? 4 : 1, kScorePassesRowSums = kSm8xDevicePass ? 4 : 2;
  static constexpr int kQueryRows = 64, kKeyCols = 32, kSliceQ = 256, kMinBlocksDq = 1;
  static constexpr bool kPeelScorePasses = true;
};
template <>
struct TileConfig<512> {
  static constexpr int kBc = 32, kBr = 32, kSliceKV = 256, kScoreWarpRows = 2, kKvWarpRows = 2, kDqWarpRows = 2,
                       kDqChunk = 64, kScorePasses = 1, kScorePassesRowSums = 1;
  static constexpr int kQueryRows = 32, kKeyCols = 32, kSliceQ = 512, kMinBlocksDq = 1;
  static constexpr bool kPeelScorePasses = true;
};

constexpr int kMmaThreads = 256;

// Shared memory of the two MMA kernels (2-byte elements), with `stages` buffers of the tiles that change
// per loop step (Q/dO for dK/dV, K/V for dq; cp.async prefetch of the next step when 2):
//   dK/dV: K, V tiles [kBc][kD+8]; P, dS [kBr][kBc+8]; fp32 column partials [kScoreWarpRows][kBc];
//          stages x ((Q, dO) [kBr][kD+8], fp32 step terms: lse, D, row Gc [kBr] each, column Gc [kBc]).
//   dq:    Q, dO tiles [rows][kD+8]; stages x (K, V) [cols][kD+8]; dS [rows][cols+8]; fp32 row partials.
template <int kD>
constexpr size_t dkdv_smem_bytes(int stages) {
  using C = TileConfig<kD>;
  return 2 * C::kBc * (kD + 8) * 2 + 2 * C::kBr * (C::kBc + 8) * 2 + C::kScoreWarpRows * C::kBc * sizeof(float) +
         stages * (2 * C::kBr * (kD + 8) * 2 + (3 * C::kBr + C::kBc) * sizeof(float));
}
template <int kD>
constexpr size_t dq_smem_bytes(int stages) {
  using C = TileConfig<kD>;
  return (2 * C::kQueryRows + stages * 2 * C::kKeyCols) * (kD + 8) * 2 + C::kQueryRows * (C::kKeyCols + 8) * 2 +
         (8 / (C::kQueryRows / 16)) * C::kQueryRows * sizeof(float);
}

// The same numbers at run time, for the host's planning.
struct TileSizes {
  int key_tile = 0, query_tile = 0, slice_kv = 0;   // dK/dV kernel
  int dq_rows = 0, dq_slice = 0, dq_min_blocks = 1; // dq kernel
  size_t smem_dkdv[3] = {}, smem_dq[3] = {};        // by stage count (1, 2)
};

template <int kD>
constexpr TileSizes tile_sizes_of() {
  using C = TileConfig<kD>;
  TileSizes t;
  t.key_tile = C::kBc, t.query_tile = C::kBr, t.slice_kv = C::kSliceKV;
  t.dq_rows = C::kQueryRows, t.dq_slice = C::kSliceQ, t.dq_min_blocks = C::kMinBlocksDq;
  for (int s = 1; s <= 2; ++s) t.smem_dkdv[s] = dkdv_smem_bytes<kD>(s), t.smem_dq[s] = dq_smem_bytes<kD>(s);
  return t;
}

inline TileSizes tile_sizes(int bucket) {
  switch (bucket) {
    case 64: return tile_sizes_of<64>();
    case 128: return tile_sizes_of<128>();
    case 256: return tile_sizes_of<256>();
    default: return tile_sizes_of<512>();
  }
}

// The bucket serving padded head dims K16, V16 (both <= 512).
inline int bucket_for(int K16, int V16) {
  const int d = K16 > V16 ? K16 : V16;
  return d <= 64 ? 64 : d <= 128 ? 128 : d <= 256 ? 256 : 512;
}

}  // namespace flashgate::cuda::bwd
