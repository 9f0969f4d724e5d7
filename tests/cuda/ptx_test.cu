// GPU tests of the PTX primitives layer (src/cuda/ptx): mma.sync m16n8k16 (fp16, bf16) against a host
// matmul, ldmatrix (x4/x2, plain/transposed) and movmatrix against the fragment layout they document, and cp.async
// (16/8/4 bytes) with zero-fill. Inputs are fresh random draws; outputs start poisoned.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "cuda/ptx/cp_async.h"
#include "cuda/ptx/ldmatrix.h"
#include "cuda/ptx/mma.h"
#include "harness/owned_tensor.h"
#include "support/compare.h"
#include "support/device_vector.h"

namespace {

using fgtest::DeviceVector;

using flashgate::ptx::cp_async_16;
using flashgate::ptx::cp_async_4;
using flashgate::ptx::cp_async_8;

// ---- mma.sync m16n8k16 -------------------------------------------------------------------------------------

// A [16][16] row-major, B [16 k][8 n] row-major, D [16][8]; fragments built from the layout in mma.h.
template <class T>
__global__ void mma_kernel(const T* A, const T* B, float* D) {
  const int lane = threadIdx.x, g = lane / 4, c = lane % 4;
  auto pair = [](T lo, T hi) {
    uint16_t l, h;
    memcpy(&l, &lo, 2);
    memcpy(&h, &hi, 2);
    return static_cast<uint32_t>(l) | (static_cast<uint32_t>(h) << 16);
  };
  auto a_at = [&](int r, int k) { return A[r * 16 + k]; };
  auto b_at = [&](int k, int n) { return B[k * 8 + n]; };
  const uint32_t a[4] = {pair(a_at(g, 2 * c), a_at(g, 2 * c + 1)), pair(a_at(g + 8, 2 * c), a_at(g + 8, 2 * c + 1)),
                         pair(a_at(g, 2 * c + 8), a_at(g, 2 * c + 9)),
                         pair(a_at(g + 8, 2 * c + 8), a_at(g + 8, 2 * c + 9))};
  const uint32_t b[2] = {pair(b_at(2 * c, g), b_at(2 * c + 1, g)), pair(b_at(2 * c + 8, g), b_at(2 * c + 9, g))};
  float d[4] = {1.f, 2.f, 3.f, 4.f};  // accumulates onto C = the initial d
  flashgate::ptx::mma_16816<T>(d, a, b);
  D[g * 8 + 2 * c] = d[0] - 1.f;
  D[g * 8 + 2 * c + 1] = d[1] - 2.f;
  D[(g + 8) * 8 + 2 * c] = d[2] - 3.f;
  D[(g + 8) * 8 + 2 * c + 1] = d[3] - 4.f;
}

template <class T>
void check_mma(T (*from_float)(float), float (*to_float)(T)) {
  const uint64_t seed = flashgate::harness::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<T> A(256), B(128);
  std::vector<double> a(256), b(128);
  for (int i = 0; i < 256; ++i) A[i] = from_float(normal(rng)), a[i] = to_float(A[i]);
  for (int i = 0; i < 128; ++i) B[i] = from_float(normal(rng)), b[i] = to_float(B[i]);
  DeviceVector<T> dA(A), dB(B);
  DeviceVector<float> dD(std::vector<float>(128, NAN));
  mma_kernel<T><<<1, 32>>>(dA.ptr, dB.ptr, dD.ptr);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<float> D = dD.get();
  for (int r = 0; r < 16; ++r)
    for (int n = 0; n < 8; ++n) {
      double ref = 0;
      for (int k = 0; k < 16; ++k) ref += a[r * 16 + k] * b[k * 8 + n];
      EXPECT_NEAR(D[r * 8 + n], ref, 1e-4 * (1 + std::fabs(ref))) << "row " << r << " col " << n;
    }
}

TEST(Ptx, MmaF16) {
  FLASHGATE_REQUIRE_GPU();
  check_mma<__half>([](float x) { return __float2half_rn(x); }, [](__half x) { return __half2float(x); });
}

TEST(Ptx, MmaBf16) {
  FLASHGATE_REQUIRE_GPU();
  check_mma<__nv_bfloat16>([](float x) { return __float2bfloat16_rn(x); },
                           [](__nv_bfloat16 x) { return __bfloat162float(x); });
}

// ---- ldmatrix -----------------------------------------------------------------------------------------------

// M [16][16] of 16-bit words in shared memory (rows padded to 24 words: 48 bytes, 16-byte aligned).
// Matrix i of an x4 is the 8x8 block (rows (i%2)*8.., cols (i/2)*8..); thread t gives row t%8 of matrix t/8.
// Output per thread: x4 plain, x4 trans, x2 plain, x2 trans = 12 registers.
__global__ void ldmatrix_kernel(const uint16_t* M, uint32_t* out) {
  __shared__ __align__(16) uint16_t s[16 * 24];
  const int lane = threadIdx.x;
  for (int i = lane; i < 256; i += 32) s[(i / 16) * 24 + i % 16] = M[i];
  __syncwarp();
  const int mi = lane / 8;
  const uint16_t* addr = s + ((mi % 2) * 8 + lane % 8) * 24 + (mi / 2) * 8;
  const uint16_t* addr2 = s + ((mi % 2) * 8 + lane % 8) * 24;  // x2: matrices 0 and 1 (threads 0..15)
  uint32_t r[4], t[4], r2[2], t2[2];
  flashgate::ptx::ldmatrix_x4(r, addr);
  flashgate::ptx::ldmatrix_x4_trans(t, addr);
  flashgate::ptx::ldmatrix_x2(r2, addr2);
  flashgate::ptx::ldmatrix_x2_trans(t2, addr2);
  uint32_t* o = out + lane * 12;
  for (int i = 0; i < 4; ++i) o[i] = r[i], o[4 + i] = t[i];
  o[8] = r2[0], o[9] = r2[1], o[10] = t2[0], o[11] = t2[1];
}

TEST(Ptx, Ldmatrix) {
  FLASHGATE_REQUIRE_GPU();
  const uint64_t seed = flashgate::harness::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  std::vector<uint16_t> M(256);
  for (auto& x : M) x = static_cast<uint16_t>(rng());
  DeviceVector<uint16_t> dM(M);
  DeviceVector<uint32_t> dOut(std::vector<uint32_t>(32 * 12, 0xdeadbeefu));
  ldmatrix_kernel<<<1, 32>>>(dM.ptr, dOut.ptr);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<uint32_t> out = dOut.get();
  auto m = [&](int r, int c) { return static_cast<uint32_t>(M[r * 16 + c]); };
  for (int t = 0; t < 32; ++t) {
    const uint32_t* o = out.data() + t * 12;
    for (int i = 0; i < 4; ++i) {
      const int r0 = (i % 2) * 8, c0 = (i / 2) * 8;
      // plain: row t/4, cols 2(t%4), +1
      const uint32_t plain = m(r0 + t / 4, c0 + 2 * (t % 4)) | (m(r0 + t / 4, c0 + 2 * (t % 4) + 1) << 16);
      // transposed: column t/4, rows 2(t%4), +1
      const uint32_t trans = m(r0 + 2 * (t % 4), c0 + t / 4) | (m(r0 + 2 * (t % 4) + 1, c0 + t / 4) << 16);
      EXPECT_EQ(o[i], plain) << "x4 thread " << t << " matrix " << i;
      EXPECT_EQ(o[4 + i], trans) << "x4.trans thread " << t << " matrix " << i;
      if (i < 2) {
        EXPECT_EQ(o[8 + i], plain) << "x2 thread " << t << " matrix " << i;
        EXPECT_EQ(o[10 + i], trans) << "x2.trans thread " << t << " matrix " << i;
      }
    }
  }
}

// ---- movmatrix ---------------------------------------------------------------------------------------------

// Each lane gives row lane/4, columns 2(lane%4), +1 of an 8x8 matrix of 16-bit words; the transpose comes back
// in the same layout.
__global__ void movmatrix_kernel(const uint32_t* in, uint32_t* out) {
  out[threadIdx.x] = flashgate::ptx::movmatrix_trans(in[threadIdx.x]);
}

TEST(Ptx, MovmatrixTrans) {
  FLASHGATE_REQUIRE_GPU();
  const uint64_t seed = flashgate::harness::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  std::vector<uint16_t> M(64);
  for (auto& x : M) x = static_cast<uint16_t>(rng());
  auto m = [&](int r, int c) { return static_cast<uint32_t>(M[r * 8 + c]); };
  std::vector<uint32_t> in(32);
  for (int t = 0; t < 32; ++t) in[t] = m(t / 4, 2 * (t % 4)) | (m(t / 4, 2 * (t % 4) + 1) << 16);
  DeviceVector<uint32_t> dIn(in);
  DeviceVector<uint32_t> dOut(std::vector<uint32_t>(32, 0xdeadbeefu));
  movmatrix_kernel<<<1, 32>>>(dIn.ptr, dOut.ptr);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<uint32_t> out = dOut.get();
  for (int t = 0; t < 32; ++t) {
    const uint32_t want = m(2 * (t % 4), t / 4) | (m(2 * (t % 4) + 1, t / 4) << 16);
    EXPECT_EQ(out[t], want) << "thread " << t;
  }
}

// ---- cp.async with zero-fill --------------------------------------------------------------------------------

// Thread t copies src_bytes = t % (W + 1) bytes of 16-byte source slot t into its W-byte shared slot (first
// poisoned with 0xAB), then the slots go back to global memory. W = 16 with 16 bytes takes the whole-copy form.
template <int W>
__global__ void cp_async_kernel(const unsigned char* src, unsigned char* out) {
  __shared__ __align__(16) unsigned char s[32 * 16];
  const int t = threadIdx.x;
  for (int i = 0; i < 16; ++i) s[t * 16 + i] = 0xAB;
  __syncwarp();
  const uint32_t bytes = t % (W + 1);
  if (W == 16 && bytes == 16) cp_async_16(s + t * 16, src + t * 16);  // the whole-copy form
  if (W == 16 && bytes < 16) cp_async_16(s + t * 16, src + t * 16, bytes);
  if (W == 8) cp_async_8(s + t * 16, src + t * 16, bytes);
  if (W == 4) cp_async_4(s + t * 16, src + t * 16, bytes);
  flashgate::ptx::cp_async_commit();
  flashgate::ptx::cp_async_wait<0>();
  __syncwarp();
  for (int i = 0; i < 16; ++i) out[t * 16 + i] = s[t * 16 + i];
}

template <int W>
void check_cp_async() {
  const uint64_t seed = flashgate::harness::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed) + ", width " + std::to_string(W));
  std::mt19937_64 rng(seed);
  std::vector<unsigned char> src(32 * 16);
  for (auto& b : src) b = static_cast<unsigned char>(rng() % 255 + 1);  // never 0: zero-fill shows
  DeviceVector<unsigned char> dSrc(src), dOut(std::vector<unsigned char>(32 * 16, 0));
  cp_async_kernel<W><<<1, 32>>>(dSrc.ptr, dOut.ptr);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<unsigned char> out = dOut.get();
  for (int t = 0; t < 32; ++t) {
    const int bytes = t % (W + 1);
    for (int i = 0; i < 16; ++i) {
      const int want = i < bytes ? src[t * 16 + i] : (i < W ? 0 : 0xAB);
      EXPECT_EQ(out[t * 16 + i], want) << "thread " << t << " byte " << i << " (src_bytes " << bytes << ")";
    }
  }
}

TEST(Ptx, CpAsyncZeroFill) {
  FLASHGATE_REQUIRE_GPU();
  check_cp_async<16>();
  check_cp_async<8>();
  check_cp_async<4>();
}

}  // namespace
