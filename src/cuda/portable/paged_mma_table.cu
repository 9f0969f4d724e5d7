// The table of mma instantiations (the lists in paged_launch.h), looked up by cache kind and head dims.
#include "cuda/portable/paged_launch.h"

namespace flashgate::cuda {
namespace {

#define FLASHGATE_PAGED_ENTRY(kind, kp, vp)                                                \
  PagedMmaEntry{CacheKind::kind, kp, vp, &PagedMma<CacheKind::kind, kp, vp>::shape,       \
                &PagedMma<CacheKind::kind, kp, vp>::occupancy, &PagedMma<CacheKind::kind, kp, vp>::launch},

const PagedMmaEntry kEntries[] = {
    FLASHGATE_PAGED_HEADS_16BIT(FLASHGATE_PAGED_ENTRY, f16)
    FLASHGATE_PAGED_HEADS_16BIT(FLASHGATE_PAGED_ENTRY, bf16)
    FLASHGATE_PAGED_HEADS_FP8(FLASHGATE_PAGED_ENTRY, e4m3)
    FLASHGATE_PAGED_HEADS_FP8(FLASHGATE_PAGED_ENTRY, e4m3_tokens)
};

}  // namespace

const PagedMmaEntry* find_paged_mma(CacheKind cache, int K, int V) {
  for (const PagedMmaEntry& e : kEntries)  // ascending dims within each kind: the first fit is the smallest
    if (e.cache == cache && K <= e.kp && V <= e.vp) return &e;
  return nullptr;
}

}  // namespace flashgate::cuda
