#include "cuda/host/hopper_forward.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <limits>

#include "cuda/common/gate.h"
#include "cuda/common/tile_scheduler.h"
#include "cuda/common/workspace.h"
#include "cuda/host/attention_params.h"
#include "cuda/host/device_facts.h"
#include "cuda/host/hopper_maps.h"
#include "cuda/host/tensor_map.h"
#include "cuda/hopper/forward.h"

namespace flashgate::host {
namespace {

using cuda::hopper::ForwardTile;
using cuda::hopper::HeadDimBuckets;

// Calls f(ForwardTile<kK, kV>{}) for the bucket pair `b` (one that forward_buckets returns).
template <class F>
void with_tile(HeadDimBuckets b, F&& f) {
  if (b.k == 64) f(ForwardTile<64, 64>{});
  else if (b.k == 128) f(ForwardTile<128, 128>{});
  else if (b.k == 192) f(ForwardTile<192, 128>{});
  else if (b.k == 256) f(ForwardTile<256, 256>{});
  else f(ForwardTile<512, 512>{});
}

struct TileRows {
  int queries = 0, keys = 0;  // rows of a query tile and of a key block
};
TileRows tile_rows(const cuda::AttentionParams& p) {
  TileRows r;
  with_tile(cuda::hopper::forward_buckets(p.K, p.V), [&](auto tile) {
    r.queries = decltype(tile)::BM, r.keys = decltype(tile)::BN;
  });
  return r;
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
  s.map = w.take<cuda::TileMapEntry>(cuda::tile_map_entries(p, tile_rows(p).queries));
  s.bytes = w.bytes();
  return s;
}

// The (sequence, query head) pairs of one section of the dense item order: whole kv groups whose K and V take
// about half of L2, so that the tiles running at one time read K/V blocks other CTAs brought in. A section keeps
// at least four items per CTA: the grid runs each section longest tile first, and fewer rounds would leave a
// section's long tiles to start late.
int section_heads(const cuda::AttentionParams& p, const DeviceFacts& dev, int tile_rows) {
  const int64_t keys = p.Tk > 0 ? p.Tk : p.T;  // a slice pair's own keys
  const int64_t kv_head_bytes = std::max<int64_t>(1, keys * (p.K + p.V) * 2);
  const int64_t tiles = std::max<int64_t>(1, (p.T + tile_rows - 1) / tile_rows);
  const int64_t fit = std::max<int64_t>(1, dev.l2_bytes / 2 / kv_head_bytes);
  const int64_t busy = (4 * static_cast<int64_t>(dev.sms) + tiles * p.group - 1) / (tiles * p.group);
  return static_cast<int>(std::min(std::max(fit, busy) * p.group, std::max<int64_t>(p.B * p.HQ, 1)));
}

// What the kernels need of the tensors and sizes, for whole sequences and slice pairs alike (T: query rows).
std::string kernel_refusal(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& o, int64_t K, int64_t V,
                           int64_t T, int64_t HQ, int64_t B, int64_t num_seqs) {
  if (q.dtype != DType::f16 && q.dtype != DType::bf16) return "takes fp16 and bf16 only";
  if (cuda::hopper::forward_buckets(K, V).k == 0) return "takes head dims K and V up to 512";
  if (K % 8 != 0 || V % 8 != 0) return "takes head dims K and V that are multiples of 8 (its tensor maps)";
  if (T > std::numeric_limits<int32_t>::max()) return "sequences longer than 2^31 - 1 tokens are not supported";
  // The kernel numbers its (query tile, head) items and (sequence, head) pairs in 32 bits; an upper bound of both.
  const int64_t tiles = (T + 63) / 64 + num_seqs;
  if (tiles * HQ > std::numeric_limits<int32_t>::max() || B * HQ > std::numeric_limits<int32_t>::max())
    return "takes fewer than 2^31 (query tile, head) items";
  for (const Tensor* t : {&q, &k, &v})
    if (!token_head_map_ready(*t)) return "needs q, k and v with 16-byte aligned rows and strides (its tensor maps)";
  if (cuda::row_copy_width(o) < 16) return "needs o with 16-byte aligned rows";
  return "";
}

// The tensor maps, the L2 sections and the kernel of p's bucket pair over `sched`.
void launch_kernel(cuda::hopper::ForwardParams& p, const Tensor& q, const Tensor& k, const Tensor& v,
                   const cuda::TileSchedule& sched, CUstream_st* stream) {
  const TileRows rows = tile_rows(p.a);
  const cuda::ElementType type = cuda::element_type(q.dtype);
  p.q_map = cuda::make_tensor_map(q.data, type, token_head_map(q, rows.queries));
  p.k_map = cuda::make_tensor_map(k.data, type, token_head_map(k, rows.keys));
  p.v_map = cuda::make_tensor_map(v.data, type, token_head_map(v, rows.keys));
  const DeviceFacts dev = device_facts(q.device_index);
  p.section_heads = section_heads(p.a, dev, rows.queries);
  with_tile(cuda::hopper::forward_buckets(p.a.K, p.a.V), [&](auto tile) {
    using Tile = decltype(tile);
    using cuda::hopper::launch_forward;
    if (q.dtype == DType::f16) launch_forward<__half, Tile::kKDim, Tile::kVDim>(p, sched, dev.sms, stream);
    else launch_forward<__nv_bfloat16, Tile::kKDim, Tile::kVDim>(p, sched, dev.sms, stream);
  });
}

}  // namespace

std::string hopper_forward_refusal(const ForwardArgs& a, const detail::AttentionProblem& p) {
  return kernel_refusal(a.q, a.k, a.v, a.o, p.K, p.V, p.T, p.HQ, p.B, p.num_seqs);
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
  const cuda::TileSchedule sched = cuda::launch_build_longest_first_map(
      p.a, cuda::make_tile_schedule(p.a, tile_rows(p.a).queries, s.map), s.map, launch.stream);
  launch_kernel(p, a.q, a.k, a.v, sched, launch.stream);
}

std::string hopper_slice_forward_refusal(const SliceForwardArgs& a, const detail::SliceProblem& sp) {
  const std::string why = cuda::slice_refusal(a.q, sp);
  return why.empty() ? kernel_refusal(a.q, a.k, a.v, a.o, sp.K, sp.V, sp.Tq, sp.HQ, sp.B, sp.B) : why;
}

size_t hopper_slice_forward_workspace(const SliceForwardArgs&, const detail::SliceProblem& sp) {
  return cuda::carve_slice_gates(sp, nullptr).bytes;  // dense: no tile map
}

void launch_hopper_slice_forward(const SliceForwardArgs& a, const detail::SliceProblem& sp, const Launch& launch) {
  cuda::hopper::ForwardParams p;
  p.a = cuda::make_slice_forward_params(a, sp);
  if (p.a.B == 0 || p.a.T == 0) return;
  cuda::stage_slice_gates(p.a, a.gate_q, a.gate_k, sp, cuda::carve_slice_gates(sp, launch.workspace), launch.stream);
  launch_kernel(p, a.q, a.k, a.v, cuda::make_tile_schedule(p.a, tile_rows(p.a).queries, nullptr), launch.stream);
}

}  // namespace flashgate::host
