// The four operations of SPEC §1, their argument structs, backend choice and workspace sizing.
//
// Conventions (cuDNN / FlashInfer style): plain structs of tensor views, caller-owned outputs, an explicit
// stream, a workspace query, no hidden allocation on the hot path. Every call checks its arguments first
// (SPEC §8) and throws flashgate::Error without writing anything when one is bad.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "flashgate/tensor.h"

struct CUstream_st;  // cudaStream_t without including the CUDA headers

namespace flashgate {

enum class Backend : int {
  automatic,  // the fastest backend that serves the request on the tensors' device (FLASHGATE_BACKEND may force one)
  cpu,        // reference: fp64 accumulation, every feature
  cuda,       // portable sm80+ kernels: the whole contract
  hopper,     // sm90a kernels for the hot configurations
};

const char* backend_name(Backend);
// "auto"/"automatic", "cpu", "cuda", "hopper"; throws Error naming `what` otherwise.
Backend parse_backend(const std::string& name, const char* what = "backend");

// How and where a call runs. With `workspace == nullptr && workspace_bytes == 0` a GPU op that needs
// scratch allocates it stream-ordered itself (convenient, not graph-friendly); pass a buffer of at
// least workspace_size(args) bytes to avoid that.
struct Launch {
  Backend backend = Backend::automatic;
  CUstream_st* stream = nullptr;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
};

// SPEC §3. Dense: q [B,T,HQ,K], k [B,T,H,K], v [B,T,H,V], o [B,T,HQ,V].
// Packed: B == 1 and cu_seqlens [N+1] (int32/int64).
struct ForwardArgs {
  Tensor q, k, v;
  Tensor o;           // output [B,T,HQ,V], dtype of q
  Tensor lse;         // optional output [B,T,HQ] fp32, natural log
  Tensor o_residual;  // optional output [B,T,HQ,V] int8: o's rounding residual, for the backward (BackwardArgs)
  Tensor g;           // optional [B,T,HQ] log forget gate (fp32; fp16/bf16 upcast)
  Tensor sink;        // optional [HQ] fp32 sink logits
  Tensor cu_seqlens;  // optional [N+1]
  std::optional<float> scale;     // default 1/sqrt(K)
  std::optional<int64_t> window;  // keys with i - j < window are visible; none = unlimited
  bool validate = true;           // read GPU index tensors on the host to check them (synchronises)
};

// SPEC §4. Inputs as the forward plus o, lse and dout; outputs dq/dk/dv in the input dtype,
// dg [B,T,HQ] fp32 (required iff g), dsink [HQ] fp32 (required iff sink).
// o_residual (optional, the forward's): the backward's D = rowsum(o * dout) then sees o to 8 more bits than its
// dtype holds. dS = P (dP - D) cancels to the size of D's error where one key holds most of a row's mass, and
// o's rounding alone would leave it above SPEC §7's bound there. Without it the GPU backends take the exact D
// (sum_j P dP) only where every row sees at most 64 keys; the CPU backend recomputes everything and ignores it.
struct BackwardArgs {
  Tensor q, k, v, o, lse, dout;
  Tensor o_residual;
  Tensor g, sink, cu_seqlens;
  Tensor dq, dk, dv, dg, dsink;
  std::optional<float> scale;
  std::optional<int64_t> window;
  bool deterministic = false;  // bitwise-identical gradients run to run
  bool validate = true;
};

// SPEC §5. q [N,HQ,K]; k [T,H,K], v [T,H,V] packed by cu_seqlens [N+1]; o [N,HQ,V].
struct DecodeArgs {
  Tensor q, k, v, cu_seqlens;
  Tensor o;
  Tensor g;     // optional [T,HQ]
  Tensor sink;  // optional [HQ]
  std::optional<float> scale;
  std::optional<int64_t> window;
  bool gate_scale = false;  // multiply the gate term by `scale` too (PaTH-FoX convention)
  bool validate = true;
};

// SPEC §6. q [total_q,HQ,K] packed by cu_seqlens_q [N+1]; k_cache [num_blocks,block_size,H,K],
// v_cache [num_blocks,block_size,H,V]; block_table [N,max_blocks] int32; seq_lens_k [N] int32;
// o [total_q,HQ,V]. fp8 e4m3 caches take fp32 scales: per tensor (one element) or per token
// [num_blocks,H,block_size]; an absent scale of an fp8 cache means 1. max_seqlen_q (optional, as vLLM and
// FlashAttention's varlen calls take it): a bound on every sequence's query tokens, so that the CUDA kernel maps
// its CTAs to sequences without searching cu_seqlens_q (decode and speculative-verify batches). With validation
// a longer sequence is an error; without it, that sequence's outputs past the bound may be left unwritten
// (nothing is read or written out of range).
struct PagedArgs {
  Tensor q, k_cache, v_cache, block_table, seq_lens_k, cu_seqlens_q;
  Tensor o;
  Tensor sink;
  Tensor k_scale, v_scale;
  std::optional<float> scale;
  std::optional<int64_t> window;
  std::optional<int64_t> max_seqlen_q;
  bool validate = true;
};

// Context parallelism: one slice of queries against one slice of keys of the same B sequences, so that a sequence
// split over devices is attended slice pair by slice pair and merged. q [B,Tq,HQ,K] holds the queries at positions
// q_start .. q_start + Tq - 1 of each sequence, k [B,Tk,H,K] and v [B,Tk,H,V] the keys at k_start ..; visibility
// is SPEC §3's on those positions. A gate enters in its cumulative form over the whole sequence, G_t = g_0 + ... +
// g_t: gate_q [B,Tq,HQ] at the query positions and gate_k [B,Tk,HQ] at the key positions (fp32), so the score's
// term G_i - G_j needs nothing outside the two slices. `sink` [HQ] adds its mass to these rows: give it to one key
// slice of each row. o [B,Tq,HQ,V] (q's dtype) and lse [B,Tq,HQ] (fp32) are this slice pair's own softmax (lse
// -inf where a row sees nothing); a row's slices merge by lse = log sum_s exp(lse_s), o = sum_s exp(lse_s - lse) o_s.
struct SliceForwardArgs {
  Tensor q, k, v;
  Tensor o, lse;
  Tensor o_residual;      // optional int8 like o: its rounding residual (as ForwardArgs::o_residual), for a merge
                          // that keeps o's fp32 value
  Tensor gate_q, gate_k;  // optional: both or neither
  Tensor sink;            // optional [HQ]
  int64_t q_start = 0, k_start = 0;
  std::optional<float> scale;
  std::optional<int64_t> window;
};

// The backward of one slice pair given its rows' merged statistics: lse [B,Tq,HQ] of the merged softmax and
// D = rowsum(o * dout) [B,Tq,HQ] of the merged output (fp32), with dout [B,Tq,HQ,V]. Writes the pair's shares of
// the gradients: dq [B,Tq,HQ,K], dk [B,Tk,H,K], dv [B,Tk,H,V] (q's dtype); with a gate dgate_q [B,Tq,HQ] and
// dgate_k [B,Tk,HQ] (fp32, gradients of the cumulative gates: dg_t is the sum of dG_u over positions u >= t of the
// whole sequence); with a sink dsink [HQ]. A gradient is the sum of the shares of every slice pair.
struct SliceBackwardArgs {
  Tensor q, k, v, dout, lse, D;
  Tensor gate_q, gate_k, sink;
  Tensor dq, dk, dv, dgate_q, dgate_k, dsink;
  int64_t q_start = 0, k_start = 0;
  std::optional<float> scale;
  std::optional<int64_t> window;
};

void attention_forward(const ForwardArgs&, const Launch& = {});
void attention_backward(const BackwardArgs&, const Launch& = {});
void attention_forward_slice(const SliceForwardArgs&, const Launch& = {});
void attention_backward_slice(const SliceBackwardArgs&, const Launch& = {});
void decode(const DecodeArgs&, const Launch& = {});
void paged_attention(const PagedArgs&, const Launch& = {});

// Scratch bytes the call needs on the backend that `backend` resolves to for these arguments
// (checks the arguments like the op itself).
size_t workspace_size(const ForwardArgs&, Backend = Backend::automatic);
size_t workspace_size(const BackwardArgs&, Backend = Backend::automatic);
size_t workspace_size(const DecodeArgs&, Backend = Backend::automatic);
size_t workspace_size(const PagedArgs&, Backend = Backend::automatic);
size_t workspace_size(const SliceForwardArgs&, Backend = Backend::automatic);
size_t workspace_size(const SliceBackwardArgs&, Backend = Backend::automatic);

// The backend a call with these arguments runs on: `backend` itself when forced (raising like the op when it is
// not built or cannot serve them), else the one `auto` picks. Checks the arguments like the op.
Backend resolve_backend(const ForwardArgs&, Backend = Backend::automatic);
Backend resolve_backend(const BackwardArgs&, Backend = Backend::automatic);
Backend resolve_backend(const DecodeArgs&, Backend = Backend::automatic);
Backend resolve_backend(const PagedArgs&, Backend = Backend::automatic);
Backend resolve_backend(const SliceForwardArgs&, Backend = Backend::automatic);
Backend resolve_backend(const SliceBackwardArgs&, Backend = Backend::automatic);

// Whether `backend` (not `automatic`) is built into this library and serves these arguments; false also where
// it is built for another device. Checks the arguments like the op (bad arguments raise).
bool backend_serves(const ForwardArgs&, Backend);
bool backend_serves(const BackwardArgs&, Backend);
bool backend_serves(const DecodeArgs&, Backend);
bool backend_serves(const PagedArgs&, Backend);
bool backend_serves(const SliceForwardArgs&, Backend);
bool backend_serves(const SliceBackwardArgs&, Backend);

// Whether a CUDA device is usable from this process (false in a build without CUDA).
bool cuda_available();

const char* version();

}  // namespace flashgate
