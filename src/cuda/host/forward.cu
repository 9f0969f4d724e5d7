#include "cuda/host/forward.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <string>

#include "cuda/common/cuda_check.h"
#include "cuda/common/gate.h"
#include "cuda/common/row_repack.h"
#include "cuda/common/tile_scheduler.h"
#include "cuda/common/workspace.h"
#include "cuda/host/attention_params.h"
#include "cuda/portable/forward_config.h"
#include "cuda/portable/forward_simple.h"

namespace flashgate::host {
namespace {

using cuda::AttentionParams;
using cuda::ElementType;

struct TileFacts {
  int bm = 0, vb = 0;
  size_t smem = 0;  // one key/value stage
};

template <int D>
TileFacts facts_of() {
  using Tile = typename cuda::ForwardBucket<__nv_bfloat16, D>::Tile;  // fp16 tiles have the same shape
  return {Tile::BM, Tile::VB, Tile::smem_bytes(1)};
}

TileFacts bucket_facts(int D) {
  switch (D) {
    case 64: return facts_of<64>();
    case 128: return facts_of<128>();
    case 256: return facts_of<256>();
    default: return facts_of<512>();
  }
}

size_t max_shared_memory_per_block() {
  int device = 0, bytes = 0;
  FLASHGATE_CUDA_CHECK(cudaGetDevice(&device));
  FLASHGATE_CUDA_CHECK(cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  return static_cast<size_t>(bytes);
}

// What a call runs: the tiled kernel of one bucket, or the simple kernel (fp32 inputs; or a GPU whose
// shared memory cannot hold the bucket's tiles).
struct ForwardPlan {
  bool tiled = false;
  int bucket = 0;
  TileFacts tile;
  int num_vchunks = 1;
  bool repack_q = false, repack_k = false, repack_v = false;
};

ForwardPlan plan_forward(const AttentionParams& p) {
  ForwardPlan plan;
  if (p.dtype == ElementType::f32) return plan;
  plan.bucket = cuda::forward_bucket(p.K, p.V);
  plan.tile = bucket_facts(plan.bucket);
  if (plan.tile.smem + cuda::kForwardStaticSmem > max_shared_memory_per_block()) return plan;
  plan.num_vchunks = static_cast<int>((p.V + plan.tile.vb - 1) / plan.tile.vb);
  const cuda::TileSchedule sched = cuda::make_tile_schedule(p, plan.tile.bm, nullptr);
  if (cuda::forward_grid_items(p, sched, plan.num_vchunks) > cuda::kMaxGridItems) return plan;  // simple kernel loops
  plan.tiled = true;
  plan.repack_q = p.q_width < 16, plan.repack_k = p.k_width < 16, plan.repack_v = p.v_width < 16;
  return plan;
}

// The workspace pieces, in one order for sizing (base == nullptr) and carving.
struct ForwardScratch {
  float* gc = nullptr;
  cuda::TileMapEntry* map = nullptr;
  void *q = nullptr, *k = nullptr, *v = nullptr;
  size_t bytes = 0;
};

ForwardScratch carve(const AttentionParams& p, const ForwardPlan& plan, void* base) {
  cuda::WorkspaceCarver w(base);
  ForwardScratch s;
  s.gc = w.take<float>(cuda::gate_prefix_elements(p));
  if (plan.tiled) {
    s.map = w.take<cuda::TileMapEntry>(cuda::tile_map_entries(p, plan.tile.bm));
    const int esize = cuda::element_size(p.dtype);
    if (plan.repack_q) s.q = w.take<char>(cuda::repacked_elements(p.B, p.T, p.HQ, p.K, esize) * esize);
    if (plan.repack_k) s.k = w.take<char>(cuda::repacked_elements(p.B, p.T, p.H, p.K, esize) * esize);
    if (plan.repack_v) s.v = w.take<char>(cuda::repacked_elements(p.B, p.T, p.H, p.V, esize) * esize);
  }
  s.bytes = w.bytes();
  return s;
}

template <class T>
void launch_tiled(const AttentionParams& p, const cuda::TileSchedule& sched, const ForwardPlan& plan,
                  CUstream_st* stream) {
  switch (plan.bucket) {
    case 64: return cuda::launch_forward_bucket<T, 64>(p, sched, plan.num_vchunks, stream);
    case 128: return cuda::launch_forward_bucket<T, 128>(p, sched, plan.num_vchunks, stream);
    case 256: return cuda::launch_forward_bucket<T, 256>(p, sched, plan.num_vchunks, stream);
    default: return cuda::launch_forward_bucket<T, 512>(p, sched, plan.num_vchunks, stream);
  }
}

}  // namespace

// ---- slice pairs (attention_forward_slice): the tiled kernels over Tk keys with the rows shifted ----------------

std::string slice_forward_refusal(const SliceForwardArgs& a, const detail::SliceProblem& sp) {
  const std::string why = cuda::slice_refusal(a.q, sp);
  if (!why.empty()) return why;
  for (const Tensor* t : {&a.q, &a.k, &a.v, &a.o})
    if (cuda::row_copy_width(*t) < 16) return "slices need q, k, v and o rows on 16-byte boundaries";
  if (!plan_forward(cuda::make_slice_forward_params(a, sp)).tiled) return "this GPU's shared memory cannot hold the slice's tiles";
  return "";
}

size_t slice_forward_workspace(const SliceForwardArgs&, const detail::SliceProblem& sp) {
  return cuda::carve_slice_gates(sp, nullptr).bytes;
}

void launch_slice_forward(const SliceForwardArgs& a, const detail::SliceProblem& sp, const Launch& launch) {
  AttentionParams p = cuda::make_slice_forward_params(a, sp);
  if (p.B == 0 || p.T == 0) return;
  CUstream_st* stream = launch.stream;
  const ForwardPlan plan = plan_forward(p);
  cuda::stage_slice_gates(p, a.gate_q, a.gate_k, sp, cuda::carve_slice_gates(sp, launch.workspace), stream);
  const cuda::TileSchedule sched = cuda::make_tile_schedule(p, plan.tile.bm, nullptr);  // dense: no tile map
  if (p.dtype == ElementType::f16) launch_tiled<__half>(p, sched, plan, stream);
  else launch_tiled<__nv_bfloat16>(p, sched, plan, stream);
}

size_t forward_workspace(const ForwardArgs& a, const detail::AttentionProblem& prob) {
  const AttentionParams p = cuda::make_attention_params(a, prob);
  return carve(p, plan_forward(p), nullptr).bytes;
}

void launch_forward(const ForwardArgs& a, const detail::AttentionProblem& prob, const Launch& launch) {
  AttentionParams p = cuda::make_attention_params(a, prob);
  if (p.B == 0 || p.T == 0) return;
  CUstream_st* stream = launch.stream;
  const ForwardPlan plan = plan_forward(p);
  const ForwardScratch s = carve(p, plan, launch.workspace);
  if (plan.repack_q) p.q = cuda::repack_rows(p.q, p.B, p.T, p.HQ, p.K, s.q, stream), p.q_width = 16;
  if (plan.repack_k) p.k = cuda::repack_rows(p.k, p.B, p.T, p.H, p.K, s.k, stream), p.k_width = 16;
  if (plan.repack_v) p.v = cuda::repack_rows(p.v, p.B, p.T, p.H, p.V, s.v, stream), p.v_width = 16;
  if (p.has_gate) {
    p.gc = s.gc;
    cuda::launch_gate_prefix_sum(p, s.gc, stream);
  }
  if (!plan.tiled) {
    cuda::launch_forward_simple(p, stream);
    return;
  }
  const cuda::TileSchedule sched = cuda::make_tile_schedule(p, plan.tile.bm, s.map);
  cuda::launch_build_tile_map(p, sched, s.map, stream);
  if (p.dtype == ElementType::f16) launch_tiled<__half>(p, sched, plan, stream);
  else launch_tiled<__nv_bfloat16>(p, sched, plan, stream);
}

}  // namespace flashgate::host
