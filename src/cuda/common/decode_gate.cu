// decode's gate pre-kernel. The gate term of key j is Gc[L-1] - Gc[j] = g[j+1] + ... + g[L-1] (SPEC §5);
// summing it from the end of the sequence keeps the terms of near keys (the ones with weight) exact to
// fp32 rounding, where a difference of two long prefix sums would cancel. One block per (sequence, query
// head) walks the sequence backwards in chunks of 256 keys with a block scan and a carry.
#include "cuda/common/block_scan.cuh"
#include "cuda/common/cuda_check.h"
#include "cuda/common/element.h"
#include "cuda/common/online_softmax.h"
#include "cuda/common/serving_passes.h"
#include "cuda/common/serving_work.cuh"

namespace flashgate::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

__global__ void __launch_bounds__(kThreads) decode_gate_kernel(const DecodeGateArgs a, float* out) {
  __shared__ float warp_total[kWarps];
  const int64_t n = blockIdx.x / a.HQ;
  const int h = static_cast<int>(blockIdx.x % a.HQ);
  const int64_t start = clamp64(load_offset(a.cu, a.cu_bytes, a.cu_stride, n), 0, a.T);
  const int64_t end = clamp64(load_offset(a.cu, a.cu_bytes, a.cu_stride, n + 1), start, a.T);
  const float mul = a.mul * kLog2e;
  float carry = 0.f;  // g summed over the keys after this chunk
  for (int64_t hi = end; hi > start; hi -= kThreads) {
    const int64_t t = hi - 1 - threadIdx.x;  // thread order runs backwards through the keys
    const float x = t >= start ? load_as_float(a.g, t * a.g_token_stride + h * a.g_head_stride, a.g_dtype) : 0.f;
    // Inclusive scan over threads: g[t] + ... + g[hi-1].
    const ChunkScan<float> scan = scan_chunk<kThreads>(x, warp_total, 0.f);
    if (t >= start) out[h * a.T + t] = (carry + scan.before + (scan.inclusive - x)) * mul;
    carry += scan.total;
    __syncthreads();  // warp_total is rewritten by the next chunk
  }
}

}  // namespace

void launch_decode_gate_bias(const DecodeGateArgs& a, float* out, CUstream_st* stream) {
  const int64_t blocks = a.num_seqs * a.HQ;
  if (blocks == 0 || a.T == 0) return;
  decode_gate_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(a, out);
  FLASHGATE_CHECK_LAUNCH("decode_gate_kernel");
}

}  // namespace flashgate::cuda
