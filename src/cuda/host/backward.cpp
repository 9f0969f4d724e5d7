// The portable backward's host side: the plan (SIMT or MMA path, head-dim bucket, column slices, GQA head
// parts), the workspace carving (one function for sizing and for use, so they never disagree) and the
// stream-ordered launch sequence described in backward.h.
#include "cuda/host/backward.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <limits>

#include "cuda/common/backward_passes.h"
#include "cuda/common/cuda_check.h"
#include "cuda/common/gate.h"
#include "cuda/common/row_repack.h"
#include "cuda/common/tile_scheduler.h"
#include "cuda/common/workspace.h"
#include "cuda/host/attention_params.h"
#include "cuda/host/device_facts.h"
#if defined(FLASHGATE_WITH_HOPPER)
#include "cuda/host/hopper_backward.h"
#endif
#include "cuda/portable/backward_kernels.h"
#include "flashgate/error.h"

namespace flashgate::host {
namespace {

using cuda::AttentionParams;
using cuda::ElementType;
using cuda::TileMapEntry;
using cuda::TileSchedule;
using cuda::bwd::BackwardParams;
using cuda::bwd::TileSizes;

// Makes `device` current for the launches and restores the caller's device afterwards.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    FLASHGATE_CUDA_CHECK(cudaGetDevice(&previous_));
    if (previous_ != device) FLASHGATE_CUDA_CHECK(cudaSetDevice(device));
    else previous_ = -1;
  }
  ~DeviceGuard() {
    if (previous_ >= 0) cudaSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

int round16(int64_t x) { return static_cast<int>((x + 15) / 16 * 16); }

// Where every row sees at most this many keys (short sequences, narrow windows) D is the fp32 expectation sum_j P dP
// (the exact-D pre-pass), not round(o)·do: one key can hold almost all of a row's mass there, dS = P (dP - D)
// cancels to the size of o's rounding, and with few keys per row that error does not average out over the tensor
// (SPEC §7's tiny and window-1 cases). The pass adds a query-major sweep of S and dP (about 30% of such a
// backward); rows that see more keys never take it.
constexpr int64_t kExactDKeys = 64;
bool rows_see_few_keys(const detail::AttentionProblem& prob) {
  return prob.T <= kExactDKeys || (prob.window != detail::kNoWindow && prob.window <= kExactDKeys);
}

BackwardParams make_params(const BackwardArgs& args, const detail::AttentionProblem& prob) {
  BackwardParams p;
  p.a = cuda::make_attention_params(args.q, args.k, args.v, args.g, args.sink, args.cu_seqlens, prob);
  p.a.o = cuda::token_head_view(args.o);
  p.a.o_width = cuda::row_copy_width(args.o);
  p.a.o_residual = cuda::token_head_view(args.o_residual);
  p.a.o_residual_width = cuda::row_copy_width(args.o_residual);
  p.a.lse = cuda::token_head_view(args.lse);
  p.a.has_lse = true;
  p.dout = cuda::token_head_view(args.dout);
  p.dq = cuda::token_head_view(args.dq);
  p.dk = cuda::token_head_view(args.dk);
  p.dv = cuda::token_head_view(args.dv);
  if (args.dg.defined()) p.dg = cuda::token_head_view(args.dg);
  p.dsink = static_cast<float*>(args.dsink.data);
  p.do_width = cuda::row_copy_width(args.dout);
  p.dq_width = cuda::row_copy_width(args.dq);
  p.dk_width = cuda::row_copy_width(args.dk);
  p.dv_width = cuda::row_copy_width(args.dv);
  p.K16 = round16(prob.K);
  p.V16 = round16(prob.V);
  p.deterministic = args.deterministic;
  p.need_E = prob.has_gate || prob.has_sink;
  p.exact_D = p.K16 == 16 || rows_see_few_keys(prob);
  return p;
}

struct Plan {
  bool mma = false;  // else the SIMT path
  bool hopper = false;  // the MMA path with the Hopper dK/dV kernel (host/hopper_backward.h)
  int bucket = 0;
  TileSizes tiles;
  int slices_kv = 1, slices_q = 1;
  int stages_kv = 0, stages_q = 0;  // buffers of the per-step tiles (0: does not fit)
};

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// One grid axis carries every CTA; beyond it (never in practice) the SIMT path's grid-stride loops serve.
constexpr int64_t kMaxGrid = std::numeric_limits<int32_t>::max();

// Chooses the path and, for the MMA path, the dK/dV kernel's plan (plan_dkdv) and the dq kernel's.
Plan make_plan(const BackwardArgs& args, BackwardParams& p, const DeviceFacts& dev, DkdvKernels kernels) {
  Plan plan;
  p.head_parts = 1;
  if (p.a.dtype == ElementType::f32) return plan;
  const DkdvPlan kv = plan_dkdv(p, dev);
  plan.bucket = kv.bucket, plan.tiles = kv.tiles, plan.slices_kv = kv.slices, plan.stages_kv = kv.stages;
  // The dq kernel keeps dq_min_blocks CTAs per SM. Nothing fits: the SIMT path.
  const size_t optin = static_cast<size_t>(dev.smem_optin), per_sm = static_cast<size_t>(dev.smem_per_sm);
  const TileSizes& t = plan.tiles;
  const bool dq_two = t.smem_dq[2] <= optin && t.smem_dq[2] * t.dq_min_blocks <= per_sm;
  plan.stages_q = dq_two ? 2 : t.smem_dq[1] <= optin ? 1 : 0;
  plan.slices_q = static_cast<int>(ceil_div(p.K16, plan.tiles.dq_slice));
  const int64_t query_tiles = cuda::make_tile_schedule(p.a, plan.tiles.dq_rows, nullptr).num_tiles;
  if (!kv.fits || ((p.deterministic || p.exact_D) && plan.stages_q == 0) ||
      query_tiles * p.a.HQ * plan.slices_q > kMaxGrid) {
    p.head_parts = 1;
    return plan;
  }
  plan.mma = true;
#if defined(FLASHGATE_WITH_HOPPER)
  // The Hopper dK/dV kernel walks every query head of a kv head itself (hopper_backward_refusal accepted it).
  if (kernels == DkdvKernels::hopper && hopper_dkdv_refusal(dkdv_tensors(args), p, dev).empty()) {
    plan.hopper = true;
    plan.tiles.key_tile = hopper_dkdv_key_rows(p);
    p.head_parts = 1;
    if (hopper_dkdv_sums_sink(p)) {  // dsink from the kernel's parts, no row sums E
      p.need_E = false;
      p.sink_part_tiles = cuda::make_tile_schedule(p.a, plan.tiles.key_tile, nullptr).num_tiles;
    }
  }
#else
  (void)args, (void)kernels;
#endif
  return plan;
}

// Workspace pieces that are not in BackwardParams.
struct Scratch {
  TileMapEntry* keys = nullptr;
  TileMapEntry* queries = nullptr;
  float* gc = nullptr;
  // 16-byte-aligned copies of q, k, v, dout for the MMA loaders (only where the caller's rows are not).
  void* q = nullptr;
  void* k = nullptr;
  void* v = nullptr;
  void* dout = nullptr;
};

void* take_repack(cuda::WorkspaceCarver& w, int width, int64_t B, int64_t T, int64_t heads, int64_t dim) {
  if (width >= 16) return nullptr;
  return w.take<uint16_t>(cuda::repacked_elements(B, T, heads, dim, 2));
}

// The Hopper dK/dV kernel's order counters (its query tiles are 64 or 128 rows: 64 counts the most blocks).
int64_t dq_order_counters(const BackwardParams& p) { return p.a.B * p.a.HQ * cuda::bwd::dq_order_blocks(p.a, 64); }

// dQ is added into the fp32 accumulator by the dK/dV kernel (then converted): default mode, and the Hopper
// kernel's deterministic mode (in key-tile order); the portable deterministic mode has the query-major dq kernel.
bool dq_by_atomics(const BackwardParams& p, const Plan& plan) { return !p.deterministic || plan.hopper; }
// The portable query-major kernel runs: exact D's pre-pass, or the portable deterministic mode's dQ.
bool query_major_pass(const BackwardParams& p, const Plan& plan) { return p.exact_D || !dq_by_atomics(p, plan); }

// Carves the workspace into p's scratch pointers (sizes only when the carver has no base).
Scratch carve(BackwardParams& p, const Plan& plan, cuda::WorkspaceCarver& w) {
  Scratch m;
  const int64_t rows = p.a.B * p.a.HQ * p.a.T;
  m.gc = w.take<float>(cuda::gate_prefix_elements(p.a));
  p.a.gc = m.gc;
  p.lse = w.take<float>(rows);
  p.D = w.take<float>(rows);
  if (p.need_E) p.E = w.take<float>(rows);
  if (p.sink_part_tiles > 0) p.sink_parts = w.take<float>(cuda::bwd::sink_part_count(p));
  if (p.a.has_gate) p.colsum = w.take<float>(rows);
  if (p.a.has_gate) p.mass = w.take<float>(rows);
  if (!plan.mma) return m;
  if (dq_by_atomics(p, plan)) p.dq_acc = w.take<float>(cuda::bwd::dq_acc_floats(p.a, p.K16));
  if (plan.hopper && p.deterministic) p.dq_order = w.take<int>(dq_order_counters(p));
  if (plan.hopper) p.next_item = w.take<unsigned>(1);
  if (p.head_parts > 1) {
    const int64_t kv_rows = p.head_parts * p.a.B * p.a.H * p.a.T;
    p.dk_part = w.take<float>(kv_rows * p.K16);
    p.dv_part = w.take<float>(kv_rows * p.V16);
  }
  m.keys = w.take<TileMapEntry>(cuda::tile_map_entries(p.a, plan.tiles.key_tile));
  if (query_major_pass(p, plan)) m.queries = w.take<TileMapEntry>(cuda::tile_map_entries(p.a, plan.tiles.dq_rows));
  const AttentionParams& a = p.a;
  m.q = take_repack(w, a.q_width, a.B, a.T, a.HQ, a.K);
  m.k = take_repack(w, a.k_width, a.B, a.T, a.H, a.K);
  m.v = take_repack(w, a.v_width, a.B, a.T, a.H, a.V);
  m.dout = take_repack(w, p.do_width, a.B, a.T, a.HQ, a.V);
  return m;
}

// The dK/dV kernel's variant: with the row sums and gate terms only where a gate or a sink needs them.
template <class T, int kD>
void launch_dkdv(const BackwardParams& p, int slices, int stages, const TileSchedule& keys, cudaStream_t stream) {
  if (p.needs_row_sums())
    cuda::bwd::launch_dkdv_mma<T, kD, true>(p, keys, slices, stages, stream);
  else
    cuda::bwd::launch_dkdv_mma<T, kD, false>(p, keys, slices, stages, stream);
}

template <class T>
void launch_dkdv_bucket(const BackwardParams& p, const DkdvPlan& plan, const TileSchedule& keys, cudaStream_t stream) {
  switch (plan.bucket) {
    case 64: return launch_dkdv<T, 64>(p, plan.slices, plan.stages, keys, stream);
    case 128: return launch_dkdv<T, 128>(p, plan.slices, plan.stages, keys, stream);
    case 256: return launch_dkdv<T, 256>(p, plan.slices, plan.stages, keys, stream);
    default: return launch_dkdv<T, 512>(p, plan.slices, plan.stages, keys, stream);
  }
}

// One bucket's kernels in order: exact_D's pre-pass (D = sum_j P dP, one slice), then the Hopper dK/dV kernel
// (which adds dQ itself in both modes), or the dq kernel (deterministic mode) and the portable dK/dV kernel.
template <class T, int kD>
void launch_bucket(const BackwardArgs& args, const BackwardParams& p, const Plan& plan, const TileSchedule& keys,
                   const TileSchedule& queries, cudaStream_t stream) {
  using namespace cuda::bwd;
  if (p.exact_D) launch_dq_mma<T, kD>(p, queries, 1, plan.stages_q, /*d_only=*/true, stream);
#if defined(FLASHGATE_WITH_HOPPER)
  if (plan.hopper) return launch_hopper_dkdv(dkdv_tensors(args), p, keys, stream);
#else
  (void)args;
#endif
  if (p.deterministic) launch_dq_mma<T, kD>(p, queries, plan.slices_q, plan.stages_q, /*d_only=*/false, stream);
  launch_dkdv<T, kD>(p, plan.slices_kv, plan.stages_kv, keys, stream);
}

template <class T>
void launch_mma_kernels(const BackwardArgs& args, const BackwardParams& p, const Plan& plan, const TileSchedule& keys,
                        const TileSchedule& queries, cudaStream_t stream) {
  switch (plan.bucket) {
    case 64: return launch_bucket<T, 64>(args, p, plan, keys, queries, stream);
    case 128: return launch_bucket<T, 128>(args, p, plan, keys, queries, stream);
    case 256: return launch_bucket<T, 256>(args, p, plan, keys, queries, stream);
    default: return launch_bucket<T, 512>(args, p, plan, keys, queries, stream);
  }
}

template <class T>
void zero_async(T* ptr, int64_t count, cudaStream_t stream) {
  if (ptr && count > 0)
    FLASHGATE_CUDA_CHECK(cudaMemsetAsync(ptr, 0, static_cast<size_t>(count) * sizeof(T), stream));
}

}  // namespace

DkdvPlan plan_dkdv(BackwardParams& p, const DeviceFacts& dev) {
  DkdvPlan plan;
  p.head_parts = 1;
  plan.bucket = cuda::bwd::bucket_for(p.K16, p.V16);
  plan.tiles = cuda::bwd::tile_sizes(plan.bucket);
  // Two stages (prefetch the next step) where shared memory allows, else one.
  const size_t optin = static_cast<size_t>(dev.smem_optin);
  plan.stages = plan.tiles.smem_dkdv[2] <= optin ? 2 : plan.tiles.smem_dkdv[1] <= optin ? 1 : 0;
  if (plan.stages == 0) return plan;
  plan.slices = static_cast<int>(ceil_div(std::max(p.K16, p.V16), plan.tiles.slice_kv));
  const int64_t key_tiles = cuda::make_key_tile_schedule(p.a, plan.tiles.key_tile, nullptr).num_tiles;
  const int64_t ctas = key_tiles * p.a.H * plan.slices;
  const int64_t group = p.a.group;
  for (int64_t parts = 1; parts <= group; ++parts) {
    if (group % parts != 0) continue;
    p.head_parts = static_cast<int>(parts);
    if (ctas * parts >= 2 * dev.sms) break;
  }
  if (ctas * p.head_parts > kMaxGrid) {
    p.head_parts = 1;
    return plan;
  }
  plan.fits = true;
  return plan;
}

void launch_portable_dkdv(const BackwardParams& p, const DkdvPlan& plan, const TileSchedule& keys,
                          CUstream_st* stream) {
  if (p.a.dtype == ElementType::f16) launch_dkdv_bucket<__half>(p, plan, keys, stream);
  else launch_dkdv_bucket<__nv_bfloat16>(p, plan, keys, stream);
}

std::string backward_refusal(const BackwardArgs&, const detail::AttentionProblem& prob) {
  if (prob.T > std::numeric_limits<int32_t>::max())
    return "sequence positions are 32-bit in the portable kernels (T must be below 2^31)";
  return "";
}

std::string hopper_backward_refusal(const BackwardArgs& args, const detail::AttentionProblem& prob) {
#if defined(FLASHGATE_WITH_HOPPER)
  std::string why = backward_refusal(args, prob);
  if (!why.empty()) return why;
  BackwardParams p = make_params(args, prob);
  const DeviceFacts dev = device_facts(args.q.device_index);
  const Plan plan = make_plan(args, p, dev, DkdvKernels::portable);
  if (!plan.mma) return "runs the fp16/bf16 backwards whose tiles fit the device (the portable SIMT path takes the rest)";
  return hopper_dkdv_refusal(dkdv_tensors(args), p, dev);
#else
  (void)args, (void)prob;
  return "the Hopper kernels are not built";
#endif
}

size_t backward_workspace(const BackwardArgs& args, const detail::AttentionProblem& prob, DkdvKernels kernels) {
  BackwardParams p = make_params(args, prob);
  const Plan plan = make_plan(args, p, device_facts(args.q.device_index), kernels);
  cuda::WorkspaceCarver w;
  carve(p, plan, w);
  return w.bytes() + cuda::WorkspaceCarver::kAlign;  // room to align the caller's base (launch_backward)
}

void launch_backward(const BackwardArgs& args, const detail::AttentionProblem& prob, const Launch& launch,
                     DkdvKernels kernels) {
  DeviceGuard device(args.q.device_index);
  BackwardParams p = make_params(args, prob);
  const Plan plan = make_plan(args, p, device_facts(args.q.device_index), kernels);
  // Carving starts at the caller's base rounded up to kAlign, so every piece is kAlign-aligned whatever the
  // caller passed (the dK/dV kernel's 16-byte vector atomics into dq_acc rely on it).
  constexpr size_t kAlign = cuda::WorkspaceCarver::kAlign;
  const size_t pad = (kAlign - reinterpret_cast<uintptr_t>(launch.workspace) % kAlign) % kAlign;
  cuda::WorkspaceCarver w(static_cast<char*>(launch.workspace) + pad);
  const Scratch maps = carve(p, plan, w);
  if (w.bytes() + pad > launch.workspace_bytes)
    throw Error(ErrorKind::invalid_argument, "workspace",
                "flashgate: attention_backward: workspace of " + std::to_string(launch.workspace_bytes) +
                    " bytes is too small, this call needs " + std::to_string(w.bytes() + kAlign));
  const cudaStream_t stream = reinterpret_cast<cudaStream_t>(launch.stream);
  const int64_t rows = p.a.B * p.a.HQ * p.a.T;

  if (p.a.has_gate) cuda::launch_gate_prefix_sum(p.a, maps.gc, stream);
  cuda::bwd::launch_prepare_rows(p, stream);  // and clears dq_acc
  zero_async(p.E, rows, stream);  // rows outside every sequence (broken unchecked cu_seqlens) stay 0
  zero_async(p.mass, rows, stream);
  zero_async(p.sink_parts, cuda::bwd::sink_part_count(p), stream);  // key tiles no row sees add nothing
  zero_async(p.dq_order, dq_order_counters(p), stream);
  zero_async(p.next_item, 1, stream);

  if (plan.mma) {
    // The MMA loaders copy 16-byte chunks: unaligned inputs go through aligned copies first.
    AttentionParams& a = p.a;
    if (maps.q) a.q = cuda::repack_rows(a.q, a.B, a.T, a.HQ, a.K, maps.q, stream), a.q_width = 16;
    if (maps.k) a.k = cuda::repack_rows(a.k, a.B, a.T, a.H, a.K, maps.k, stream), a.k_width = 16;
    if (maps.v) a.v = cuda::repack_rows(a.v, a.B, a.T, a.H, a.V, maps.v, stream), a.v_width = 16;
    if (maps.dout) p.dout = cuda::repack_rows(p.dout, a.B, a.T, a.HQ, a.V, maps.dout, stream), p.do_width = 16;
    const TileSchedule keys = cuda::make_key_tile_schedule(p.a, plan.tiles.key_tile, maps.keys);
    cuda::launch_build_tile_map(p.a, keys, maps.keys, stream);
    TileSchedule queries;
    if (query_major_pass(p, plan)) {
      queries = cuda::make_tile_schedule(p.a, plan.tiles.dq_rows, maps.queries);
      cuda::launch_build_tile_map(p.a, queries, maps.queries, stream);
    }
    if (p.a.dtype == ElementType::f16) launch_mma_kernels<__half>(args, p, plan, keys, queries, stream);
    else launch_mma_kernels<__nv_bfloat16>(args, p, plan, keys, queries, stream);
    if (dq_by_atomics(p, plan)) cuda::bwd::launch_dq_convert(p, device_facts(args.q.device_index).sms, stream);
    if (p.head_parts > 1) cuda::bwd::launch_dkv_reduce(p, stream);
  } else {
    cuda::bwd::launch_simt_backward(p, stream);
  }

  if (p.a.has_gate) cuda::bwd::launch_gate_grad(p, stream);
  if (p.a.has_sink) cuda::bwd::launch_sink_grad(p, stream);
}

}  // namespace flashgate::host
