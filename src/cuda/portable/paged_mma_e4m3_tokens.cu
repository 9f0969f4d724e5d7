// mma serving kernels for fp8 e4m3 caches with a per-token scale on K or V (the head-dim list lives in
// paged_launch.h).
#include "cuda/portable/paged_mma.cuh"

FLASHGATE_PAGED_HEADS_FP8(FLASHGATE_PAGED_INSTANTIATE, e4m3_tokens)
