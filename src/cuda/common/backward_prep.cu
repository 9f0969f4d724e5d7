// The backward's row pre-kernel: per (b, query head, t) row, D = o·do in fp32 from the stored output (plus its
// rounding residual where the forward kept it: common/o_residual.h) and a copy of lse into the contiguous
// [B][HQ][T] layout the main kernels read; and it clears the dq accumulator (where there is one) for the dK/dV
// kernels' adds. A group of lanes per row reads it in 16-byte chunks (rows that allow it), the groups of a block
// take consecutive t of one head.
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

// Rows per group of lanes: their loads go out together (one row's chunks left the pass latency-bound at about
// 60% of the copy bandwidth).
constexpr int kRowsPerGroup = 4;

// `vec`: o and do rows (and the residual's, where given) are aligned to their chunks and V is a whole number of
// chunks. With a dq accumulator (`zero_dq`) the same grid also clears it for the dK/dV kernels' adds. Three blocks a
// multiprocessor (80 registers, no spills) ran 10% faster than the two that 104 registers left room for.
template <class T, int kLanes>
__global__ void __launch_bounds__(kThreads, 3) prepare_rows_kernel(BackwardParams p, bool vec, int64_t zero_dq) {
  constexpr int kChunk = 16 / static_cast<int>(sizeof(T)), kStride = kThreads / kLanes;
  using Codes = std::conditional_t<kChunk == 8, uint2, uint32_t>;  // kChunk residual bytes
  const int V = p.a.V;
  const bool codes = p.a.o_residual.data != nullptr;
  for_each_row_group<kLanes, kThreads, kRowsPerGroup>(p.a.B, p.a.HQ, p.a.T, [&](int64_t b, int64_t h, int64_t t0,
                                                                               int lane) {
    // The group's rows are kStride tokens apart; those before T are a prefix of its kRowsPerGroup.
    const int64_t left = t0 < p.a.T ? (p.a.T - t0 + kStride - 1) / kStride : 0;
    const int rows = left < kRowsPerGroup ? static_cast<int>(left) : kRowsPerGroup;
    const T* o = p.a.o.row<T>(b, t0, h);
    const T* d = p.dout.row<T>(b, t0, h);
    const int8_t* r = codes ? p.a.o_residual.row<int8_t>(b, t0, h) : nullptr;
    const int64_t o_step = kStride * p.a.o.token_stride, d_step = kStride * p.dout.token_stride;
    const int64_t r_step = kStride * p.a.o_residual.token_stride;
    float acc[kRowsPerGroup] = {};
    if (vec) {
      for (int c = lane * kChunk; c < V; c += kLanes * kChunk) {
        uint4 oc[kRowsPerGroup], dc[kRowsPerGroup];
        Codes rc[kRowsPerGroup];
#pragma unroll
        for (int k = 0; k < kRowsPerGroup; ++k) {
          if (k >= rows) continue;
          oc[k] = *reinterpret_cast<const uint4*>(o + k * o_step + c);
          dc[k] = *reinterpret_cast<const uint4*>(d + k * d_step + c);
          if (codes) rc[k] = *reinterpret_cast<const Codes*>(r + k * r_step + c);
        }
#pragma unroll
        for (int k = 0; k < kRowsPerGroup; ++k) {
          if (k >= rows) continue;
          acc[k] = codes ? dot_chunk<T>(oc[k], rc[k], dc[k], acc[k]) : dot_chunk<T>(oc[k], dc[k], acc[k]);
        }
      }
    } else {
#pragma unroll
      for (int k = 0; k < kRowsPerGroup; ++k) {
        if (k >= rows) continue;
        const T *ok = o + k * o_step, *dk = d + k * d_step;
        const int8_t* rk = codes ? r + k * r_step : nullptr;
        for (int c = lane; c < V; c += kLanes) {
          float oc = to_float(ok[c]);
          if (codes) oc += residual_value<T>(rk[c], oc);
          acc[k] += oc * to_float(dk[c]);
        }
      }
    }
#pragma unroll
    for (int k = 0; k < kRowsPerGroup; ++k) {
      const int64_t t = t0 + k * kStride;
      acc[k] = group_sum<kLanes>(acc[k]);
      if (k < rows && lane == 0) {
        const int64_t i = p.row_index(b, h, t);
        p.D[i] = acc[k];
        p.lse[i] = *p.a.lse.row<const float>(b, t, h);
      }
    }
  });
  // dq_acc (16-byte aligned, a whole number of float4: rows of K16 floats) in a grid-stride loop.
  const int64_t threads = int64_t{gridDim.x} * gridDim.y * kThreads;
  const int64_t first = (int64_t{blockIdx.y} * gridDim.x + blockIdx.x) * kThreads + threadIdx.x;
  for (int64_t i = first; i < zero_dq; i += threads) reinterpret_cast<float4*>(p.dq_acc)[i] = float4{0.f, 0.f, 0.f, 0.f};
}

}  // namespace

void launch_prepare_rows(const BackwardParams& p, cudaStream_t stream) {
  if (p.a.B * p.a.HQ * p.a.T == 0) return;
  const int64_t zero_dq = p.dq_acc ? dq_acc_floats(p.a, p.K16) / 4 : 0;  // K16 is a multiple of 16
  with_element_type(p.a.dtype, [&](auto tag) {
    using T = decltype(tag);
    constexpr int kChunk = 16 / static_cast<int>(sizeof(T));
    const bool vec = p.a.o_width >= 16 && p.do_width >= 16 && p.a.V % kChunk == 0 &&
                     (!p.a.o_residual.data || p.a.o_residual_width >= kChunk);
    with_lanes_per_row(p.a.V, kChunk, [&](auto lanes) {
      constexpr int kLanes = decltype(lanes)::value;
      const dim3 grid = row_group_grid(p.a.B * p.a.HQ, p.a.T, kThreads / kLanes * kRowsPerGroup);
      prepare_rows_kernel<T, kLanes><<<grid, kThreads, 0, stream>>>(p, vec, zero_dq);
    });
  });
  FLASHGATE_CHECK_LAUNCH("prepare_rows_kernel");
}

}  // namespace flashgate::cuda::bwd
