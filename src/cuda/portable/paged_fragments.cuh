// mma.sync m16n8k16 operand fragments of the serving kernels, built from raw cache bytes in shared memory
// with plain 16-byte loads (no ldmatrix), so that fp16/bf16 and fp8 e4m3 caches share one code path.
//
// Keys (B operand of S = Q K^T): lane (g, c) loads 16 bytes of key row g. The k (head-dim) order inside an
// mma is free as long as Q uses the same one, so each lane's fragments come from its own 16 bytes; the
// query fragments are staged once per CTA in that permuted order (key_dim()).
// Values (B operand of O += P V): b0 needs keys 2c and 2c+1 of one head dim, i.e. two rows. A lane loads
// 16 bytes (8 or 16 dims) of each of the rows 2c, 2c+1, 2c+8, 2c+9 and pairs them with byte permutes; the
// mma's n index (g) then maps to head dim g * kElemsPer16B + t in n-tile t (value_dim()), which the
// epilogue undoes.
// fp8 e4m3 becomes bf16 exactly: a shift and mask put the e4m3 bits into a bf16 worth x * 2^-120
// (subnormals included) and one bf16x2 multiply by 2^120 restores x; scales stay in fp32 outside the mma.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "cuda/portable/paged_params.h"
#include "cuda/ptx/mma.h"

namespace flashgate::cuda {

template <CacheKind C>
struct CacheTraits;

template <>
struct CacheTraits<CacheKind::f16> {
  using Mma = __half;             // mma operand type
  static constexpr int kBytes = 2;
  static constexpr bool kFp8 = false;
};
template <>
struct CacheTraits<CacheKind::bf16> {
  using Mma = __nv_bfloat16;
  static constexpr int kBytes = 2;
  static constexpr bool kFp8 = false;
};
template <>
struct CacheTraits<CacheKind::e4m3> {
  using Mma = __nv_bfloat16;      // exact for every e4m3 value; P keeps 16 bits through a hi/lo pair
  static constexpr int kBytes = 1;
  static constexpr bool kFp8 = true;
};

// bf16x2 of the e4m3 bytes 1 (low half) and 3 (high half) of w; bytes 0 and 2 are ignored.
__device__ __forceinline__ uint32_t e4m3_bytes13_to_bf16x2(uint32_t w) {
  const uint32_t scaled = (w & 0x80008000u) | ((w >> 4) & 0x07F007F0u);  // x * 2^-120, exact
  __nv_bfloat162 v = *reinterpret_cast<const __nv_bfloat162*>(&scaled);
  const __nv_bfloat162 two120 = __halves2bfloat162(__ushort_as_bfloat16(0x7B80), __ushort_as_bfloat16(0x7B80));
  v = __hmul2(v, two120);
  return *reinterpret_cast<uint32_t*>(&v);
}

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
    if constexpr (Tr::kFp8) return base + (half == 0 ? 1 + 2 * e : 2 * e);  // b0 = bytes 1,3; b1 = bytes 0,2
    else return base + 2 * half + e;
  }

  // B fragment of k-step `step` (0 .. kStepsPerKeyLoad-1) from one lane's 16 key bytes.
  __device__ static __forceinline__ void key_fragment(const uint32_t (&w)[4], int step, uint32_t (&b)[2]) {
    if constexpr (Tr::kFp8) {
      b[0] = e4m3_bytes13_to_bf16x2(w[step]);
      b[1] = e4m3_bytes13_to_bf16x2(w[step] << 8);
    } else {
      b[0] = w[2 * step];
      b[1] = w[2 * step + 1];
    }
  }

  // One register of a value B fragment: head dim t of the 16-byte chunks x (key a) and y (key a+1), as the
  // pair (key a: low half, key a+1: high half).
  __device__ static __forceinline__ uint32_t value_pair(const uint32_t (&x)[4], const uint32_t (&y)[4], int t) {
    if constexpr (Tr::kFp8) {
      const int u = t & 3;
      return e4m3_bytes13_to_bf16x2(__byte_perm(x[t >> 2], y[t >> 2], (u << 4) | ((u + 4) << 12)));
    } else {
      return __byte_perm(x[t >> 1], y[t >> 1], (t & 1) ? 0x7632 : 0x5410);
    }
  }

  // Head dim of accumulator column n of n-tile t in a value round starting at `round_base`.
  __host__ __device__ static constexpr int value_dim(int round_base, int n, int t) {
    return round_base + n * kElemsPer16B + t;
  }
};

__device__ __forceinline__ void lds128(uint32_t (&r)[4], const void* smem) {
  const uint4 v = *reinterpret_cast<const uint4*>(smem);
  r[0] = v.x, r[1] = v.y, r[2] = v.z, r[3] = v.w;
}

}  // namespace flashgate::cuda
