// Host-side entry points of the serving kernels (plain C++: serving.cpp plans and calls these; the kernels
// live in the .cu files next to this header).
#pragma once

#include "cuda/common/serving_params.h"

struct CUstream_st;

namespace flashgate::cuda {

// The mma kernel instantiations: cache kind x padded head dims (KP, VP) x rows per CTA (16, or 8 with keys as
// the mma's M: PagedTile::kKeysAsM). A request takes the first entry of its cache kind whose dims cover K and V
// and whose rows cover its row blocks'. Each paged_mma_<kind>.cu instantiates its kind's list.
#define FLASHGATE_PAGED_HEADS_16BIT(X, kind)                                                                       \
  X(kind, 64, 64, 8) X(kind, 64, 64, 16) X(kind, 128, 128, 8) X(kind, 128, 128, 16) X(kind, 256, 256, 16)            \
      X(kind, 512, 512, 16) X(kind, 576, 512, 16)
#define FLASHGATE_PAGED_HEADS_FP8(X, kind)                                                                      \
  X(kind, 64, 64, 8) X(kind, 64, 64, 16) X(kind, 128, 128, 8) X(kind, 128, 128, 16) X(kind, 256, 256, 16)            \
      X(kind, 512, 512, 16) X(kind, 576, 512, 16)

// Shared memory of one mma instantiation, for the planner's choice of pipeline depth.
struct PagedKernelShape {
  int stage_bytes = 0;    // one pipeline stage (K and V rows of keys_per_stage keys, fp8 scales)
  int fixed_bytes = 0;    // query fragments, row facts, the final merge's row facts
  int reduce_bytes = 0;   // the final cross-warp merge where it takes the ring from its start (else 0)
  int keys_per_stage = 0;
  bool heads_in_turn = false;  // takes ServingParams::heads_per_cta > 1
  int target_ctas_per_sm = 1;  // CTAs per SM its registers are budgeted for (__launch_bounds__)
  bool shallow_ring = false;   // the shallowest pipeline that keeps that many CTAs (choose_stages)
  int split_ctas_per_sm = 0;   // CTAs per SM a split launch fills at the tile's own dims (0: all; PagedTile)
  int smem_bytes(int stages) const {
    const int pipe = stages * stage_bytes;
    return fixed_bytes + (pipe > reduce_bytes ? pipe : reduce_bytes);
  }
};

template <CacheKind C, int KP, int VP, int ROWS>
struct PagedMma {
  static PagedKernelShape shape();
  // Resident CTAs per SM of device `device` at that pipeline depth (raises the kernel's shared memory
  // limit as needed).
  static int occupancy(int stages, int device);
  // Grid: p.row_blocks x ceil(p.H / p.heads_per_cta) x p.num_splits.
  static void launch(const ServingParams& p, int stages, CUstream_st* stream);
};

// Every mma instantiation, for lookup by (cache kind, K, V, rows).
struct PagedMmaEntry {
  CacheKind cache;
  int kp, vp, rows;
  PagedKernelShape (*shape)();
  int (*occupancy)(int stages, int device);
  void (*launch)(const ServingParams&, int stages, CUstream_st*);
};
// The entry for a cache kind and head dims whose CTAs take at least `rows` rows, or nullptr when none covers them.
const PagedMmaEntry* find_paged_mma(CacheKind cache, int K, int V, int rows);

// The fp32 fallback (any dtype, any alignment, no split): one CTA per (query row, query head).
void launch_paged_simt(const ServingParams& p, CUstream_st* stream);

}  // namespace flashgate::cuda
