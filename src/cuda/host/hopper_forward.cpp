#include "cuda/host/hopper_forward.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <limits>

#include "cuda/common/gate.h"
#include "cuda/common/tile_scheduler.h"
#include "cuda/common/workspace.h"
#include "cuda/host/attention_params.h"
#include "cuda/host/tensor_map.h"
#include "cuda/hopper/forward.h"

namespace flashgate::host {
namespace {

using cuda::hopper::ForwardTile;
using cuda::hopper::HeadDimBuckets;
constexpr int kTileRows = ForwardTile<64, 64>::BM;

// A [B, T, heads, D] tensor as a 4-D tensor map (D, T, heads, B) with boxes of 64 dims x `rows` rows (zeros past
// D fill a bucket's padding). Axes of extent 1 take the stride of a packed layout: theirs is never used, and TMA
// wants every stride 16-byte aligned.
cuda::TensorMapShape token_head_shape(const Tensor& t, int rows) {
  cuda::TensorMapShape s;
  s.rank = 4;
  s.dims[0] = static_cast<uint64_t>(t.shape[3]), s.dims[1] = static_cast<uint64_t>(t.shape[1]);
  s.dims[2] = static_cast<uint64_t>(t.shape[2]), s.dims[3] = static_cast<uint64_t>(t.shape[0]);
  const int64_t packed[4] = {1, t.shape[3], t.shape[3] * t.shape[2], t.shape[3] * t.shape[2] * t.shape[1]};
  const int axis_of[4] = {3, 1, 2, 0};  // map dim -> tensor axis
  for (int i = 1; i < 4; ++i) {
    const int axis = axis_of[i];
    s.strides[i] = static_cast<uint64_t>(t.shape[axis] > 1 ? t.stride[axis] : packed[i]);
  }
  s.box[0] = 64, s.box[1] = static_cast<uint32_t>(rows), s.box[2] = 1, s.box[3] = 1;
  return s;
}

bool tma_ready(const Tensor& t) {
  return cuda::tensor_map_aligned(t.data, cuda::element_type(t.dtype), token_head_shape(t, kTileRows));
}

struct Scratch {
  float* gc = nullptr;
  cuda::TileMapEntry* map = nullptr;
  size_t bytes = 0;
};

Scratch carve(const cuda::AttentionParams& p, void* base) {
  cuda::WorkspaceCarver w(base);
  Scratch s;
  s.gc = w.take<float>(cuda::gate_prefix_elements(p));
  s.map = w.take<cuda::TileMapEntry>(cuda::tile_map_entries(p, kTileRows));
  s.bytes = w.bytes();
  return s;
}

// Key rows per block of the bucket pair (the K and V maps' box height).
int key_block_rows(HeadDimBuckets b) {
  if (b.k == 64) return ForwardTile<64, 64>::BN;
  if (b.k == 128) return ForwardTile<128, 128>::BN;
  if (b.k == 192) return ForwardTile<192, 128>::BN;
  return ForwardTile<256, 256>::BN;
}

template <class T>
void launch_of_buckets(HeadDimBuckets b, const cuda::hopper::ForwardParams& p, const cuda::TileSchedule& sched,
                       CUstream_st* stream) {
  if (b.k == 64) cuda::hopper::launch_forward<T, 64, 64>(p, sched, stream);
  else if (b.k == 128) cuda::hopper::launch_forward<T, 128, 128>(p, sched, stream);
  else if (b.k == 192) cuda::hopper::launch_forward<T, 192, 128>(p, sched, stream);
  else cuda::hopper::launch_forward<T, 256, 256>(p, sched, stream);
}

}  // namespace

std::string hopper_forward_refusal(const ForwardArgs& a, const detail::AttentionProblem& p) {
  if (a.q.dtype != DType::f16 && a.q.dtype != DType::bf16) return "takes fp16 and bf16 only";
  if (cuda::hopper::forward_buckets(p.K, p.V).k == 0) return "takes head dims K and V up to 256 so far";
  if (p.K % 8 != 0 || p.V % 8 != 0) return "takes head dims K and V that are multiples of 8 (its tensor maps)";
  if (p.T > std::numeric_limits<int32_t>::max()) return "sequences longer than 2^31 - 1 tokens are not supported";
  for (const Tensor* t : {&a.q, &a.k, &a.v})
    if (!tma_ready(*t)) return "needs q, k and v with 16-byte aligned rows and strides (its tensor maps)";
  if (cuda::row_copy_width(a.o) < 16) return "needs o with 16-byte aligned rows";
  return "";
}

size_t hopper_forward_workspace(const ForwardArgs& a, const detail::AttentionProblem& prob) {
  return carve(cuda::make_attention_params(a, prob), nullptr).bytes;
}

void launch_hopper_forward(const ForwardArgs& a, const detail::AttentionProblem& prob, const Launch& launch) {
  cuda::hopper::ForwardParams p;
  p.a = cuda::make_attention_params(a, prob);
  if (p.a.B == 0 || p.a.T == 0) return;
  const Scratch s = carve(p.a, launch.workspace);
  if (p.a.has_gate) {
    p.a.gc = s.gc;
    cuda::launch_gate_prefix_sum(p.a, s.gc, launch.stream);
  }
  const HeadDimBuckets buckets = cuda::hopper::forward_buckets(p.a.K, p.a.V);
  const cuda::ElementType type = cuda::element_type(a.q.dtype);
  p.q_map = cuda::make_tensor_map(a.q.data, type, token_head_shape(a.q, kTileRows));
  p.k_map = cuda::make_tensor_map(a.k.data, type, token_head_shape(a.k, key_block_rows(buckets)));
  p.v_map = cuda::make_tensor_map(a.v.data, type, token_head_shape(a.v, key_block_rows(buckets)));
  const cuda::TileSchedule sched = cuda::make_tile_schedule(p.a, kTileRows, s.map);
  cuda::launch_build_tile_map(p.a, sched, s.map, launch.stream);
  if (a.q.dtype == DType::f16) launch_of_buckets<__half>(buckets, p, sched, launch.stream);
  else launch_of_buckets<__nv_bfloat16>(buckets, p, sched, launch.stream);
}

}  // namespace flashgate::host
