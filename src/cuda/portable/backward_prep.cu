// The backward's row pre-kernel: one warp per (b, query head, t) row computes D = o·do in fp32 from the
// stored output and copies lse into the contiguous [B][HQ][T] layout the main kernels read.
#include "cuda/common/cuda_check.h"
#include "cuda/common/element.h"
#include "cuda/portable/backward_kernels.h"
#include "cuda/portable/backward_util.cuh"

namespace flashgate::cuda::bwd {
namespace {

constexpr int kThreads = 256, kWarps = kThreads / 32;

template <class T>
__global__ void __launch_bounds__(kThreads) prepare_rows_kernel(BackwardParams p, int64_t rows) {
  const int lane = threadIdx.x % 32;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kWarps;
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32; r < rows; r += stride) {
    const int64_t t = r % p.a.T, bh = r / p.a.T, h = bh % p.a.HQ, b = bh / p.a.HQ;
    const T* o = p.a.o.row<T>(b, t, h);
    const T* d = p.dout.row<T>(b, t, h);
    float acc = 0.f;
    for (int c = lane; c < p.a.V; c += 32) acc += to_float(o[c]) * to_float(d[c]);
    acc = warp_sum(acc);
    if (lane == 0) {
      p.D[r] = acc;
      p.lse[r] = *p.a.lse.row<const float>(b, t, h);
    }
  }
}

}  // namespace

void launch_prepare_rows(const BackwardParams& p, cudaStream_t stream) {
  const int64_t rows = p.a.B * p.a.HQ * p.a.T;
  if (rows == 0) return;
  with_element_type(p.a.dtype, [&](auto tag) {
    using T = decltype(tag);
    prepare_rows_kernel<T><<<grid_for(rows, kWarps), kThreads, 0, stream>>>(p, rows);
  });
  FLASHGATE_CHECK_LAUNCH("prepare_rows_kernel");
}

}  // namespace flashgate::cuda::bwd
