// The fallback serving kernel: what the mma kernel does not take (fp32 queries and caches, rows that are
// not 16-byte aligned, more than 65535 kv heads). One CTA per (query row, query head), fp32 throughout,
// keys in chunks of 128 (one per thread) with an online softmax; values summed by head dim. Slow but
// complete: every dtype, fp8 scales in both layouts, gate, sink, window, GQA.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda/common/cuda_check.h"
#include "cuda/common/online_softmax.h"
#include "cuda/common/serving_work.cuh"
#include "cuda/portable/paged_launch.h"

namespace flashgate::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kMaxKeyDim = 576;
constexpr int kDimsPerThread = 4;  // V <= 512

__device__ __forceinline__ float load_element(const void* base, int64_t i, ElementType t) {
  switch (t) {
    case ElementType::f16: return __half2float(static_cast<const __half*>(base)[i]);
    case ElementType::bf16: return __bfloat162float(static_cast<const __nv_bfloat16*>(base)[i]);
    case ElementType::e4m3: {  // the e4m3 bits placed in a float are x * 2^-120 (subnormals too); 2^120 restores x
      const uint32_t x = static_cast<const uint8_t*>(base)[i];
      return __uint_as_float(((x & 0x80u) << 24) | ((x & 0x7fu) << 20)) * 0x1p120f;
    }
    default: return static_cast<const float*>(base)[i];
  }
}

__device__ __forceinline__ void store_element(void* base, int64_t i, ElementType t, float x) {
  if (t == ElementType::bf16) static_cast<__nv_bfloat16*>(base)[i] = __float2bfloat16_rn(x);
  else if (t == ElementType::f16) static_cast<__half*>(base)[i] = __float2half_rn(x);
  else static_cast<float*>(base)[i] = x;
}

// Block-wide reductions (every thread gets the result); `scratch` holds one float per warp.
__device__ float block_reduce(float x, float* scratch, bool is_max) {
#pragma unroll
  for (int o = 16; o > 0; o /= 2) {
    const float y = __shfl_xor_sync(0xffffffffu, x, o);
    x = is_max ? fmaxf(x, y) : x + y;
  }
  const int warp = threadIdx.x / 32;
  __syncthreads();  // scratch may still be read from the previous reduction
  if ((threadIdx.x & 31) == 0) scratch[warp] = x;
  __syncthreads();
  x = scratch[0];
  for (int w = 1; w < kThreads / 32; ++w) x = is_max ? fmaxf(x, scratch[w]) : x + scratch[w];
  return x;
}

// The sequence of query row `q_row`: decode rows are sequences; packed rows search cu_q. False if none.
__device__ bool sequence_of_row(const ServingParams& p, int64_t q_row, SequenceKeys& s) {
  if (!p.cu_q) {
    s.n = q_row;
    s.q_start = q_row;
    s.q_len = 1;
  } else {
    if (p.num_seqs <= 0 || query_offset(p, 0) > q_row) return false;
    int64_t lo = 0, hi = p.num_seqs - 1;  // the last sequence starting at or before q_row
    while (lo < hi) {
      const int64_t mid = (lo + hi + 1) / 2;
      if (query_offset(p, mid) <= q_row) lo = mid;
      else hi = mid - 1;
    }
    s.n = lo;
    s.q_start = query_offset(p, lo);
    s.q_len = query_offset(p, lo + 1) - s.q_start;
    if (q_row >= s.q_start + s.q_len) return false;
  }
  load_key_extent(p, s);
  return true;
}

__global__ void __launch_bounds__(kThreads, 8) paged_simt_kernel(const ServingParams p) {
  __shared__ float q[kMaxKeyDim];
  __shared__ float weight[kThreads];
  __shared__ int64_t value_row[kThreads];
  __shared__ float scratch[kThreads / 32];

  const int tid = threadIdx.x;
  const int64_t q_row = static_cast<int64_t>(blockIdx.x) / p.HQ;
  const int head = static_cast<int>(static_cast<int64_t>(blockIdx.x) % p.HQ), kv_head = head / p.G;
  SequenceKeys s;
  if (!sequence_of_row(p, q_row, s)) return;
  const int64_t pos64 = query_position(s.k_len, s.q_len, q_row - s.q_start);
  const int pos = static_cast<int>(clamp64(pos64, -1, s.k_len - 1));
  const int lo = static_cast<int>(clamp64(window_start(pos64, p.window), 0, pos + 1));

  for (int d = tid; d < p.K; d += kThreads)
    q[d] = load_element(p.q, q_row * p.q_row_stride + head * p.q_head_stride + d, p.qo_dtype);
  __syncthreads();

  const float score_mul = p.scale_log2 * (p.k_scale_mode == CacheScale::per_tensor ? p.k_scale[0] : 1.f);
  SoftmaxRow softmax;
  float acc[kDimsPerThread] = {0.f, 0.f, 0.f, 0.f};
  for (int first = lo; first <= pos; first += kThreads) {
    const int j = first + tid;
    float x = -INFINITY, vmul = 0.f;
    int64_t vrow = -1;
    KeyRow kr;
    if (j <= pos && locate_key(p, s, kv_head, j, kr)) {
      float dot = 0.f;
      for (int d = 0; d < p.K; ++d) dot += q[d] * load_element(p.k, kr.k_off + d, p.cache_dtype);
      float col = score_mul;
      if (p.k_scale_mode == CacheScale::per_token) col *= p.k_scale[scale_offset(p.k_scale_strides, kr, kv_head)];
      x = dot * col;
      if (p.gate_bias) x += p.gate_bias[head * p.total_k + s.key_start + j];
      vrow = kr.v_off;
      vmul = p.v_scale_mode == CacheScale::per_token ? p.v_scale[scale_offset(p.v_scale_strides, kr, kv_head)] : 1.f;
    }
    const float factor = softmax.rescale(block_reduce(x, scratch, true));
#pragma unroll
    for (int i = 0; i < kDimsPerThread; ++i) acc[i] *= factor;
    const float pr = exp2f(x - softmax.exp_offset());
    softmax.sum += pr;
    weight[tid] = pr * vmul;
    value_row[tid] = vrow;
    __syncthreads();
    const int count = pos - first + 1 < kThreads ? pos - first + 1 : kThreads;
    for (int jj = 0; jj < count; ++jj) {
      const float w = weight[jj];
      if (value_row[jj] < 0 || w == 0.f) continue;  // masked or unreadable: never touch its bytes
#pragma unroll
      for (int i = 0; i < kDimsPerThread; ++i) {
        const int d = tid + i * kThreads;
        if (d < p.V) acc[i] += w * load_element(p.v, value_row[jj] + d, p.cache_dtype);
      }
    }
    __syncthreads();
  }
  const float total = block_reduce(softmax.sum, scratch, false);
  const bool has_sink = p.sink != nullptr;
  const RowResult res = finish_row(softmax.max2, total, has_sink, has_sink ? p.sink[head * p.sink_stride] : 0.f);
  const float out_mul = res.o_scale * (p.v_scale_mode == CacheScale::per_tensor ? p.v_scale[0] : 1.f);
#pragma unroll
  for (int i = 0; i < kDimsPerThread; ++i) {
    const int d = tid + i * kThreads;
    if (d < p.V) store_element(p.o, q_row * p.o_row_stride + head * p.o_head_stride + d, p.qo_dtype, acc[i] * out_mul);
  }
}

}  // namespace

void launch_paged_simt(const ServingParams& p, CUstream_st* stream) {
  const int64_t blocks = p.total_q * p.HQ;
  if (blocks == 0) return;
  paged_simt_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(p);
  FLASHGATE_CHECK_LAUNCH("paged_simt_kernel");
}

}  // namespace flashgate::cuda
