// mma.sync m16n8k16 operand fragments of the serving kernels, built from raw cache bytes in shared memory
// with plain 16-byte loads (no ldmatrix), so that fp16/bf16 and fp8 e4m3 caches share one code path.
//
// Keys (B operand of S = Q K^T): lane (g, c) loads 16 bytes of key row g. The k (head-dim) order inside an
// mma is free as long as Q uses the same one, so each lane's fragments come from its own 16 bytes; the
// query fragments are staged once per CTA in that permuted order (key_dim()).
// Values (B operand of O += P V): b0 needs keys 2c and 2c+1 of one head dim, i.e. two rows. A lane loads
// 16 bytes (8 or 16 dims; 8 bytes of 64-byte fp8 rows) of each of the rows 2c, 2c+1, 2c+8, 2c+9 and pairs them
// with byte permutes; the mma's n index (g) then maps to head dim g * (dims per load) + t in n-tile t
// (PagedTile::value_dim), which the epilogue undoes.
// fp8 e4m3 becomes f16 exactly, two values per conversion (ptx/cvt_fp8.h: one instruction on sm_89+), and
// both mmas run in f16: the kernel scales each query row by a power of two into f16 range and P is in
// [0, 1] (per-token V scales: normalised, see paged_kernel.cuh); scales stay in fp32 outside the mma.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "cuda/common/serving_params.h"
#include "cuda/ptx/cvt_fp8.h"
#include "cuda/ptx/mma.h"

namespace flashgate::cuda {

template <CacheKind C>
struct CacheTraits;

template <>
struct CacheTraits<CacheKind::f16> {
  using Mma = __half;             // mma operand type
  static constexpr int kBytes = 2;
  static constexpr bool kFp8 = false;
  static constexpr bool kTokenScales = false;  // per-token K or V scales (fp8 only)
};
template <>
struct CacheTraits<CacheKind::bf16> {
  using Mma = __nv_bfloat16;
  static constexpr int kBytes = 2;
  static constexpr bool kFp8 = false;
  static constexpr bool kTokenScales = false;
};
template <>
struct CacheTraits<CacheKind::e4m3> {
  using Mma = __half;             // exact for every e4m3 value; Q and P are brought into f16 range
  static constexpr int kBytes = 1;
  static constexpr bool kFp8 = true;
  static constexpr bool kTokenScales = false;
};
template <>
struct CacheTraits<CacheKind::e4m3_tokens> : CacheTraits<CacheKind::e4m3> {
  static constexpr bool kTokenScales = true;
};

template <CacheKind C>
struct Fragments {
  using Tr = CacheTraits<C>;
  static constexpr int kElemsPer16B = 16 / Tr::kBytes;   // E: 8 (16-bit) or 16 (fp8)
  static constexpr int kStepsPerKeyLoad = kElemsPer16B / 4;  // k-steps covered by one 16-byte key load
  static constexpr int kDimsPerKeyRound = 4 * kElemsPer16B;  // head dims covered by the 4 lanes of a key

  // Head dim behind element e (0, 1) of register `half` (0: b0 / a0,a1; 1: b1 / a2,a3) of lane column c in
  // k-step `ks`.
  __host__ __device__ static constexpr int key_dim(int ks, int c, int half, int e) {
    const int base = (ks / kStepsPerKeyLoad) * kDimsPerKeyRound + c * kElemsPer16B + (ks % kStepsPerKeyLoad) * 4;
    return base + 2 * half + e;  // fp8: b0 = bytes 0,1 and b1 = bytes 2,3 of the step's word
  }

  // B fragment of k-step `step` (0 .. kStepsPerKeyLoad-1) from one lane's 16 key bytes.
  __device__ static __forceinline__ void key_fragment(const uint32_t (&w)[4], int step, uint32_t (&b)[2]) {
    if constexpr (Tr::kFp8) {
      b[0] = ptx::e4m3x2_lo_to_f16x2(w[step]);
      b[1] = ptx::e4m3x2_hi_to_f16x2(w[step]);
    } else {
      b[0] = w[2 * step];
      b[1] = w[2 * step + 1];
    }
  }

  // One register of a value B fragment: head dim t of the 16-byte (or 8-byte: N = 2) loads x (key a) and y (key a+1),
  // as the pair (key a: low half, key a+1: high half).
  template <int N>
  __device__ static __forceinline__ uint32_t value_pair(const uint32_t (&x)[N], const uint32_t (&y)[N], int t) {
    if constexpr (Tr::kFp8) {
      // Bytes u, u+1 of both words interleaved (x_u, y_u, x_u+1, y_u+1): dims t and t^1 of both keys, so the
      // two calls of a pair share one permute.
      const int u = t & 2;
      const uint32_t xy = __byte_perm(x[t >> 2], y[t >> 2], u | ((u + 4) << 4) | ((u + 1) << 8) | ((u + 5) << 12));
      return (t & 1) ? ptx::e4m3x2_hi_to_f16x2(xy) : ptx::e4m3x2_lo_to_f16x2(xy);
    } else {
      return __byte_perm(x[t >> 1], y[t >> 1], (t & 1) ? 0x7632 : 0x5410);
    }
  }
};

__device__ __forceinline__ void lds128(uint32_t (&r)[4], const void* smem) {
  const uint4 v = *reinterpret_cast<const uint4*>(smem);
  r[0] = v.x, r[1] = v.y, r[2] = v.z, r[3] = v.w;
}
__device__ __forceinline__ void lds64(uint32_t (&r)[2], const void* smem) {
  const uint2 v = *reinterpret_cast<const uint2*>(smem);
  r[0] = v.x, r[1] = v.y;
}
__device__ __forceinline__ void lds_words(uint32_t (&r)[4], const void* smem) { lds128(r, smem); }
__device__ __forceinline__ void lds_words(uint32_t (&r)[2], const void* smem) { lds64(r, smem); }

}  // namespace flashgate::cuda
