// The backward's row pre-kernel: per (b, query head, t) row, D = o·do in fp32 from the stored output (plus its
// rounding residual where the forward kept it: common/o_residual.h) and a copy of lse into the contiguous
// [B][HQ][T] layout the main kernels read. A group of lanes per row reads it in 16-byte chunks (rows that allow
// it), the groups of a block take consecutive t of one head.
#include <cstdint>
#include <type_traits>

#include "cuda/common/backward_passes.h"
#include "cuda/common/backward_util.cuh"
#include "cuda/common/cuda_check.h"
#include "cuda/common/element.h"

namespace flashgate::cuda::bwd {
namespace {

constexpr int kThreads = 256;

// Adds the products of the `n` elements of two 16-byte chunks to acc.
template <class T>
__device__ __forceinline__ float dot_chunk(const uint4& x, const uint4& y, float acc) {
  constexpr int n = 16 / static_cast<int>(sizeof(T));
  const T* a = reinterpret_cast<const T*>(&x);
  const T* b = reinterpret_cast<const T*>(&y);
#pragma unroll
  for (int e = 0; e < n; ++e) acc += to_float(a[e]) * to_float(b[e]);
  return acc;
}

// The same with o's values corrected by their residual codes (one byte each).
template <class T, class Codes>
__device__ __forceinline__ float dot_chunk(const uint4& x, const Codes& codes, const uint4& y, float acc) {
  constexpr int n = 16 / static_cast<int>(sizeof(T));
  const T* a = reinterpret_cast<const T*>(&x);
  const int8_t* r = reinterpret_cast<const int8_t*>(&codes);
  const T* b = reinterpret_cast<const T*>(&y);
#pragma unroll
  for (int e = 0; e < n; ++e) {
    const float o = to_float(a[e]);
    acc += (o + residual_value<T>(r[e], o)) * to_float(b[e]);
  }
  return acc;
}

// `vec`: o and do rows (and the residual's, where given) are aligned to their chunks and V is a whole number of
// chunks.
template <class T, int kLanes>
__global__ void __launch_bounds__(kThreads) prepare_rows_kernel(BackwardParams p, bool vec) {
  constexpr int kChunk = 16 / static_cast<int>(sizeof(T));
  using Codes = std::conditional_t<kChunk == 8, uint2, uint32_t>;  // kChunk residual bytes
  const int V = p.a.V;
  for_each_row_group<kLanes, kThreads>(p.a.B, p.a.HQ, p.a.T, [&](int64_t b, int64_t h, int64_t t, int lane) {
    const bool row_ok = t < p.a.T;
    float acc = 0.f;
    if (row_ok) {
      const T* o = p.a.o.row<T>(b, t, h);
      const T* d = p.dout.row<T>(b, t, h);
      const int8_t* r = p.a.o_residual.data ? p.a.o_residual.row<int8_t>(b, t, h) : nullptr;
      if (vec) {
        for (int c = lane * kChunk; c < V; c += kLanes * kChunk) {
          const uint4 oc = *reinterpret_cast<const uint4*>(o + c), dc = *reinterpret_cast<const uint4*>(d + c);
          acc = r ? dot_chunk<T>(oc, *reinterpret_cast<const Codes*>(r + c), dc, acc) : dot_chunk<T>(oc, dc, acc);
        }
      } else {
        for (int c = lane; c < V; c += kLanes) {
          float oc = to_float(o[c]);
          if (r) oc += residual_value<T>(r[c], oc);
          acc += oc * to_float(d[c]);
        }
      }
    }
    acc = group_sum<kLanes>(acc);
    if (row_ok && lane == 0) {
      const int64_t r = p.row_index(b, h, t);
      p.D[r] = acc;
      p.lse[r] = *p.a.lse.row<const float>(b, t, h);
    }
  });
}

}  // namespace

void launch_prepare_rows(const BackwardParams& p, cudaStream_t stream) {
  if (p.a.B * p.a.HQ * p.a.T == 0) return;
  with_element_type(p.a.dtype, [&](auto tag) {
    using T = decltype(tag);
    constexpr int kChunk = 16 / static_cast<int>(sizeof(T));
    const bool vec = p.a.o_width >= 16 && p.do_width >= 16 && p.a.V % kChunk == 0 &&
                     (!p.a.o_residual.data || p.a.o_residual_width >= kChunk);
    with_lanes_per_row(p.a.V, kChunk, [&](auto lanes) {
      constexpr int kLanes = decltype(lanes)::value;
      const dim3 grid = row_group_grid(p.a.B * p.a.HQ, p.a.T, kThreads / kLanes);
      prepare_rows_kernel<T, kLanes><<<grid, kThreads, 0, stream>>>(p, vec);
    });
  });
  FLASHGATE_CHECK_LAUNCH("prepare_rows_kernel");
}

}  // namespace flashgate::cuda::bwd
