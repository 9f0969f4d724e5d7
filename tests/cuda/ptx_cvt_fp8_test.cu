// GPU test of the e4m3x2 -> f16x2 wrappers (src/cuda/ptx/cvt_fp8.h): every byte value in every position, in
// random words (fresh seed), both halves of each word, against the host's exact e4m3 decoding; both the path
// this GPU compiles (the instruction on sm_89+) and the emulated path of older GPUs. NaN bytes
// (0x7f, 0xff) are skipped: the emulated path (below sm_89) does not keep them, and the kernels never
// convert them. Outputs start poisoned.
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "common/host_dtype.h"
#include "cuda/ptx/cvt_fp8.h"
#include "harness/owned_tensor.h"
#include "support/compare.h"

namespace {

// out[2i] = bytes 0,1 of in[i] as f16x2; out[2i+1] = bytes 2,3 (through the emulated path when `emulated`).
__global__ void cvt_fp8_kernel(const uint32_t* in, uint32_t* out, int n, bool emulated) {
  namespace d = flashgate::ptx::detail;
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  out[2 * i] = emulated ? d::e4m3x2_to_f16x2_emulated(in[i], d::kLoPairSelector)
                        : flashgate::ptx::e4m3x2_lo_to_f16x2(in[i]);
  out[2 * i + 1] = emulated ? d::e4m3x2_to_f16x2_emulated(in[i], d::kHiPairSelector)
                            : flashgate::ptx::e4m3x2_hi_to_f16x2(in[i]);
}

float half_bits_to_float(uint16_t h) {
  __half_raw r;
  r.x = h;
  return __half2float(__half(r));
}

void check_cvt_fp8(bool emulated) {
  const uint64_t seed = flashgate::harness::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  // Word i holds byte value i % 256 at position (i / 256) % 4, random bytes elsewhere: every value in
  // every position.
  const int n = 256 * 4 * 4;
  std::vector<uint32_t> in(n);
  for (int i = 0; i < n; ++i) {
    const int pos = (i / 256) % 4;
    uint32_t w = static_cast<uint32_t>(rng());
    w = (w & ~(0xffu << (8 * pos))) | (static_cast<uint32_t>(i % 256) << (8 * pos));
    in[i] = w;
  }
  uint32_t *d_in = nullptr, *d_out = nullptr;
  ASSERT_EQ(cudaMalloc(&d_in, n * sizeof(uint32_t)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&d_out, 2 * n * sizeof(uint32_t)), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(d_in, in.data(), n * sizeof(uint32_t), cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemset(d_out, 0xff, 2 * n * sizeof(uint32_t)), cudaSuccess);  // f16 NaN poison
  cvt_fp8_kernel<<<(n + 127) / 128, 128>>>(d_in, d_out, n, emulated);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<uint32_t> out(2 * n);
  ASSERT_EQ(cudaMemcpy(out.data(), d_out, 2 * n * sizeof(uint32_t), cudaMemcpyDeviceToHost), cudaSuccess);
  cudaFree(d_in);
  cudaFree(d_out);

  int failures = 0;
  for (int i = 0; i < n && failures < 20; ++i)
    for (int b = 0; b < 4; ++b) {
      const uint8_t byte = static_cast<uint8_t>(in[i] >> (8 * b));
      if ((byte & 0x7f) == 0x7f) continue;  // NaN
      const uint32_t word = out[2 * i + b / 2];
      const uint16_t half = static_cast<uint16_t>(word >> (16 * (b % 2)));
      const double want = flashgate::host::e4m3_to_double(byte);
      const float got = half_bits_to_float(half);
      if (static_cast<double>(got) != want || std::signbit(got) != std::signbit(want)) {
        ADD_FAILURE() << "word " << i << " byte " << b << " (0x" << std::hex << int(byte) << std::dec << "): got "
                      << got << ", want " << want;
        ++failures;
      }
    }
}

TEST(Ptx, E4m3x2ToF16x2) {
  FLASHGATE_REQUIRE_GPU();
  check_cvt_fp8(false);
}

TEST(Ptx, E4m3x2ToF16x2Emulated) {
  FLASHGATE_REQUIRE_GPU();
  check_cvt_fp8(true);
}

}  // namespace
