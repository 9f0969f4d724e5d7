// The table of mma instantiations (the lists in paged_launch.h), looked up by cache kind and head dims.
#include "cuda/portable/paged_launch.h"

namespace flashgate::cuda {
namespace {

#define FLASHGATE_PAGED_ENTRY(kind, kp, vp, rows)                                                      \
  PagedMmaEntry{CacheKind::kind, kp, vp, rows, &PagedMma<CacheKind::kind, kp, vp, rows>::shape,         \
                &PagedMma<CacheKind::kind, kp, vp, rows>::occupancy, &PagedMma<CacheKind::kind, kp, vp, rows>::launch},

const PagedMmaEntry kEntries[] = {
    FLASHGATE_PAGED_HEADS_16BIT(FLASHGATE_PAGED_ENTRY, f16)
    FLASHGATE_PAGED_HEADS_16BIT(FLASHGATE_PAGED_ENTRY, bf16)
    FLASHGATE_PAGED_HEADS_FP8(FLASHGATE_PAGED_ENTRY, e4m3)
    FLASHGATE_PAGED_HEADS_FP8(FLASHGATE_PAGED_ENTRY, e4m3_tokens)
};

}  // namespace

const PagedMmaEntry* find_paged_mma(CacheKind cache, int K, int V, int rows) {
  for (const PagedMmaEntry& e : kEntries)  // ascending dims, then rows, within each kind: the first fit is the smallest
    if (e.cache == cache && K <= e.kp && V <= e.vp && rows <= e.rows) return &e;
  return nullptr;
}

}  // namespace flashgate::cuda
