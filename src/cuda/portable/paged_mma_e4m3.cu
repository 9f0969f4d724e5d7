// mma serving kernels for fp8 e4m3 caches with per-tensor scales (the head-dim list lives in paged_launch.h).
#include "cuda/portable/paged_mma.cuh"

FLASHGATE_PAGED_HEADS_FP8(FLASHGATE_PAGED_INSTANTIATE, e4m3)
