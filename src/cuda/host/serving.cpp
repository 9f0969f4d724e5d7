// The serving ops on the host: checked arguments -> ServingParams, the path (mma kernel or the fp32
// fallback), pipeline depth and split-KV count from the shapes and the device, workspace carving, and the
// launches. No host synchronisation anywhere (CUDA-graph safe): index tensors are only read by the kernels,
// and the plan depends on shapes alone.
#include "cuda/host/serving.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "cuda/common/cuda_check.h"
#include "cuda/common/serving_params.h"
#include "cuda/common/serving_passes.h"
#include "cuda/common/serving_splits.h"
#include "cuda/common/workspace.h"
#include "cuda/host/attention_params.h"
#include "cuda/host/device_facts.h"
#include "cuda/host/overrides.h"
#include "cuda/portable/paged_launch.h"

namespace flashgate::cuda {

ServingOverrides& serving_overrides() {
  static ServingOverrides overrides;
  return overrides;
}

}  // namespace flashgate::cuda

namespace flashgate::host {
namespace {

using cuda::CacheKind;
using cuda::CacheScale;
using cuda::ElementType;
using cuda::ServingParams;
using cuda::kMaxKeySlices;
using cuda::choose_heads_per_cta;
using cuda::choose_key_slices;
using cuda::choose_stages;
using cuda::SliceProblem;
using cuda::split_model_slots;

constexpr int kShortQueryTokens = 4;     // split-KV only for decode and queries of <= 4 tokens per sequence

// The forced choices of cuda::serving_overrides(), within their ranges (0: the planner decides).
int forced_splits() { return std::clamp(cuda::serving_overrides().num_splits, 0, kMaxKeySlices); }
int forced_stages() {
  const int n = cuda::serving_overrides().stages;
  return n > 0 ? std::clamp(n, 2, 4) : 0;
}
int forced_heads_per_cta() { return std::max(cuda::serving_overrides().heads_per_cta, 0); }
bool forced_wide_rows() { return cuda::serving_overrides().wide_rows; }

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// log2(x) for a power of two, else -1.
int log2_if_power_of_two(int x) {
  if (x <= 0 || (x & (x - 1)) != 0) return -1;
  int s = 0;
  while ((1 << s) < x) ++s;
  return s;
}

CacheScale scale_mode(detail::ScaleMode m) {
  switch (m) {
    case detail::ScaleMode::per_tensor: return CacheScale::per_tensor;
    case detail::ScaleMode::per_token: return CacheScale::per_token;
    case detail::ScaleMode::none: break;
  }
  return CacheScale::none;
}

float scale_log2(float scale) { return static_cast<float>(static_cast<double>(scale) * 1.4426950408889634); }

// Row blocks of 16 rows (see ServingParams): the grid's x extent is an upper bound from shapes alone.
// `max_q` (paged, 0 where not given): the caller's bound on query tokens per sequence; where a fixed number of
// blocks per sequence takes no more numbers than first_token_block's bound, CTAs find their sequence by a division.
void set_row_blocks(ServingParams& p, bool one_query_per_sequence, int64_t max_q = 0) {
  p.rows_per_token = std::min(p.G, 16);
  p.head_blocks = static_cast<int>(ceil_div(p.G, 16));
  p.tokens_per_block = one_query_per_sequence ? 1 : 16 / p.rows_per_token;
  int64_t token_blocks = one_query_per_sequence
                             ? p.num_seqs
                             : std::max<int64_t>(cuda::token_block_bound(p.num_seqs, p.total_q, p.tokens_per_block), 1);
  p.blocks_per_sequence = 0;
  if (!one_query_per_sequence && max_q > 0) {
    const int64_t per_sequence = ceil_div(std::min(max_q, p.total_q), p.tokens_per_block);
    if (per_sequence > 0 && p.num_seqs * per_sequence <= token_blocks) {
      p.blocks_per_sequence = static_cast<int>(per_sequence);  // <= the row block count (< 2^31, refusal())
      token_blocks = p.num_seqs * per_sequence;
    }
  }
  p.row_blocks = token_blocks * p.head_blocks;
}

// Everything a launch needs beyond the params: which kernel, how deep its pipeline, how many key slices.
struct ServingPlan {
  const cuda::PagedMmaEntry* mma = nullptr;  // nullptr: the fp32 fallback kernel
  int stages = 2;
  int splits = 1;
  int heads_per_cta = 1;
  bool dependent_merge = false;  // launch the split merge as a programmatic dependent (sm_90+)
  int64_t gate_floats = 0;
  bool empty = false;  // nothing to compute (no query rows)
};

struct PlanInputs {
  bool decode = false;
  bool aligned = false;     // every K/V row starts on 16 bytes (the mma path's cp.async)
  bool gate = false;        // decode with g: the gate pre-kernel fills p.gate_bias in the workspace
  int64_t context_estimate = 0;  // keys per sequence the split heuristic assumes
  int64_t max_q_tokens = 0;  // paged: query tokens per sequence at most (the caller's max_seqlen_q; 0: unknown)
};

// Row blocks that have rows (the grid's x extent is an upper bound): one per sequence for decode, else as if
// every sequence's tokens filled whole blocks.
int64_t estimated_row_blocks(const ServingParams& p, const PlanInputs& in) {
  const int64_t token_blocks =
      in.decode ? p.num_seqs : std::max<int64_t>(p.num_seqs, ceil_div(p.total_q, p.tokens_per_block));
  return token_blocks * p.head_blocks;
}

// Slices per row block. Only decode and short queries split (a prefill batch fills the GPU by itself); how
// many: choose_key_slices (serving_splits.h).
int choose_splits(const ServingParams& p, const PlanInputs& in, int64_t slots, int keys_per_stage) {
  if (const int n = forced_splits()) return n;
  if (!in.decode && p.total_q > kShortQueryTokens * p.num_seqs) return 1;
  SliceProblem q;
  q.ctas = std::max<int64_t>(estimated_row_blocks(p, in) * p.H, 1);
  q.slots = slots;
  q.keys = in.context_estimate;
  q.keys_per_stage = keys_per_stage;
  return choose_key_slices(q);
}

// Kv heads per CTA: choose_heads_per_cta (serving_splits.h) for one pass; split passes have few CTAs.
int choose_heads(const ServingParams& p, const PlanInputs& in, const cuda::PagedKernelShape& shape, int64_t slots,
                 int splits) {
  if (!shape.heads_in_turn) return 1;
  if (const int n = forced_heads_per_cta()) return std::min(n, p.H);
  if (splits > 1) return 1;
  return choose_heads_per_cta(estimated_row_blocks(p, in), p.H, slots);
}

ServingPlan make_plan(const ServingParams& p, const PlanInputs& in, int device) {
  ServingPlan plan;
  plan.gate_floats = in.gate ? static_cast<int64_t>(p.HQ) * p.total_k : 0;
  if (p.total_q == 0 || p.num_seqs == 0) {
    plan.empty = true;
    return plan;
  }
  const bool mma_types = (p.qo_dtype == ElementType::f16 || p.qo_dtype == ElementType::bf16) &&
                         (p.cache_dtype == p.qo_dtype || p.cache_dtype == ElementType::e4m3);
  if (!mma_types || !in.aligned || p.H > 65535) return plan;
  // A per-token scale on K or V selects the per-token fp8 family (CacheKind).
  const bool token_scales = p.k_scale_mode == CacheScale::per_token || p.v_scale_mode == CacheScale::per_token;
  const CacheKind kind = p.cache_dtype == ElementType::e4m3 ? (token_scales ? CacheKind::e4m3_tokens : CacheKind::e4m3)
                         : p.cache_dtype == ElementType::bf16 ? CacheKind::bf16
                                                        : CacheKind::f16;
  // Rows a row block holds at most (8 or fewer: an 8-row tile, keys as M, will do).
  const int64_t block_tokens =
      in.max_q_tokens > 0 ? std::min<int64_t>(in.max_q_tokens, p.tokens_per_block) : p.tokens_per_block;
  const int rows = forced_wide_rows() ? 16 : static_cast<int>(p.rows_per_token * block_tokens);
  const cuda::PagedMmaEntry* entry = cuda::find_paged_mma(kind, p.K, p.V, rows);
  if (!entry) return plan;
  const DeviceFacts dev = device_facts(device);
  const cuda::PagedKernelShape shape = entry->shape();
  // Pipeline depth (choose_stages); two CTAs per SM bound the shared memory (1 KB per CTA is reserved).
  const int budget = std::min(dev.smem_optin, dev.smem_per_sm / 2 - 1024);
  const int stages = choose_stages([&](int s) { return shape.smem_bytes(s); },
                                   [&](int s) { return entry->occupancy(s, device); }, budget,
                                   dev.smem_optin, shape.target_ctas_per_sm, forced_stages(),
                                   shape.shallow_ring);
  if (stages == 0) return plan;
  const int ctas_per_sm = entry->occupancy(stages, device);
  if (ctas_per_sm < 1) return plan;
  plan.mma = entry;
  plan.stages = stages;
  const int64_t slots = static_cast<int64_t>(dev.sms) * ctas_per_sm;
  // A split launch fills the CTAs per SM its tile saturates DRAM with, at the dims that were measured (the
  // tile's own: a padded request streams fewer bytes per key).
  const int saturating = p.K == entry->kp && p.V == entry->vp ? shape.split_ctas_per_sm : 0;
  plan.splits = choose_splits(p, in, split_model_slots(dev.sms, ctas_per_sm, saturating), shape.keys_per_stage);
  plan.heads_per_cta = choose_heads(p, in, shape, slots, plan.splits);
  plan.dependent_merge = dev.major >= 9;
  return plan;
}

// Carves the workspace (base == nullptr: only measures) in one fixed order, so sizing and use agree.
size_t carve(const ServingPlan& plan, ServingParams& p, void* base) {
  cuda::WorkspaceCarver w(base);
  float* gate = w.take<float>(plan.gate_floats);
  const int64_t partial_rows = plan.splits > 1 ? static_cast<int64_t>(plan.splits) * p.total_q * p.HQ : 0;
  p.o_partial = w.take<float>(partial_rows * p.V);
  p.lse_partial = w.take<float>(partial_rows);
  p.gate_bias = gate;
  p.num_splits = plan.splits;
  p.heads_per_cta = plan.heads_per_cta;
  return w.bytes();
}

// ---- decode -------------------------------------------------------------------------------------------

ServingParams decode_params(const DecodeArgs& a, const detail::DecodeProblem& pr) {
  ServingParams p;
  p.q = a.q.data, p.q_row_stride = a.q.stride[0], p.q_head_stride = a.q.stride[1];
  p.o = a.o.data, p.o_row_stride = a.o.stride[0], p.o_head_stride = a.o.stride[1];
  p.qo_dtype = cuda::element_type(a.q.dtype);
  p.k = a.k.data, p.k_slot_stride = a.k.stride[0], p.k_head_stride = a.k.stride[1];
  p.v = a.v.data, p.v_slot_stride = a.v.stride[0], p.v_head_stride = a.v.stride[1];
  p.cache_dtype = cuda::element_type(a.k.dtype);
  p.num_seqs = pr.N, p.total_q = pr.N, p.total_k = pr.T;
  p.cu_k = a.cu_seqlens.data, p.cu_k_stride = a.cu_seqlens.stride[0];
  p.cu_k_bytes = static_cast<int>(dtype_size(a.cu_seqlens.dtype));
  p.HQ = static_cast<int>(pr.HQ), p.H = static_cast<int>(pr.H), p.G = static_cast<int>(pr.group());
  p.K = static_cast<int>(pr.K), p.V = static_cast<int>(pr.V);
  p.scale_log2 = scale_log2(pr.scale);
  p.window = pr.window;
  if (pr.has_sink) p.sink = static_cast<const float*>(a.sink.data), p.sink_stride = a.sink.stride[0];
  set_row_blocks(p, /*one_query_per_sequence=*/true);
  return p;
}

PlanInputs decode_inputs(const DecodeArgs& a, const detail::DecodeProblem& pr) {
  PlanInputs in;
  in.decode = true;
  in.gate = pr.has_gate;
  in.aligned = cuda::row_copy_width(a.k) >= 16 && cuda::row_copy_width(a.v) >= 16;
  in.context_estimate = pr.N > 0 ? ceil_div(pr.T, pr.N) : 0;
  return in;
}

// ---- paged --------------------------------------------------------------------------------------------

ServingParams paged_params(const PagedArgs& a, const detail::PagedProblem& pr) {
  ServingParams p;
  p.q = a.q.data, p.q_row_stride = a.q.stride[0], p.q_head_stride = a.q.stride[1];
  p.o = a.o.data, p.o_row_stride = a.o.stride[0], p.o_head_stride = a.o.stride[1];
  p.qo_dtype = cuda::element_type(a.q.dtype);
  p.k = a.k_cache.data;
  p.k_block_stride = a.k_cache.stride[0], p.k_slot_stride = a.k_cache.stride[1], p.k_head_stride = a.k_cache.stride[2];
  p.v = a.v_cache.data;
  p.v_block_stride = a.v_cache.stride[0], p.v_slot_stride = a.v_cache.stride[1], p.v_head_stride = a.v_cache.stride[2];
  p.cache_dtype = cuda::element_type(a.k_cache.dtype);
  p.num_seqs = pr.N, p.total_q = pr.total_q;
  p.cu_q = a.cu_seqlens_q.data, p.cu_q_stride = a.cu_seqlens_q.stride[0];
  p.cu_q_bytes = static_cast<int>(dtype_size(a.cu_seqlens_q.dtype));
  p.seq_lens_k = static_cast<const int32_t*>(a.seq_lens_k.data), p.seq_lens_stride = a.seq_lens_k.stride[0];
  p.block_table = static_cast<const int32_t*>(a.block_table.data);
  p.table_row_stride = a.block_table.stride[0], p.table_col_stride = a.block_table.stride[1];
  p.num_blocks = pr.num_blocks, p.max_blocks = pr.max_blocks, p.block_size = static_cast<int>(pr.block_size);
  p.block_shift = log2_if_power_of_two(p.block_size);
  p.HQ = static_cast<int>(pr.HQ), p.H = static_cast<int>(pr.H), p.G = static_cast<int>(pr.group());
  p.K = static_cast<int>(pr.K), p.V = static_cast<int>(pr.V);
  p.scale_log2 = scale_log2(pr.scale);
  p.window = pr.window;
  if (pr.has_sink) p.sink = static_cast<const float*>(a.sink.data), p.sink_stride = a.sink.stride[0];
  p.k_scale_mode = scale_mode(pr.k_scale), p.v_scale_mode = scale_mode(pr.v_scale);
  p.k_scale = static_cast<const float*>(a.k_scale.data), p.v_scale = static_cast<const float*>(a.v_scale.data);
  for (int i = 0; i < 3; ++i) {
    if (pr.k_scale == detail::ScaleMode::per_token) p.k_scale_strides[i] = a.k_scale.stride[i];
    if (pr.v_scale == detail::ScaleMode::per_token) p.v_scale_strides[i] = a.v_scale.stride[i];
  }
  set_row_blocks(p, /*one_query_per_sequence=*/false, pr.max_q);
  return p;
}

PlanInputs paged_inputs(const PagedArgs& a, const detail::PagedProblem& pr) {
  PlanInputs in;
  in.aligned = cuda::row_copy_width(a.k_cache) >= 16 && cuda::row_copy_width(a.v_cache) >= 16;
  in.context_estimate = pr.max_blocks * pr.block_size;
  in.max_q_tokens = pr.max_q > 0 ? std::min(pr.max_q, pr.total_q) : 0;
  return in;
}

// ---- shared -------------------------------------------------------------------------------------------

std::string refusal(const ServingParams& p) {
  // The fallback's grid is one CTA per (query row, query head); the mma grid's x extent is 32 bits too, and
  // its CTAs number themselves x * y in 32 bits (paged_kernel.cuh).
  if (p.total_q * p.HQ >= (int64_t{1} << 31) || p.row_blocks >= (int64_t{1} << 31) ||
      p.row_blocks * p.H >= (int64_t{1} << 32))
    return "more than 2^31 (query row, query head) pairs, or 2^32 row blocks x kv heads";
  // The mma kernels index per-token scales in 32 bits (paged_kernel.cuh).
  auto scale_span = [&](const int64_t(&s)[3]) {
    return (p.num_blocks - 1) * std::abs(s[0]) + (p.H - 1) * std::abs(s[1]) + (p.block_size - 1) * std::abs(s[2]);
  };
  if (scale_span(p.k_scale_strides) >= (int64_t{1} << 31) || scale_span(p.v_scale_strides) >= (int64_t{1} << 31))
    return "k_scale or v_scale spans 2^31 elements or more";
  return "";
}

void run_serving(ServingParams p, const PlanInputs& in, int device, const Launch& launch,
                 const cuda::DecodeGateArgs* gate) {
  const ServingPlan plan = make_plan(p, in, device);
  if (plan.empty) return;
  carve(plan, p, launch.workspace);
  if (gate && plan.gate_floats > 0) cuda::launch_decode_gate_bias(*gate, const_cast<float*>(p.gate_bias), launch.stream);
  if (!plan.mma) {
    cuda::launch_paged_simt(p, launch.stream);
    return;
  }
  plan.mma->launch(p, plan.stages, launch.stream);
  if (plan.splits > 1) cuda::launch_paged_merge(p, plan.dependent_merge, launch.stream);
}

size_t serving_workspace(ServingParams p, const PlanInputs& in, int device) {
  const ServingPlan plan = make_plan(p, in, device);
  return carve(plan, p, nullptr);
}

}  // namespace

std::string cannot_run(const DecodeArgs& a, const detail::DecodeProblem& pr) { return refusal(decode_params(a, pr)); }
std::string cannot_run(const PagedArgs& a, const detail::PagedProblem& pr) { return refusal(paged_params(a, pr)); }

size_t workspace(const DecodeArgs& a, const detail::DecodeProblem& pr) {
  return serving_workspace(decode_params(a, pr), decode_inputs(a, pr), a.q.device_index);
}
size_t workspace(const PagedArgs& a, const detail::PagedProblem& pr) {
  return serving_workspace(paged_params(a, pr), paged_inputs(a, pr), a.q.device_index);
}

void run(const DecodeArgs& a, const detail::DecodeProblem& pr, const Launch& launch) {
  cuda::DecodeGateArgs gate;
  if (pr.has_gate) {
    gate.g = a.g.data, gate.g_dtype = cuda::element_type(a.g.dtype);
    gate.g_token_stride = a.g.stride[0], gate.g_head_stride = a.g.stride[1];
    gate.cu = a.cu_seqlens.data, gate.cu_bytes = static_cast<int>(dtype_size(a.cu_seqlens.dtype));
    gate.cu_stride = a.cu_seqlens.stride[0];
    gate.num_seqs = pr.N, gate.T = pr.T, gate.HQ = static_cast<int>(pr.HQ);
    gate.mul = pr.gate_scale ? pr.scale : 1.f;
  }
  run_serving(decode_params(a, pr), decode_inputs(a, pr), a.q.device_index, launch, pr.has_gate ? &gate : nullptr);
}

void run(const PagedArgs& a, const detail::PagedProblem& pr, const Launch& launch) {
  run_serving(paged_params(a, pr), paged_inputs(a, pr), a.q.device_index, launch, nullptr);
}

}  // namespace flashgate::host
