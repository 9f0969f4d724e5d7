// sm_90: the dK/dV kernel's dQ tile of a step goes to the fp32 accumulator dq_acc through shared memory and
// the bulk-copy engine (one cp.reduce.async.bulk per row) instead of a vector atomic per fragment pair per
// thread. Those atomics held their 64-bit address registers until the full LSU queue took them, which
// stalled the next step's instructions that reuse the registers (~10% of the D128 samples).
// Protocol (see cuda/ptx/bulk_reduce.h): every thread store()s its fragments and fences; after the next CTA
// barrier one warp send()s the rows; that warp wait_read()s before the barrier that precedes the next
// store()s, and finish()es before exit.
#pragma once

#include <cstdint>

#include "cuda/ptx/bulk_reduce.h"

namespace flashgate::cuda::bwd {

template <int kRows, int kCols>
struct DqTile {
  // Rows padded by 8 floats: the fragment stores (rows g, columns 2c of 8 lanes x 4) then hit 32 distinct
  // banks per half warp, and every row start stays 16-byte aligned for the bulk copy.
  static constexpr int kStride = kCols + 8;
  static constexpr size_t kBytes = size_t{kRows} * kStride * sizeof(float);
  float* tile;

  // A warp's MT x NT fragments at tile rows m0.., columns n0.. (pairs (g, 2c) and (g+8, 2c) of each).
  template <int MT, int NT>
  __device__ __forceinline__ void store(const float (&x)[MT][NT][4], int m0, int n0, int lane) const {
    const int g = lane / 4, c = lane % 4;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        float* at = tile + (m0 + mt * 16 + g) * kStride + n0 + nt * 8 + 2 * c;
        *reinterpret_cast<float2*>(at) = make_float2(x[mt][nt][0], x[mt][nt][1]);
        *reinterpret_cast<float2*>(at + 8 * kStride) = make_float2(x[mt][nt][2], x[mt][nt][3]);
      }
  }
  // After the last store() of the step: make the stores visible to the copy engine.
  __device__ __forceinline__ static void fence() { ptx::fence_proxy_async_shared(); }

  // One warp, after the barrier that follows the stores: tile rows [0, rows) += into dq rows dst,
  // dst + row_stride, ... (`bytes` per row: the dQ columns that exist).
  __device__ __forceinline__ void send(float* dst, int64_t row_stride, int rows, uint32_t bytes, int lane) const {
    for (int r = lane; r < rows; r += 32) ptx::bulk_reduce_add_f32(dst + r * row_stride, tile + r * kStride, bytes);
    ptx::bulk_commit();
  }
  __device__ __forceinline__ static void wait_read() { ptx::bulk_wait_read<0>(); }
  __device__ __forceinline__ static void finish() { ptx::bulk_wait<0>(); }
};

}  // namespace flashgate::cuda::bwd
