// mma serving kernels for bf16 caches (the head-dim list lives in paged_launch.h).
#include "cuda/portable/paged_mma.cuh"

FLASHGATE_PAGED_HEADS_16BIT(FLASHGATE_PAGED_INSTANTIATE, bf16)
