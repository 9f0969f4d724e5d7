// Every argument rule of SPEC §8, in one place. Errors read
//   "flashgate: <op>: <argument>: <rule>, got <what>"
// and are thrown before anything is written.
#include "api/check.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "api/device_runtime.h"
#include "flashgate/error.h"

namespace flashgate::detail {
namespace {

std::string shape_str(const Tensor& t) {
  if (t.rank < 0 || t.rank > kMaxRank) return "of rank " + std::to_string(t.rank);
  std::string s = "[";
  for (int i = 0; i < t.rank; ++i) s += (i ? "," : "") + std::to_string(t.shape[i]);
  return s + "]";
}

std::string strides_str(const Tensor& t) {
  std::string s = "[";
  for (int i = 0; i < t.rank; ++i) s += (i ? "," : "") + std::to_string(t.stride[i]);
  return s + "]";
}

bool known_dtype(DType t) { return dtype_size(t) != 0; }
bool known_device(Device d) { return d == Device::cpu || d == Device::cuda; }

// The expected shape with free axes left as their names: "[2,5,H,8]" for layout "[B,T,H,K]", dims {2,5,-1,8}.
std::string dims_str(const char* layout, std::initializer_list<int64_t> dims) {
  std::vector<std::string> names;
  std::string name;
  for (const char* c = layout; *c; ++c) {
    if (*c == '[') continue;
    if (*c == ',' || *c == ']') names.push_back(name), name.clear();
    else name += *c;
  }
  std::string s = "[";
  size_t i = 0;
  for (int64_t d : dims) {
    s += i ? "," : "";
    s += d >= 0 || i >= names.size() ? std::to_string(d) : names[i];
    ++i;
  }
  return s + "]";
}

// Small vocabulary of checks bound to one op's name and its reference tensor (the query).
class Checker {
 public:
  Checker(const char* op, const Tensor& q) : op_(op), q_(q) {}

  [[noreturn]] void fail(ErrorKind kind, const std::string& arg, const std::string& rule) const {
    throw Error(kind, arg, std::string("flashgate: ") + op_ + ": " + arg + ": " + rule);
  }

  void require(bool ok, const char* arg, const std::string& rule) const {
    if (!ok) fail(ErrorKind::invalid_argument, arg, rule);
  }

  // Presence, rank, exact shape, device and layout of one tensor (`layout` = dims named for messages).
  void tensor(const Tensor& t, const char* arg, const char* layout, std::initializer_list<int64_t> dims) const {
    if (!t.defined()) fail(ErrorKind::invalid_argument, arg, std::string("is required ") + layout);
    if (t.rank != static_cast<int>(dims.size()))
      fail(ErrorKind::invalid_argument, arg,
           "expected " + std::to_string(dims.size()) + (dims.size() == 1 ? " axis " : " axes ") + layout + ", got shape " + shape_str(t));
    int i = 0;
    for (int64_t d : dims) {
      if (d >= 0 && t.shape[i] != d)
        fail(ErrorKind::invalid_argument, arg,
             std::string("expected shape ") + layout + " = " + dims_str(layout, dims) + ", got " + shape_str(t));
      if (t.shape[i] < 0) fail(ErrorKind::invalid_argument, arg, "negative size in shape " + shape_str(t));
      ++i;
    }
    // Element counts must fit int64 (offsets are computed in it everywhere).
    int64_t n = 1;
    for (int a = 0; a < t.rank; ++a) {
      if (t.shape[a] != 0 && n > INT64_MAX / t.shape[a])
        fail(ErrorKind::invalid_argument, arg, "has too many elements, got shape " + shape_str(t));
      n *= t.shape[a];
    }
    placement(t, arg);
  }

  // Device, alignment and the contiguous last axis (the head axis of every attention tensor).
  void placement(const Tensor& t, const char* arg) const {
    // Enum values from outside the library (a C caller, a bad cast) must not reach the switches below.
    if (!known_dtype(t.dtype))
      fail(ErrorKind::wrong_type, arg, "has an unknown dtype code " + std::to_string(static_cast<int>(t.dtype)));
    if (!known_device(t.device))
      fail(ErrorKind::wrong_type, arg, "has an unknown device code " + std::to_string(static_cast<int>(t.device)));
    if (t.device != q_.device || t.device_index != q_.device_index)
      fail(ErrorKind::wrong_type, arg,
           std::string("must be on the same device as q (") + device_name(q_.device) + ":" +
               std::to_string(q_.device_index) + "), got " + device_name(t.device) + ":" +
               std::to_string(t.device_index));
    if (t.numel() > 0 && t.data == nullptr) fail(ErrorKind::invalid_argument, arg, "has a null data pointer");
    if (reinterpret_cast<uintptr_t>(t.data) % dtype_size(t.dtype) != 0)
      fail(ErrorKind::invalid_argument, arg,
           std::string("data pointer is not aligned to its element size (") + dtype_name(t.dtype) + ")");
    // Strides only matter where there are elements to step between: an axis of extent 1 is never stepped
    // along, and an empty tensor has no layout at all (numpy and DLPack export it with strides of 0).
    if (t.numel() == 0) return;
    if (t.rank > 0 && t.shape[t.rank - 1] > 1 && t.stride[t.rank - 1] != 1)
      fail(ErrorKind::invalid_argument, arg,
           "the last axis must be contiguous (stride 1), got stride " + std::to_string(t.stride[t.rank - 1]));
    for (int a = 0; a < t.rank; ++a)
      if (t.stride[a] < 0)
        fail(ErrorKind::invalid_argument, arg, "negative strides are not supported, got strides " + strides_str(t));
  }

  // An output must not have two elements at one address (a zero stride, or strides that fold axes onto
  // each other). Taken by increasing stride, every axis must step past the whole extent of the axes inside
  // it: exact for every permuted and padded dense layout, and it rejects only exotic interleavings besides.
  void output(const Tensor& t, const char* arg) const {
    if (t.numel() == 0) return;  // no elements, nothing to overlap (strides of empty tensors are arbitrary)
    std::vector<std::pair<int64_t, int64_t>> axes;  // (stride, size) of the axes longer than one
    for (int a = 0; a < t.rank; ++a)
      if (t.shape[a] > 1) axes.emplace_back(t.stride[a], t.shape[a]);
    std::sort(axes.begin(), axes.end());
    int64_t extent = 1;  // elements spanned by the axes taken so far
    for (const auto& [stride, size] : axes) {
      if (stride < extent)
        fail(ErrorKind::invalid_argument, arg,
             "an output cannot have overlapping elements (a zero stride, or strides that map two elements to "
             "one address), got shape " + shape_str(t) + " strides " + strides_str(t));
      extent = stride * (size - 1) + extent;
    }
  }

  void dtype(const Tensor& t, const char* arg, std::initializer_list<DType> allowed) const {
    for (DType d : allowed)
      if (t.dtype == d) return;
    std::string names;
    for (DType d : allowed) names += std::string(names.empty() ? "" : ", ") + dtype_name(d);
    if (allowed.size() > 1) names = "one of {" + names + "}";
    fail(ErrorKind::wrong_type, arg, "dtype must be " + names + ", got " + dtype_name(t.dtype));
  }

  void same_dtype(const Tensor& t, const char* arg, DType want, const char* as) const {
    if (t.dtype != want)
      fail(ErrorKind::wrong_type, arg,
           std::string("dtype must match ") + as + " (" + dtype_name(want) + "), got " + dtype_name(t.dtype));
  }

  void head_dim(int64_t d, const char* arg, const char* name, int64_t limit) const {
    if (d < 1 || d > limit)
      fail(ErrorKind::invalid_argument, arg,
           std::string("head dim ") + name + " must be in 1.." + std::to_string(limit) + ", got " + std::to_string(d));
  }

  // `kv` names the tensor that gives H (k, or k_cache for paged attention).
  void heads(int64_t hq, int64_t h, const char* kv) const {
    require(hq >= 1, "q", "needs at least one head, got HQ=" + std::to_string(hq));
    require(h >= 1, kv, "needs at least one head, got H=" + std::to_string(h));
    require(hq % h == 0, kv,
            "query heads must be a multiple of key/value heads (HQ % H == 0), got HQ=" + std::to_string(hq) +
                " H=" + std::to_string(h));
  }

  float scale(const std::optional<float>& s, int64_t K) const {
    if (!s) return static_cast<float>(1.0 / std::sqrt(static_cast<double>(K)));
    require(std::isfinite(*s), "scale", "must be finite, got " + std::to_string(*s));
    return *s;
  }

  int64_t window(const std::optional<int64_t>& w) const {
    if (!w) return kNoWindow;
    require(*w >= 0, "window", "must be >= 0 (or absent), got " + std::to_string(*w));
    return *w;
  }

  // fp32 companion tensors (lse, g, sink, dg, dsink, scales) are float64 in the fp64 reference mode.
  DType float_kind() const { return q_.dtype == DType::f64 ? DType::f64 : DType::f32; }

  void companion(const Tensor& t, const char* arg) const {
    if (t.dtype == float_kind()) return;
    fail(ErrorKind::wrong_type, arg,
         std::string("dtype must be ") + dtype_name(float_kind()) +
             (q_.dtype == DType::f64 ? " (float64 q: the fp64 reference mode)" : "") + ", got " + dtype_name(t.dtype));
  }

  // An output in q's dtype (o, dq, dk, dv).
  void typed_output(const Tensor& t, const char* arg, const char* layout, std::initializer_list<int64_t> dims) const {
    tensor(t, arg, layout, dims);
    same_dtype(t, arg, q_.dtype, "q");
    output(t, arg);
  }

  // An fp32 companion output (lse, dg, dsink, ...).
  void companion_output(const Tensor& t, const char* arg, const char* layout,
                        std::initializer_list<int64_t> dims) const {
    tensor(t, arg, layout, dims);
    companion(t, arg);
    output(t, arg);
  }

  // The gradient of an optional input (dg of g, dsink of sink, ...): required exactly when `input` is given.
  void companion_gradient(bool given, const Tensor& t, const char* arg, const char* input, const char* layout,
                          std::initializer_list<int64_t> dims) const {
    if (!given) {
      require(!t.defined(), arg, std::string("is given but ") + input + " is not");
      return;
    }
    require(t.defined(), arg, std::string("is required ") + layout + " because " + input + " is given");
    companion_output(t, arg, layout, dims);
  }

  // o's rounding residual: int8 shaped as o, of a fp16 or bf16 o (fp32 and fp64 outputs have none to keep).
  void residual(const Tensor& t, const char* layout, std::initializer_list<int64_t> dims) const {
    tensor(t, "o_residual", layout, dims);
    dtype(t, "o_residual", {DType::i8});
    require(q_.dtype == DType::f16 || q_.dtype == DType::bf16, "o_residual",
            std::string("is kept for float16 and bfloat16 outputs only, got ") + dtype_name(q_.dtype));
  }

  // Values of an index tensor when they can be read: on the host always, on the GPU when asked.
  bool readable(const Tensor& t, bool validate) const { return t.device == Device::cpu || validate; }

  // cu_seqlens: starts at 0, never decreases, ends at `total`.
  void offsets(const Tensor& t, const char* arg, int64_t total, bool validate) const {
    if (!readable(t, validate)) return;
    const std::vector<int64_t> c = read_index_values(t, arg);
    require(c[0] == 0, arg, "must start at 0, got " + std::to_string(c[0]));
    for (size_t i = 1; i < c.size(); ++i)
      require(c[i] >= c[i - 1], arg,
              "must not decrease, got " + std::to_string(c[i - 1]) + " then " + std::to_string(c[i]) +
                  " at index " + std::to_string(i));
    require(c.back() == total, arg,
            "must end at the total length " + std::to_string(total) + ", got " + std::to_string(c.back()));
  }

  const char* op() const { return op_; }
  const Tensor& q() const { return q_; }

 private:
  const char* op_;
  const Tensor& q_;
};

const std::initializer_list<DType> kInputTypes = {DType::f16, DType::bf16, DType::f32, DType::f64};
const std::initializer_list<DType> kIndexTypes = {DType::i32, DType::i64};

void check_input_dtype(const Checker& c, const Tensor& q) {
  c.dtype(q, "q", kInputTypes);
  if (q.dtype == DType::f64 && q.device != Device::cpu)
    c.fail(ErrorKind::wrong_type, "q", "float64 is accepted on the cpu (reference) backend only");
}

// q, k and v of one attention: shapes (k and v on q's batch, and on its time axis too where `same_time`), dtypes,
// heads and head dims; names the axes by `q_layout` / `k_layout` / `v_layout`.
struct QkvSizes {
  int64_t B, Tq, Tk, HQ, H, K, V;
};
QkvSizes check_qkv(const Checker& c, const Tensor& q, const Tensor& k, const Tensor& v, bool same_time,
                   const char* q_layout, const char* k_layout, const char* v_layout) {
  if (!q.defined()) c.fail(ErrorKind::invalid_argument, "q", std::string("is required ") + q_layout);
  c.tensor(q, "q", q_layout, {-1, -1, -1, -1});
  QkvSizes z;
  z.B = q.shape[0], z.Tq = q.shape[1], z.HQ = q.shape[2], z.K = q.shape[3];
  check_input_dtype(c, q);
  c.tensor(k, "k", k_layout, {z.B, same_time ? z.Tq : -1, -1, z.K});
  z.Tk = k.shape[1], z.H = k.shape[2];
  c.tensor(v, "v", v_layout, {z.B, z.Tk, z.H, -1});
  z.V = v.shape[3];
  c.same_dtype(k, "k", q.dtype, "q");
  c.same_dtype(v, "v", q.dtype, "q");
  c.heads(z.HQ, z.H, "k");
  c.head_dim(z.K, "q", "K", kMaxHeadDim);
  c.head_dim(z.V, "v", "V", kMaxHeadDim);
  return z;
}

// The part shared by forward and backward: q/k/v, optional g/sink/cu_seqlens, scale and window.
AttentionProblem check_attention_inputs(const Checker& c, const Tensor& q, const Tensor& k, const Tensor& v,
                                        const Tensor& g, const Tensor& sink, const Tensor& cu_seqlens,
                                        const std::optional<float>& scale, const std::optional<int64_t>& window,
                                        bool validate) {
  const QkvSizes z = check_qkv(c, q, k, v, /*same_time=*/true, "[B,T,HQ,K]", "[B,T,H,K]", "[B,T,H,V]");
  AttentionProblem p;
  p.B = z.B, p.T = z.Tq, p.HQ = z.HQ, p.H = z.H, p.K = z.K, p.V = z.V;

  if (g.defined()) {
    c.tensor(g, "g", "[B,T,HQ]", {p.B, p.T, p.HQ});
    if (q.dtype == DType::f64) c.dtype(g, "g", {DType::f64});
    else c.dtype(g, "g", {DType::f32, DType::f16, DType::bf16});
    p.has_gate = true;
  }
  if (sink.defined()) {
    c.tensor(sink, "sink", "[HQ]", {p.HQ});
    c.companion(sink, "sink");
    p.has_sink = true;
  }
  p.num_seqs = p.B;
  if (cu_seqlens.defined()) {
    c.tensor(cu_seqlens, "cu_seqlens", "[N+1]", {-1});
    c.dtype(cu_seqlens, "cu_seqlens", kIndexTypes);
    c.require(cu_seqlens.shape[0] >= 1, "cu_seqlens", "needs at least one element ([N+1])");
    c.require(p.B == 1, "cu_seqlens", "packed sequences need batch size B == 1, got B=" + std::to_string(p.B));
    c.offsets(cu_seqlens, "cu_seqlens", p.T, validate);
    p.packed = true;
    p.num_seqs = cu_seqlens.shape[0] - 1;
  }
  p.scale = c.scale(scale, p.K);
  p.window = c.window(window);
  return p;
}

}  // namespace

AttentionProblem check_forward(const ForwardArgs& a) {
  const Checker c("attention_forward", a.q);
  AttentionProblem p =
      check_attention_inputs(c, a.q, a.k, a.v, a.g, a.sink, a.cu_seqlens, a.scale, a.window, a.validate);
  c.typed_output(a.o, "o", "[B,T,HQ,V]", {p.B, p.T, p.HQ, p.V});
  if (a.lse.defined()) {
    c.companion_output(a.lse, "lse", "[B,T,HQ]", {p.B, p.T, p.HQ});
    p.has_lse = true;
  }
  if (a.o_residual.defined()) {
    c.residual(a.o_residual, "[B,T,HQ,V]", {p.B, p.T, p.HQ, p.V});
    c.output(a.o_residual, "o_residual");
    p.has_o_residual = true;
  }
  return p;
}

AttentionProblem check_backward(const BackwardArgs& a) {
  const Checker c("attention_backward", a.q);
  AttentionProblem p =
      check_attention_inputs(c, a.q, a.k, a.v, a.g, a.sink, a.cu_seqlens, a.scale, a.window, a.validate);
  c.tensor(a.o, "o", "[B,T,HQ,V]", {p.B, p.T, p.HQ, p.V});
  c.same_dtype(a.o, "o", a.q.dtype, "q");
  c.tensor(a.lse, "lse", "[B,T,HQ]", {p.B, p.T, p.HQ});
  c.companion(a.lse, "lse");
  c.tensor(a.dout, "dout", "[B,T,HQ,V]", {p.B, p.T, p.HQ, p.V});
  c.same_dtype(a.dout, "dout", a.q.dtype, "q");
  p.has_lse = true;
  if (a.o_residual.defined()) {
    c.residual(a.o_residual, "[B,T,HQ,V]", {p.B, p.T, p.HQ, p.V});
    p.has_o_residual = true;
  }

  c.typed_output(a.dq, "dq", "[B,T,HQ,K]", {p.B, p.T, p.HQ, p.K});
  c.typed_output(a.dk, "dk", "[B,T,H,K]", {p.B, p.T, p.H, p.K});
  c.typed_output(a.dv, "dv", "[B,T,H,V]", {p.B, p.T, p.H, p.V});
  c.companion_gradient(p.has_gate, a.dg, "dg", "g", "[B,T,HQ]", {p.B, p.T, p.HQ});
  c.companion_gradient(p.has_sink, a.dsink, "dsink", "sink", "[HQ]", {p.HQ});
  return p;
}

namespace {

// The part shared by the slice ops: q and the key slice k/v, the cumulative gates, sink, positions, scale, window.
SliceProblem check_slice_inputs(const Checker& c, const Tensor& q, const Tensor& k, const Tensor& v,
                                const Tensor& gate_q, const Tensor& gate_k, const Tensor& sink, int64_t q_start,
                                int64_t k_start, const std::optional<float>& scale,
                                const std::optional<int64_t>& window) {
  const QkvSizes z = check_qkv(c, q, k, v, /*same_time=*/false, "[B,Tq,HQ,K]", "[B,Tk,H,K]", "[B,Tk,H,V]");
  SliceProblem p;
  p.B = z.B, p.Tq = z.Tq, p.Tk = z.Tk, p.HQ = z.HQ, p.H = z.H, p.K = z.K, p.V = z.V;
  c.require(q_start >= 0 && q_start <= INT64_MAX / 2 - p.Tq, "q_start",
            "must be >= 0 with q_start + Tq a position, got " + std::to_string(q_start));
  c.require(k_start >= 0 && k_start <= INT64_MAX / 2 - p.Tk, "k_start",
            "must be >= 0 with k_start + Tk a position, got " + std::to_string(k_start));
  p.q_start = q_start;
  p.k_start = k_start;
  c.require(gate_q.defined() == gate_k.defined(), gate_q.defined() ? "gate_k" : "gate_q",
            "the cumulative gates come in pairs: gate_q [B,Tq,HQ] and gate_k [B,Tk,HQ], or neither");
  if (gate_q.defined()) {
    c.tensor(gate_q, "gate_q", "[B,Tq,HQ]", {p.B, p.Tq, p.HQ});
    c.tensor(gate_k, "gate_k", "[B,Tk,HQ]", {p.B, p.Tk, p.HQ});
    c.companion(gate_q, "gate_q");
    c.companion(gate_k, "gate_k");
    p.has_gate = true;
  }
  if (sink.defined()) {
    c.tensor(sink, "sink", "[HQ]", {p.HQ});
    c.companion(sink, "sink");
    p.has_sink = true;
  }
  p.scale = c.scale(scale, p.K);
  p.window = c.window(window);
  return p;
}

}  // namespace

SliceProblem check_forward_slice(const SliceForwardArgs& a) {
  const Checker c("attention_forward_slice", a.q);
  const SliceProblem p =
      check_slice_inputs(c, a.q, a.k, a.v, a.gate_q, a.gate_k, a.sink, a.q_start, a.k_start, a.scale, a.window);
  c.typed_output(a.o, "o", "[B,Tq,HQ,V]", {p.B, p.Tq, p.HQ, p.V});
  c.companion_output(a.lse, "lse", "[B,Tq,HQ]", {p.B, p.Tq, p.HQ});
  if (a.o_residual.defined()) {
    c.residual(a.o_residual, "[B,Tq,HQ,V]", {p.B, p.Tq, p.HQ, p.V});
    c.output(a.o_residual, "o_residual");
  }
  return p;
}

SliceProblem check_backward_slice(const SliceBackwardArgs& a) {
  const Checker c("attention_backward_slice", a.q);
  const SliceProblem p =
      check_slice_inputs(c, a.q, a.k, a.v, a.gate_q, a.gate_k, a.sink, a.q_start, a.k_start, a.scale, a.window);
  c.tensor(a.dout, "dout", "[B,Tq,HQ,V]", {p.B, p.Tq, p.HQ, p.V});
  c.same_dtype(a.dout, "dout", a.q.dtype, "q");
  c.tensor(a.lse, "lse", "[B,Tq,HQ]", {p.B, p.Tq, p.HQ});
  c.companion(a.lse, "lse");
  c.tensor(a.D, "D", "[B,Tq,HQ]", {p.B, p.Tq, p.HQ});
  c.companion(a.D, "D");
  c.typed_output(a.dq, "dq", "[B,Tq,HQ,K]", {p.B, p.Tq, p.HQ, p.K});
  c.typed_output(a.dk, "dk", "[B,Tk,H,K]", {p.B, p.Tk, p.H, p.K});
  c.typed_output(a.dv, "dv", "[B,Tk,H,V]", {p.B, p.Tk, p.H, p.V});
  c.companion_gradient(p.has_gate, a.dgate_q, "dgate_q", "gate_q", "[B,Tq,HQ]", {p.B, p.Tq, p.HQ});
  c.companion_gradient(p.has_gate, a.dgate_k, "dgate_k", "gate_k", "[B,Tk,HQ]", {p.B, p.Tk, p.HQ});
  c.companion_gradient(p.has_sink, a.dsink, "dsink", "sink", "[HQ]", {p.HQ});
  return p;
}

DecodeProblem check_decode(const DecodeArgs& a) {
  const Checker c("decode", a.q);
  if (!a.q.defined()) c.fail(ErrorKind::invalid_argument, "q", "is required [N,HQ,K]");
  c.tensor(a.q, "q", "[N,HQ,K]", {-1, -1, -1});
  check_input_dtype(c, a.q);
  DecodeProblem p;
  p.N = a.q.shape[0];
  p.HQ = a.q.shape[1];
  p.K = a.q.shape[2];
  c.tensor(a.k, "k", "[T,H,K]", {-1, -1, p.K});
  p.T = a.k.shape[0];
  p.H = a.k.shape[1];
  c.tensor(a.v, "v", "[T,H,V]", {p.T, p.H, -1});
  p.V = a.v.shape[2];
  c.same_dtype(a.k, "k", a.q.dtype, "q");
  c.same_dtype(a.v, "v", a.q.dtype, "q");
  c.heads(p.HQ, p.H, "k");
  c.head_dim(p.K, "q", "K", kMaxHeadDim);
  c.head_dim(p.V, "v", "V", kMaxHeadDim);
  c.tensor(a.cu_seqlens, "cu_seqlens", "[N+1]", {p.N + 1});
  c.dtype(a.cu_seqlens, "cu_seqlens", kIndexTypes);
  c.offsets(a.cu_seqlens, "cu_seqlens", p.T, a.validate);
  c.tensor(a.o, "o", "[N,HQ,V]", {p.N, p.HQ, p.V});
  c.same_dtype(a.o, "o", a.q.dtype, "q");
  c.output(a.o, "o");
  if (a.g.defined()) {
    c.tensor(a.g, "g", "[T,HQ]", {p.T, p.HQ});
    if (a.q.dtype == DType::f64) c.dtype(a.g, "g", {DType::f64});
    else c.dtype(a.g, "g", {DType::f32, DType::f16, DType::bf16});
    p.has_gate = true;
  }
  if (a.sink.defined()) {
    c.tensor(a.sink, "sink", "[HQ]", {p.HQ});
    c.companion(a.sink, "sink");
    p.has_sink = true;
  }
  p.gate_scale = a.gate_scale;
  p.scale = c.scale(a.scale, p.K);
  p.window = c.window(a.window);
  return p;
}

namespace {

ScaleMode check_kv_scale(const Checker& c, const Tensor& s, const char* arg, const PagedProblem& p) {
  if (!s.defined()) return ScaleMode::none;
  c.require(p.fp8, arg, "is given but the caches are not float8_e4m3fn (a scale cannot be honoured there)");
  c.companion(s, arg);
  if (s.rank >= 0 && s.rank <= 1 && s.numel() == 1) {
    c.placement(s, arg);
    return ScaleMode::per_tensor;
  }
  const bool per_token = s.rank == 3 && s.shape[0] == p.num_blocks && s.shape[1] == p.H && s.shape[2] == p.block_size;
  c.require(per_token, arg,
            "must hold one scale per tensor ([1]) or one per token ([num_blocks,H,block_size] = [" +
                std::to_string(p.num_blocks) + "," + std::to_string(p.H) + "," + std::to_string(p.block_size) +
                "]), got shape " + shape_str(s));
  c.tensor(s, arg, "[num_blocks,H,block_size]", {p.num_blocks, p.H, p.block_size});
  return ScaleMode::per_token;
}

}  // namespace

PagedProblem check_paged(const PagedArgs& a) {
  const Checker c("paged_attention", a.q);
  if (!a.q.defined()) c.fail(ErrorKind::invalid_argument, "q", "is required [total_q,HQ,K]");
  c.tensor(a.q, "q", "[total_q,HQ,K]", {-1, -1, -1});
  check_input_dtype(c, a.q);
  PagedProblem p;
  p.total_q = a.q.shape[0];
  p.HQ = a.q.shape[1];
  p.K = a.q.shape[2];
  c.tensor(a.k_cache, "k_cache", "[num_blocks,block_size,H,K]", {-1, -1, -1, p.K});
  p.num_blocks = a.k_cache.shape[0];
  p.block_size = a.k_cache.shape[1];
  p.H = a.k_cache.shape[2];
  c.tensor(a.v_cache, "v_cache", "[num_blocks,block_size,H,V]", {p.num_blocks, p.block_size, p.H, -1});
  p.V = a.v_cache.shape[3];
  c.heads(p.HQ, p.H, "k_cache");
  c.head_dim(p.K, "q", "K", kMaxPagedKeyDim);
  c.head_dim(p.V, "v_cache", "V", kMaxHeadDim);
  c.require(p.block_size >= 16 && p.block_size <= 256 && p.block_size % 16 == 0, "k_cache",
            "block_size (axis 1) must be a multiple of 16 in 16..256, got " + std::to_string(p.block_size));
  p.fp8 = a.k_cache.dtype == DType::e4m3;
  if (p.fp8) c.same_dtype(a.v_cache, "v_cache", DType::e4m3, "k_cache");
  else {
    if (a.k_cache.dtype != a.q.dtype)
      c.fail(ErrorKind::wrong_type, "k_cache",
             std::string("dtype must match q (") + dtype_name(a.q.dtype) + ") or be float8_e4m3fn, got " +
                 dtype_name(a.k_cache.dtype));
    c.same_dtype(a.v_cache, "v_cache", a.q.dtype, "q");
  }
  c.tensor(a.block_table, "block_table", "[N,max_blocks]", {-1, -1});
  c.dtype(a.block_table, "block_table", {DType::i32});
  p.N = a.block_table.shape[0];
  p.max_blocks = a.block_table.shape[1];
  c.tensor(a.seq_lens_k, "seq_lens_k", "[N]", {p.N});
  c.dtype(a.seq_lens_k, "seq_lens_k", {DType::i32});
  c.tensor(a.cu_seqlens_q, "cu_seqlens_q", "[N+1]", {p.N + 1});
  c.dtype(a.cu_seqlens_q, "cu_seqlens_q", kIndexTypes);
  c.tensor(a.o, "o", "[total_q,HQ,V]", {p.total_q, p.HQ, p.V});
  c.same_dtype(a.o, "o", a.q.dtype, "q");
  c.output(a.o, "o");
  if (a.sink.defined()) {
    c.tensor(a.sink, "sink", "[HQ]", {p.HQ});
    c.companion(a.sink, "sink");
    p.has_sink = true;
  }
  p.k_scale = check_kv_scale(c, a.k_scale, "k_scale", p);
  p.v_scale = check_kv_scale(c, a.v_scale, "v_scale", p);
  p.scale = c.scale(a.scale, p.K);
  p.window = c.window(a.window);
  if (a.max_seqlen_q) {
    c.require(*a.max_seqlen_q >= 1, "max_seqlen_q", "must be >= 1 (or absent), got " + std::to_string(*a.max_seqlen_q));
    p.max_q = *a.max_seqlen_q;
  }

  // Index values: query offsets, context lengths against the table, table entries that will be read.
  c.offsets(a.cu_seqlens_q, "cu_seqlens_q", p.total_q, a.validate);
  if (c.readable(a.seq_lens_k, a.validate)) {
    const std::vector<int64_t> cu = read_index_values(a.cu_seqlens_q, "cu_seqlens_q");
    const std::vector<int64_t> lens = read_index_values(a.seq_lens_k, "seq_lens_k");
    const std::vector<int64_t> table = read_index_values(a.block_table, "block_table");
    const int64_t capacity = p.max_blocks * p.block_size;
    for (int64_t n = 0; n < p.N; ++n) {
      const int64_t len = lens[n], lq = cu[n + 1] - cu[n];
      const std::string at = " for sequence " + std::to_string(n);
      c.require(len >= 0, "seq_lens_k", "must be >= 0, got " + std::to_string(len) + at);
      c.require(len <= capacity, "seq_lens_k",
                "is larger than the block table holds (" + std::to_string(capacity) + " tokens), got " +
                    std::to_string(len) + at);
      c.require(lq <= len, "cu_seqlens_q",
                "gives more query tokens (" + std::to_string(lq) + ") than seq_lens_k (" + std::to_string(len) +
                    ")" + at);
      c.require(p.max_q == 0 || lq <= p.max_q, "max_seqlen_q",
                "is smaller than the query tokens (" + std::to_string(lq) + ")" + at + ", got " +
                    std::to_string(p.max_q));
      for (int64_t b = 0; b * p.block_size < len; ++b) {
        const int64_t entry = table[n * p.max_blocks + b];
        c.require(entry >= 0 && entry < p.num_blocks, "block_table",
                  "entry " + std::to_string(entry) + " at [" + std::to_string(n) + "," + std::to_string(b) +
                      "] is out of range [0," + std::to_string(p.num_blocks) + ")");
      }
    }
  }
  return p;
}

}  // namespace flashgate::detail
