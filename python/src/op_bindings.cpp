// The four ops and their workspace queries as functions of flashgate._C. Argument names follow the C++ API
// (window, sink, gate_scale), so error messages name what the caller of _C passed; every check lives in C++.
#include "op_bindings.h"

#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <cstdint>
#include <optional>
#include <string>

#include "flashgate/error.h"
#include "flashgate/ops.h"
#include "tensor_view.h"

// The part of every op's docstring about how it runs.
#define FLASHGATE_CALL_DOC                                                                                  \
    "backend: 'auto', 'cpu', 'cuda', or 'hopper' (sm90a kernels, when built; 'auto' takes them on sm_90 "  \
    "for what they serve). "                                                                                \
    "stream: the CUDA stream as an integer (0 = default). "                                                 \
    "workspace: None, a writable buffer of at least *_workspace_size() bytes, or a callable nbytes -> buffer. " \
    "validate: read index tensors that live on the GPU to check them (synchronises; turn off under CUDA-graph " \
    "capture). Tensors are DLPack producers/capsules or (tensor, 'dtype name') pairs. The GIL is released while " \
    "the op runs."

namespace flashgate::python {
namespace {

using namespace nb::literals;

using OptScale = std::optional<double>;
using OptWindow = std::optional<int64_t>;

std::optional<float> to_scale(const OptScale& s) {
  return s ? std::optional<float>(static_cast<float>(*s)) : std::nullopt;
}

// How a call runs: the backend name, the CUDA stream as an integer (0 = default stream), and the workspace:
// None (the library allocates stream-ordered scratch itself when it needs any), a buffer, or a callable
// taking a byte count and returning a buffer (asked only when the call needs scratch).
struct CallOptions {
  std::string backend;
  uintptr_t stream = 0;
  nb::handle workspace;
};

template <class Args>
void run(TensorScope& scope, const Args& args, const CallOptions& opt, void (*op)(const Args&, const Launch&)) {
  Launch launch;
  launch.backend = parse_backend(opt.backend);
  launch.stream = reinterpret_cast<CUstream_st*>(opt.stream);
  if (opt.workspace.is_valid() && !opt.workspace.is_none()) {
    nb::object given = nb::borrow(opt.workspace);
    if (PyCallable_Check(given.ptr())) {
      Args probe = args;
      probe.validate = false;  // sizes depend on shapes only; the run below validates
      const size_t need = workspace_size(probe, launch.backend);
      given = need > 0 ? given(need) : nb::none();
    }
    if (!given.is_none()) {
      const Buffer b = scope.buffer(given, "workspace");
      if (b.bytes > 0 && (b.device != args.q.device || b.device_index != args.q.device_index))
        scope.fail_type("workspace", "must be on the same device as q");
      launch.workspace = b.data;
      launch.workspace_bytes = b.bytes;
    }
  }
  nb::gil_scoped_release no_gil;
  op(args, launch);
}

template <class Args>
size_t size_of(const Args& args, const std::string& backend) {
  Args probe = args;
  probe.validate = false;
  return workspace_size(probe, parse_backend(backend));
}

// ---- argument structs from Python arguments -----------------------------------------------------------

ForwardArgs forward_args(TensorScope& s, nb::handle q, nb::handle k, nb::handle v, nb::handle o, nb::handle lse,
                         nb::handle o_residual, nb::handle g, nb::handle sink, nb::handle cu_seqlens,
                         const OptScale& scale, const OptWindow& window, bool validate) {
  ForwardArgs a;
  a.q = s.input(q, "q");
  a.k = s.input(k, "k");
  a.v = s.input(v, "v");
  a.o = s.output(o, "o");
  a.lse = s.output(lse, "lse");
  a.o_residual = s.output(o_residual, "o_residual");
  a.g = s.input(g, "g");
  a.sink = s.input(sink, "sink");
  a.cu_seqlens = s.input(cu_seqlens, "cu_seqlens");
  a.scale = to_scale(scale);
  a.window = window;
  a.validate = validate;
  return a;
}

struct BackwardTensors {
  nb::handle q, k, v, o, lse, dout, dq, dk, dv, dg, dsink, g, sink, cu_seqlens, o_residual;
};

BackwardArgs backward_args(TensorScope& s, const BackwardTensors& t, const OptScale& scale, const OptWindow& window,
                           bool deterministic, bool validate) {
  BackwardArgs a;
  a.q = s.input(t.q, "q");
  a.k = s.input(t.k, "k");
  a.v = s.input(t.v, "v");
  a.o = s.input(t.o, "o");
  a.lse = s.input(t.lse, "lse");
  a.o_residual = s.input(t.o_residual, "o_residual");
  a.dout = s.input(t.dout, "dout");
  a.dq = s.output(t.dq, "dq");
  a.dk = s.output(t.dk, "dk");
  a.dv = s.output(t.dv, "dv");
  a.dg = s.output(t.dg, "dg");
  a.dsink = s.output(t.dsink, "dsink");
  a.g = s.input(t.g, "g");
  a.sink = s.input(t.sink, "sink");
  a.cu_seqlens = s.input(t.cu_seqlens, "cu_seqlens");
  a.scale = to_scale(scale);
  a.window = window;
  a.deterministic = deterministic;
  a.validate = validate;
  return a;
}

DecodeArgs decode_args(TensorScope& s, nb::handle q, nb::handle k, nb::handle v, nb::handle cu_seqlens, nb::handle o,
                       nb::handle g, nb::handle sink, const OptScale& scale, const OptWindow& window, bool gate_scale,
                       bool validate) {
  DecodeArgs a;
  a.q = s.input(q, "q");
  a.k = s.input(k, "k");
  a.v = s.input(v, "v");
  a.cu_seqlens = s.input(cu_seqlens, "cu_seqlens");
  a.o = s.output(o, "o");
  a.g = s.input(g, "g");
  a.sink = s.input(sink, "sink");
  a.scale = to_scale(scale);
  a.window = window;
  a.gate_scale = gate_scale;
  a.validate = validate;
  return a;
}

struct PagedTensors {
  nb::handle q, k_cache, v_cache, block_table, seq_lens_k, cu_seqlens_q, o, sink, k_scale, v_scale;
};

PagedArgs paged_args(TensorScope& s, const PagedTensors& t, const OptScale& scale, const OptWindow& window,
                     const std::optional<int64_t>& max_seqlen_q, bool validate) {
  PagedArgs a;
  a.q = s.input(t.q, "q");
  a.k_cache = s.input(t.k_cache, "k_cache");
  a.v_cache = s.input(t.v_cache, "v_cache");
  a.block_table = s.input(t.block_table, "block_table");
  a.seq_lens_k = s.input(t.seq_lens_k, "seq_lens_k");
  a.cu_seqlens_q = s.input(t.cu_seqlens_q, "cu_seqlens_q");
  a.o = s.output(t.o, "o");
  a.sink = s.input(t.sink, "sink");
  a.k_scale = s.input(t.k_scale, "k_scale");
  a.v_scale = s.input(t.v_scale, "v_scale");
  a.scale = to_scale(scale);
  a.window = window;
  a.max_seqlen_q = max_seqlen_q;
  a.validate = validate;
  return a;
}

struct SliceTensors {
  nb::handle q, k, v, gate_q, gate_k, sink;
};

template <class Args>
void slice_inputs(TensorScope& s, const SliceTensors& t, int64_t q_start, int64_t k_start, const OptScale& scale,
                  const OptWindow& window, Args& a) {
  a.q = s.input(t.q, "q");
  a.k = s.input(t.k, "k");
  a.v = s.input(t.v, "v");
  a.gate_q = s.input(t.gate_q, "gate_q");
  a.gate_k = s.input(t.gate_k, "gate_k");
  a.sink = s.input(t.sink, "sink");
  a.q_start = q_start;
  a.k_start = k_start;
  a.scale = to_scale(scale);
  a.window = window;
}

// The slice ops need no workspace: a call is its backend and stream.
template <class Args>
void run_slice(const Args& args, const std::string& backend, uintptr_t stream,
               void (*op)(const Args&, const Launch&)) {
  Launch launch;
  launch.backend = parse_backend(backend);
  launch.stream = reinterpret_cast<CUstream_st*>(stream);
  nb::gil_scoped_release no_gil;
  op(args, launch);
}

}  // namespace

void bind_ops(nb::module_& m) {
  const auto none = nb::none();
  // Positional tensors accept None too, so that a missing one is reported by name from C++.

  // ---- attention_forward -----------------------------------------------------------------------------
  m.def(
      "attention_forward",
      [](nb::handle q, nb::handle k, nb::handle v, nb::handle o, nb::handle lse, nb::handle o_residual,
         nb::handle g, nb::handle sink, nb::handle cu_seqlens, OptScale scale, OptWindow window, bool validate,
         const std::string& backend, uintptr_t stream, nb::handle workspace) {
        TensorScope s("attention_forward");
        const ForwardArgs a =
            forward_args(s, q, k, v, o, lse, o_residual, g, sink, cu_seqlens, scale, window, validate);
        run(s, a, {backend, stream, workspace}, &attention_forward);
      },
      "q"_a.none(), "k"_a.none(), "v"_a.none(), "o"_a.none(), nb::kw_only(),
      "lse"_a = none, "o_residual"_a = none, "g"_a = none, "sink"_a = none, "cu_seqlens"_a = none, "scale"_a = none, "window"_a = none,
      "validate"_a = true, "backend"_a = "auto", "stream"_a = 0, "workspace"_a = none,
      "SPEC 3: o (and lse; and o_residual, int8 like o: o's rounding residual for the backward) of causal "
      "attention. " FLASHGATE_CALL_DOC);
  m.def(
      "attention_forward_workspace_size",
      [](nb::handle q, nb::handle k, nb::handle v, nb::handle o, nb::handle lse, nb::handle o_residual,
         nb::handle g, nb::handle sink, nb::handle cu_seqlens, OptScale scale, OptWindow window,
         const std::string& backend) {
        TensorScope s("attention_forward");
        return size_of(forward_args(s, q, k, v, o, lse, o_residual, g, sink, cu_seqlens, scale, window, false),
                       backend);
      },
      "q"_a.none(), "k"_a.none(), "v"_a.none(), "o"_a.none(), nb::kw_only(),
      "lse"_a = none, "o_residual"_a = none, "g"_a = none, "sink"_a = none, "cu_seqlens"_a = none, "scale"_a = none, "window"_a = none,
      "backend"_a = "auto",
      "Scratch bytes attention_forward needs for these arguments.");

  // ---- attention_backward ----------------------------------------------------------------------------
  m.def(
      "attention_backward",
      [](nb::handle q, nb::handle k, nb::handle v, nb::handle o, nb::handle lse, nb::handle dout, nb::handle dq,
         nb::handle dk, nb::handle dv, nb::handle dg, nb::handle dsink, nb::handle g, nb::handle sink,
         nb::handle cu_seqlens, nb::handle o_residual, OptScale scale, OptWindow window, bool deterministic,
         bool validate, const std::string& backend, uintptr_t stream, nb::handle workspace) {
        TensorScope s("attention_backward");
        const BackwardArgs a = backward_args(
            s, {q, k, v, o, lse, dout, dq, dk, dv, dg, dsink, g, sink, cu_seqlens, o_residual}, scale, window,
            deterministic, validate);
        run(s, a, {backend, stream, workspace}, &attention_backward);
      },
      "q"_a.none(), "k"_a.none(), "v"_a.none(), "o"_a.none(), "lse"_a.none(), "dout"_a.none(), "dq"_a.none(),
      "dk"_a.none(), "dv"_a.none(), nb::kw_only(),
      "dg"_a = none, "dsink"_a = none, "g"_a = none, "sink"_a = none, "cu_seqlens"_a = none, "o_residual"_a = none,
      "scale"_a = none, "window"_a = none, "deterministic"_a = false, "validate"_a = true, "backend"_a = "auto", "stream"_a = 0,
      "workspace"_a = none,
      "SPEC 4: dq, dk, dv (and dg, dsink) of attention_forward; o_residual: the forward's, for D = o·do to 8 more "
      "bits than o holds (SPEC 7 on rows whose mass sits on one key). " FLASHGATE_CALL_DOC);
  m.def(
      "attention_backward_workspace_size",
      [](nb::handle q, nb::handle k, nb::handle v, nb::handle o, nb::handle lse, nb::handle dout, nb::handle dq,
         nb::handle dk, nb::handle dv, nb::handle dg, nb::handle dsink, nb::handle g, nb::handle sink,
         nb::handle cu_seqlens, nb::handle o_residual, OptScale scale, OptWindow window, bool deterministic,
         const std::string& backend) {
        TensorScope s("attention_backward");
        return size_of(backward_args(s, {q, k, v, o, lse, dout, dq, dk, dv, dg, dsink, g, sink, cu_seqlens, o_residual},
                                     scale, window, deterministic, false),
                       backend);
      },
      "q"_a.none(), "k"_a.none(), "v"_a.none(), "o"_a.none(), "lse"_a.none(), "dout"_a.none(), "dq"_a.none(),
      "dk"_a.none(), "dv"_a.none(), nb::kw_only(),
      "dg"_a = none, "dsink"_a = none, "g"_a = none, "sink"_a = none, "cu_seqlens"_a = none, "o_residual"_a = none,
      "scale"_a = none, "window"_a = none, "deterministic"_a = false, "backend"_a = "auto",
      "Scratch bytes attention_backward needs for these arguments.");

  // ---- the slice ops (context parallelism) -------------------------------------------------------------
  m.def(
      "attention_forward_slice",
      [](nb::handle q, nb::handle k, nb::handle v, nb::handle o, nb::handle lse, nb::handle o_residual,
         nb::handle gate_q, nb::handle gate_k, nb::handle sink, int64_t q_start, int64_t k_start, OptScale scale,
         OptWindow window, const std::string& backend, uintptr_t stream) {
        TensorScope s("attention_forward_slice");
        SliceForwardArgs a;
        slice_inputs(s, {q, k, v, gate_q, gate_k, sink}, q_start, k_start, scale, window, a);
        a.o = s.output(o, "o");
        a.lse = s.output(lse, "lse");
        a.o_residual = s.output(o_residual, "o_residual");
        run_slice(a, backend, stream, &attention_forward_slice);
      },
      "q"_a.none(), "k"_a.none(), "v"_a.none(), "o"_a.none(), "lse"_a.none(), nb::kw_only(),
      "o_residual"_a = none, "gate_q"_a = none, "gate_k"_a = none, "sink"_a = none, "q_start"_a = 0, "k_start"_a = 0, "scale"_a = none,
      "window"_a = none, "backend"_a = "auto", "stream"_a = 0,
      "Context parallelism: a slice of queries (positions q_start..) against a slice of keys (k_start..); o and lse "
      "of the pair's own softmax, to merge by the LSE rule. gate_q / gate_k: the cumulative gates at the slices' "
      "positions. sink: give it to one key slice per row. backend: 'auto', 'cpu', 'cuda' or 'hopper' (sm90a kernels, "
      "when built; 'auto' takes them on sm_90 for fp16 / bf16). stream: the CUDA stream as an integer.");
  m.def(
      "attention_backward_slice",
      [](nb::handle q, nb::handle k, nb::handle v, nb::handle dout, nb::handle lse, nb::handle D, nb::handle dq,
         nb::handle dk, nb::handle dv, nb::handle gate_q, nb::handle gate_k, nb::handle sink, nb::handle dgate_q,
         nb::handle dgate_k, nb::handle dsink, int64_t q_start, int64_t k_start, OptScale scale, OptWindow window,
         const std::string& backend, uintptr_t stream) {
        TensorScope s("attention_backward_slice");
        SliceBackwardArgs a;
        slice_inputs(s, {q, k, v, gate_q, gate_k, sink}, q_start, k_start, scale, window, a);
        a.dout = s.input(dout, "dout");
        a.lse = s.input(lse, "lse");
        a.D = s.input(D, "D");
        a.dq = s.output(dq, "dq");
        a.dk = s.output(dk, "dk");
        a.dv = s.output(dv, "dv");
        a.dgate_q = s.output(dgate_q, "dgate_q");
        a.dgate_k = s.output(dgate_k, "dgate_k");
        a.dsink = s.output(dsink, "dsink");
        run_slice(a, backend, stream, &attention_backward_slice);
      },
      "q"_a.none(), "k"_a.none(), "v"_a.none(), "dout"_a.none(), "lse"_a.none(), "D"_a.none(), "dq"_a.none(),
      "dk"_a.none(), "dv"_a.none(), nb::kw_only(),
      "gate_q"_a = none, "gate_k"_a = none, "sink"_a = none, "dgate_q"_a = none, "dgate_k"_a = none,
      "dsink"_a = none, "q_start"_a = 0, "k_start"_a = 0, "scale"_a = none, "window"_a = none, "backend"_a = "auto",
      "stream"_a = 0,
      "Context parallelism: one slice pair's shares of dq, dk, dv (and of the cumulative gates' gradients, and "
      "dsink) given the merged rows' lse and D = rowsum(o * dout).");

  // ---- decode ------------------------------------------------------------------------------------------
  m.def(
      "decode",
      [](nb::handle q, nb::handle k, nb::handle v, nb::handle cu_seqlens, nb::handle o, nb::handle g,
         nb::handle sink, OptScale scale, OptWindow window, bool gate_scale, bool validate,
         const std::string& backend, uintptr_t stream, nb::handle workspace) {
        TensorScope s("decode");
        const DecodeArgs a = decode_args(s, q, k, v, cu_seqlens, o, g, sink, scale, window, gate_scale, validate);
        run(s, a, {backend, stream, workspace}, &decode);
      },
      "q"_a.none(), "k"_a.none(), "v"_a.none(), "cu_seqlens"_a.none(), "o"_a.none(), nb::kw_only(),
      "g"_a = none, "sink"_a = none, "scale"_a = none, "window"_a = none, "gate_scale"_a = false,
      "validate"_a = true, "backend"_a = "auto", "stream"_a = 0, "workspace"_a = none,
      "SPEC 5: one query per packed sequence. " FLASHGATE_CALL_DOC);
  m.def(
      "decode_workspace_size",
      [](nb::handle q, nb::handle k, nb::handle v, nb::handle cu_seqlens, nb::handle o, nb::handle g,
         nb::handle sink, OptScale scale, OptWindow window, bool gate_scale, const std::string& backend) {
        TensorScope s("decode");
        return size_of(decode_args(s, q, k, v, cu_seqlens, o, g, sink, scale, window, gate_scale, false), backend);
      },
      "q"_a.none(), "k"_a.none(), "v"_a.none(), "cu_seqlens"_a.none(), "o"_a.none(), nb::kw_only(),
      "g"_a = none, "sink"_a = none, "scale"_a = none, "window"_a = none, "gate_scale"_a = false,
      "backend"_a = "auto",
      "Scratch bytes decode needs for these arguments.");

  // ---- paged_attention ---------------------------------------------------------------------------------
  m.def(
      "paged_attention",
      [](nb::handle q, nb::handle k_cache, nb::handle v_cache, nb::handle block_table, nb::handle seq_lens_k,
         nb::handle cu_seqlens_q, nb::handle o, nb::handle sink, nb::handle k_scale, nb::handle v_scale,
         OptScale scale, OptWindow window, std::optional<int64_t> max_seqlen_q, bool validate,
         const std::string& backend, uintptr_t stream, nb::handle workspace) {
        TensorScope s("paged_attention");
        const PagedArgs a = paged_args(
            s, {q, k_cache, v_cache, block_table, seq_lens_k, cu_seqlens_q, o, sink, k_scale, v_scale}, scale,
            window, max_seqlen_q, validate);
        run(s, a, {backend, stream, workspace}, &paged_attention);
      },
      "q"_a.none(), "k_cache"_a.none(), "v_cache"_a.none(), "block_table"_a.none(), "seq_lens_k"_a.none(),
      "cu_seqlens_q"_a.none(), "o"_a.none(), nb::kw_only(),
      "sink"_a = none, "k_scale"_a = none, "v_scale"_a = none, "scale"_a = none, "window"_a = none,
      "max_seqlen_q"_a = none, "validate"_a = true, "backend"_a = "auto", "stream"_a = 0, "workspace"_a = none,
      "SPEC 6: packed queries over a paged KV cache (fp8 caches as (tensor, 'float8_e4m3fn')). " FLASHGATE_CALL_DOC);
  m.def(
      "paged_attention_workspace_size",
      [](nb::handle q, nb::handle k_cache, nb::handle v_cache, nb::handle block_table, nb::handle seq_lens_k,
         nb::handle cu_seqlens_q, nb::handle o, nb::handle sink, nb::handle k_scale, nb::handle v_scale,
         OptScale scale, OptWindow window, std::optional<int64_t> max_seqlen_q, const std::string& backend) {
        TensorScope s("paged_attention");
        return size_of(paged_args(s, {q, k_cache, v_cache, block_table, seq_lens_k, cu_seqlens_q, o, sink, k_scale,
                                      v_scale},
                                  scale, window, max_seqlen_q, false),
                       backend);
      },
      "q"_a.none(), "k_cache"_a.none(), "v_cache"_a.none(), "block_table"_a.none(), "seq_lens_k"_a.none(),
      "cu_seqlens_q"_a.none(), "o"_a.none(), nb::kw_only(),
      "sink"_a = none, "k_scale"_a = none, "v_scale"_a = none, "scale"_a = none, "window"_a = none,
      "max_seqlen_q"_a = none, "backend"_a = "auto",
      "Scratch bytes paged_attention needs for these arguments.");
}

}  // namespace flashgate::python
