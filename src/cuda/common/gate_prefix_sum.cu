// The gate's pre-kernels. The prefix sum: one block per (sequence, query head) scans the sequence in chunks of
// kThreads * kPerThread tokens, each thread summing a few consecutive tokens, a warp-shuffle scan of the thread
// totals and a carry between chunks. The transpose: a slice pair's cumulative gates, given whole, into that layout.
#include "cuda/common/block_scan.cuh"
#include "cuda/common/cuda_check.h"
#include "cuda/common/element.h"
#include "cuda/common/gate.h"
#include "cuda/common/sequence.h"

namespace flashgate::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kPerThread = 4;
constexpr int kWarps = kThreads / 32;

__global__ void __launch_bounds__(kThreads) gate_prefix_sum_kernel(AttentionParams p, float* gc, int64_t jobs) {
  __shared__ float warp_totals[kWarps];
  __shared__ float carry_in;
  for (int64_t job = blockIdx.x; job < jobs; job += gridDim.x) {
    const int64_t n = job / p.HQ, h = job % p.HQ;
    const SequenceSpan seq = sequence_span(p, n);
    float* out = gc + (seq.batch * p.HQ + h) * p.T + seq.start;
    if (threadIdx.x == 0) carry_in = 0.f;
    __syncthreads();
    for (int chunk = 0; chunk < seq.len; chunk += kThreads * kPerThread) {
      const int first = chunk + threadIdx.x * kPerThread;
      float local[kPerThread];
      float running = 0.f;
#pragma unroll
      for (int e = 0; e < kPerThread; ++e) {
        const int t = first + e;
        const float g = t < seq.len ? load_as_float(p.g.data, p.g.offset(seq.batch, seq.start + t, h), p.g.dtype) : 0.f;
        running += g;
        local[e] = running;
      }
      const ChunkScan<float> scan = scan_chunk<kThreads>(running, warp_totals, 0.f);
      const float base = carry_in + scan.before + (scan.inclusive - running);
#pragma unroll
      for (int e = 0; e < kPerThread; ++e)
        if (first + e < seq.len) out[first + e] = base + local[e];
      __syncthreads();  // everyone has read carry_in and warp_totals
      if (threadIdx.x == 0) carry_in += scan.total;
      __syncthreads();
    }
  }
}

__global__ void gate_transpose_kernel(TokenHeadTensor g, int64_t T, int64_t HQ, float* out, int64_t count) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < count; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t t = i % T, bh = i / T;
    out[i] = load_as_float(g.data, g.offset(bh / HQ, t, bh % HQ), g.dtype);
  }
}

}  // namespace

void launch_gate_transpose(const TokenHeadTensor& g, int64_t B, int64_t T, int64_t HQ, float* out,
                           CUstream_st* stream) {
  const int64_t count = B * T * HQ;
  if (count == 0) return;
  const int64_t blocks = (count + 255) / 256;
  gate_transpose_kernel<<<static_cast<unsigned>(blocks < 65536 ? blocks : 65536), 256, 0, stream>>>(g, T, HQ, out,
                                                                                                      count);
  FLASHGATE_CHECK_LAUNCH("gate_transpose_kernel");
}

void launch_gate_prefix_sum(const AttentionParams& p, float* gc, CUstream_st* stream) {
  const int64_t jobs = p.num_seqs * p.HQ;
  if (jobs == 0 || p.T == 0) return;
  const unsigned grid = static_cast<unsigned>(jobs < (1ll << 30) ? jobs : (1ll << 30));
  gate_prefix_sum_kernel<<<grid, kThreads, 0, stream>>>(p, gc, jobs);
  FLASHGATE_CHECK_LAUNCH("gate_prefix_sum_kernel");
}

}  // namespace flashgate::cuda
