// Test support for the argument rules (SPEC §8) and the API fuzz: one op's arguments built from a harness
// case, verbs that break one argument at a time, and the checks that a rejected call names the argument
// and leaves every byte of every tensor as it was.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <ostream>
#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "flashgate/flashgate.h"
#include "harness/cases.h"
#include "harness/owned_tensor.h"

namespace fgtest {

using flashgate::BackwardArgs;
using flashgate::DecodeArgs;
using flashgate::Device;
using flashgate::DType;
using flashgate::ErrorKind;
using flashgate::ForwardArgs;
using flashgate::Launch;
using flashgate::PagedArgs;
using flashgate::Tensor;
using flashgate::harness::OwnedTensor;
using flashgate::harness::Rng;

using NamedTensors = std::vector<std::pair<std::string, OwnedTensor>>;

// ---- per-op traits: name, entry points, the tensor fields of the args struct -------------------------------
template <class Args>
struct OpTraits;

template <>
struct OpTraits<ForwardArgs> {
  static std::vector<std::string> outputs() { return {"o", "lse", "o_residual"}; }
  static constexpr const char* name = "attention_forward";
  static void run(const ForwardArgs& a, const Launch& l) { flashgate::attention_forward(a, l); }
  static std::vector<std::pair<const char*, Tensor*>> fields(ForwardArgs& a) {
    return {{"q", &a.q}, {"k", &a.k},       {"v", &a.v},       {"o", &a.o},         {"lse", &a.lse},
            {"o_residual", &a.o_residual}, {"g", &a.g}, {"sink", &a.sink}, {"cu_seqlens", &a.cu_seqlens}};
  }
};

template <>
struct OpTraits<BackwardArgs> {
  static std::vector<std::string> outputs() { return {"dq", "dk", "dv", "dg", "dsink"}; }
  static constexpr const char* name = "attention_backward";
  static void run(const BackwardArgs& a, const Launch& l) { flashgate::attention_backward(a, l); }
  static std::vector<std::pair<const char*, Tensor*>> fields(BackwardArgs& a) {
    return {{"q", &a.q},     {"k", &a.k},   {"v", &a.v},           {"o", &a.o},   {"lse", &a.lse},
            {"dout", &a.dout}, {"g", &a.g}, {"sink", &a.sink},     {"cu_seqlens", &a.cu_seqlens},
            {"o_residual", &a.o_residual},
            {"dq", &a.dq},   {"dk", &a.dk}, {"dv", &a.dv},         {"dg", &a.dg}, {"dsink", &a.dsink}};
  }
};

template <>
struct OpTraits<DecodeArgs> {
  static std::vector<std::string> outputs() { return {"o"}; }
  static constexpr const char* name = "decode";
  static void run(const DecodeArgs& a, const Launch& l) { flashgate::decode(a, l); }
  static std::vector<std::pair<const char*, Tensor*>> fields(DecodeArgs& a) {
    return {{"q", &a.q}, {"k", &a.k}, {"v", &a.v}, {"cu_seqlens", &a.cu_seqlens},
            {"o", &a.o}, {"g", &a.g}, {"sink", &a.sink}};
  }
};

template <>
struct OpTraits<PagedArgs> {
  static std::vector<std::string> outputs() { return {"o"}; }
  static constexpr const char* name = "paged_attention";
  static void run(const PagedArgs& a, const Launch& l) { flashgate::paged_attention(a, l); }
  static std::vector<std::pair<const char*, Tensor*>> fields(PagedArgs& a) {
    return {{"q", &a.q},
            {"k_cache", &a.k_cache},
            {"v_cache", &a.v_cache},
            {"block_table", &a.block_table},
            {"seq_lens_k", &a.seq_lens_k},
            {"cu_seqlens_q", &a.cu_seqlens_q},
            {"o", &a.o},
            {"sink", &a.sink},
            {"k_scale", &a.k_scale},
            {"v_scale", &a.v_scale}};
  }
};

inline NamedTensors named_tensors(const flashgate::harness::AttentionCase& c) {
  return {{"q", c.q},       {"k", c.k},   {"v", c.v},   {"g", c.g},   {"sink", c.sink}, {"cu_seqlens", c.cu_seqlens},
          {"o", c.o},       {"lse", c.lse}, {"dout", c.dout}, {"dq", c.dq}, {"dk", c.dk}, {"dv", c.dv},
          {"dg", c.dg},     {"dsink", c.dsink}, {"o_residual", c.o_residual}};
}
inline NamedTensors named_tensors(const flashgate::harness::DecodeCase& c) {
  return {{"q", c.q}, {"k", c.k}, {"v", c.v}, {"cu_seqlens", c.cu_seqlens}, {"g", c.g}, {"sink", c.sink}, {"o", c.o}};
}
inline NamedTensors named_tensors(const flashgate::harness::PagedCase& c) {
  return {{"q", c.q},         {"k_cache", c.k_cache},       {"v_cache", c.v_cache}, {"block_table", c.block_table},
          {"seq_lens_k", c.seq_lens_k}, {"cu_seqlens_q", c.cu_seqlens_q}, {"sink", c.sink},
          {"k_scale", c.k_scale}, {"v_scale", c.v_scale}, {"o", c.o}};
}

inline bool is_index_dtype(DType t) { return t == DType::i32 || t == DType::i64; }

// ---- one op's arguments over owned storage, and the verbs that break them ---------------------------------
template <class Args>
class Subject {
 public:
  using Traits = OpTraits<Args>;

  // `args` views the tensors of `named` (copies share their storage with the case).
  Subject(Args a, const NamedTensors& named, uint64_t seed) : args(std::move(a)), rng_(seed) {
    for (const auto& [name, t] : named) {
      if (!t.defined()) continue;
      storage_.push_back(t);
      for (auto& [fname, f] : Traits::fields(args))
        if (name == fname && f->data == t.view().data) owner_[name] = t;
    }
  }

  Args args;
  Launch launch;

  const char* op() const { return Traits::name; }

  Tensor& field(const std::string& name) {
    for (auto& [fname, f] : Traits::fields(args))
      if (name == fname) return *f;
    throw std::logic_error("test bug: " + std::string(Traits::name) + " has no tensor argument '" + name + "'");
  }
  std::vector<std::string> field_names() {
    std::vector<std::string> out;
    for (auto& [fname, f] : Traits::fields(args)) out.push_back(fname);
    return out;
  }

  // Points the field at fresh storage `t` (kept alive and watched by this subject).
  void attach(const std::string& name, const OwnedTensor& t) {
    storage_.push_back(t);
    owner_[name] = t;
    field(name) = t.view();
  }
  void drop(const std::string& name) {
    owner_.erase(name);
    field(name) = Tensor{};
  }
  // Same shape, another dtype (index values carried over between index types; floats redrawn).
  void retype(const std::string& name, DType dtype) {
    const Tensor& f = field(name);
    OwnedTensor t(dtype, shape_of(f));
    const OwnedTensor* old = owner(name);
    if (is_index_dtype(dtype))
      t.fill_index(old && is_index_dtype(f.dtype) ? as_ints(old->values()) : std::vector<int64_t>(t.numel(), 0));
    else
      t.fill_normal(rng_);
    attach(name, t);
  }
  // Same dtype, given shape, fresh contents (zeros for index tensors).
  void reshape(const std::string& name, std::vector<int64_t> shape) {
    const DType dtype = field(name).dtype;
    OwnedTensor t(dtype, std::move(shape));
    if (is_index_dtype(dtype)) t.fill(0);
    else t.fill_normal(rng_);
    attach(name, t);
  }
  void resize(const std::string& name, int axis, int64_t size) {
    std::vector<int64_t> shape = shape_of(field(name));
    shape.at(static_cast<size_t>(axis)) = size;
    reshape(name, shape);
  }
  // One axis fewer (the first two merged) or one more (a leading 1), over fresh storage.
  void change_rank(const std::string& name) {
    std::vector<int64_t> shape = shape_of(field(name));
    if (shape.size() >= 2 && (shape.size() == flashgate::kMaxRank || rng_() % 2)) {
      shape[1] *= shape[0];
      shape.erase(shape.begin());
    } else {
      shape.insert(shape.begin(), 1);
    }
    reshape(name, shape);
  }
  // Same dtype and shape, these index values (logical order).
  void set_index(const std::string& name, const std::vector<int64_t>& values) {
    const Tensor& f = field(name);
    OwnedTensor t(f.dtype, shape_of(f));
    if (static_cast<int64_t>(values.size()) != t.numel()) throw std::logic_error("test bug: set_index size");
    t.fill_index(values);
    attach(name, t);
  }
  std::vector<int64_t> index_values(const std::string& name) const { return as_ints(owner_.at(name).values()); }
  void set_index_at(const std::string& name, int64_t flat, int64_t value) {
    std::vector<int64_t> v = index_values(name);
    v.at(static_cast<size_t>(flat)) = value;
    set_index(name, v);
  }
  // The head (last) axis with stride 2, over storage with room for it.
  void stride_last(const std::string& name) {
    const Tensor f = field(name);
    std::vector<int64_t> shape = shape_of(f);
    OwnedTensor t(f.dtype, shape, Device::cpu, std::max<int64_t>(shape.back(), 1));
    t.poison();
    attach(name, t);
    field(name).stride[f.rank - 1] = 2;
  }
  // The data pointer one byte past an element boundary, over storage with an extra outer row.
  void misalign(const std::string& name) {
    const Tensor f = field(name);
    std::vector<int64_t> shape = shape_of(f);
    shape[0] += 1;
    OwnedTensor t(f.dtype, shape);
    t.poison();
    attach(name, t);
    Tensor& v = field(name);
    v.shape[0] -= 1;
    v.data = static_cast<char*>(v.data) + 1;
  }
  // The same values over storage with `pad` unused elements after every last-axis row (strided rows).
  void pad_rows(const std::string& name, int64_t pad) {
    const OwnedTensor& old = owner_.at(name);
    OwnedTensor t(old.view().dtype, shape_of(old.view()), Device::cpu, pad);
    t.poison();
    t.set_values(old.values());
    attach(name, t);
  }
  // The same logical tensor over storage whose axes `a` and `b` are swapped (a permuted, non-contiguous
  // layout; a != last axis, b != last axis); its contents are poisoned (meant for outputs).
  void swap_storage_axes(const std::string& name, int a, int b) {
    const Tensor f = field(name);
    std::vector<int64_t> shape = shape_of(f);
    std::swap(shape[a], shape[b]);
    OwnedTensor t(f.dtype, shape);
    t.poison();
    attach(name, t);
    Tensor& v = field(name);
    std::swap(v.shape[a], v.shape[b]);
    std::swap(v.stride[a], v.stride[b]);
  }
  // Values of the storage behind a field (all its elements, in storage order).
  std::vector<double> storage_values(const std::string& name) const { return owner_.at(name).values(); }
  bool has_storage(const std::string& name) const { return owner_.count(name) > 0; }

  // Stride changes that stay inside the field's storage.
  void zero_stride(const std::string& name, int axis) { field(name).stride[axis] = 0; }
  void negate_stride(const std::string& name, int axis) {
    Tensor& v = field(name);
    v.data = static_cast<char*>(v.data) +
             (v.shape[axis] - 1) * v.stride[axis] * static_cast<int64_t>(flashgate::dtype_size(v.dtype));
    v.stride[axis] = -v.stride[axis];
  }
  // The view claims another device; memory stays on the host. Only for calls that must be rejected before
  // anything is read (a device mismatch with q, or float64 on the GPU).
  void label_device(const std::string& name, Device device, int index = 0) {
    field(name).device = device;
    field(name).device_index = index;
  }
  // Exchanges two fields' views (and what the subject knows of their storage).
  void swap_fields(const std::string& a, const std::string& b) {
    std::swap(field(a), field(b));
    OwnedTensor* oa = owner_.count(a) ? &owner_.at(a) : nullptr;
    OwnedTensor* ob = owner_.count(b) ? &owner_.at(b) : nullptr;
    if (oa && ob) std::swap(*oa, *ob);
    else if (oa) owner_[b] = *oa, owner_.erase(a);
    else if (ob) owner_[a] = *ob, owner_.erase(b);
  }
  // Every present tensor on the GPU: real copies when a GPU is usable, else host memory labelled cuda (then
  // only for requests that must be rejected before anything is read or launched).
  void to_gpu() {
    const bool real = flashgate::cuda_available();
    for (const std::string& name : field_names()) {
      Tensor& f = field(name);
      if (!f.defined()) continue;
      if (real && owner_.count(name)) {
        const OwnedTensor& old = owner_.at(name);
        const std::ptrdiff_t offset = static_cast<char*>(f.data) - static_cast<char*>(old.view().data);
        OwnedTensor t = old.to(Device::cuda);
        storage_.push_back(t);
        owner_[name] = t;
        f.data = static_cast<char*>(t.view().data) + offset;
      }
      f.device = Device::cuda;
    }
  }

  // Every byte of every storage this subject ever attached (inputs and outputs alike).
  std::vector<std::vector<unsigned char>> snapshot() const {
    std::vector<std::vector<unsigned char>> out;
    for (const OwnedTensor& t : storage_) out.push_back(t.raw_bytes());
    return out;
  }

  void run() const { Traits::run(args, launch); }
  size_t workspace() const { return flashgate::workspace_size(args, launch.backend); }

  Rng& rng() { return rng_; }

 private:
  static std::vector<int64_t> shape_of(const Tensor& t) { return std::vector<int64_t>(t.shape, t.shape + t.rank); }
  static std::vector<int64_t> as_ints(const std::vector<double>& v) {
    std::vector<int64_t> out;
    for (double x : v) out.push_back(x == x ? static_cast<int64_t>(x) : 0);
    return out;
  }
  const OwnedTensor* owner(const std::string& name) const {
    auto it = owner_.find(name);
    return it == owner_.end() ? nullptr : &it->second;
  }

  Rng rng_;
  std::vector<OwnedTensor> storage_;
  std::map<std::string, OwnedTensor> owner_;  // the storage behind each field, where the subject knows it
};

inline Subject<ForwardArgs> forward_subject(const flashgate::harness::AttentionCase& c, uint64_t seed) {
  return Subject<ForwardArgs>(c.forward_args(), named_tensors(c), seed);
}
inline Subject<BackwardArgs> backward_subject(const flashgate::harness::AttentionCase& c, uint64_t seed) {
  return Subject<BackwardArgs>(c.backward_args(), named_tensors(c), seed);
}
inline Subject<DecodeArgs> decode_subject(const flashgate::harness::DecodeCase& c, uint64_t seed) {
  return Subject<DecodeArgs>(c.args(), named_tensors(c), seed);
}
inline Subject<PagedArgs> paged_subject(const flashgate::harness::PagedCase& c, uint64_t seed) {
  return Subject<PagedArgs>(c.args(), named_tensors(c), seed);
}

// ---- expectations ----------------------------------------------------------------------------------------

// What a rejected call must show: the error kind, the argument it names, and (with op_prefix) the message
// prefix "flashgate: <op>: <argument>" followed by ':' or ' '; else just "flashgate: ".
struct Rejection {
  std::string argument;
  ErrorKind kind = ErrorKind::invalid_argument;
  bool op_prefix = true;
};

inline const char* kind_name(ErrorKind k) {
  switch (k) {
    case ErrorKind::invalid_argument: return "invalid_argument";
    case ErrorKind::wrong_type: return "wrong_type";
    case ErrorKind::unsupported: return "unsupported";
    case ErrorKind::runtime: return "runtime";
  }
  return "?";
}

// Runs the op (and workspace_size) on `s`; both must throw flashgate::Error as `want` says, with the same
// message, and no byte of any tensor may change. Returns the op's message ("" when it did not throw).
template <class Args>
std::string expect_rejected(const Subject<Args>& s, const Rejection& want) {
  const auto before = s.snapshot();
  std::string message;
  try {
    s.run();
    ADD_FAILURE() << s.op() << ": accepted, but should reject argument '" << want.argument << "'";
  } catch (const flashgate::Error& e) {
    message = e.what();
    EXPECT_EQ(e.argument(), want.argument) << "message: " << message;
    EXPECT_EQ(kind_name(e.kind()), std::string(kind_name(want.kind))) << "message: " << message;
    EXPECT_NE(message.find(want.argument), std::string::npos) << "message does not name the argument: " << message;
    const std::string prefix = std::string("flashgate: ") + (want.op_prefix ? s.op() + std::string(": ") + want.argument : "");
    const bool starts = message.rfind(prefix, 0) == 0 &&
                        (!want.op_prefix || (message.size() > prefix.size() && (message[prefix.size()] == ':' ||
                                                                                message[prefix.size()] == ' ')));
    EXPECT_TRUE(starts) << "message should start with '" << prefix << "': " << message;
  }
  EXPECT_TRUE(before == s.snapshot()) << s.op() << ": a rejected call changed tensor bytes";

  try {
    s.workspace();
    ADD_FAILURE() << s.op() << ": workspace_size accepted, but should reject argument '" << want.argument << "'";
  } catch (const flashgate::Error& e) {
    EXPECT_EQ(std::string(e.what()), message) << "workspace_size and the op disagree";
    EXPECT_EQ(e.argument(), want.argument);
  }
  return message;
}

// Runs workspace_size and the op on `s`; both must succeed. Returns whether they did.
template <class Args>
bool expect_accepted(const Subject<Args>& s) {
  try {
    s.workspace();
  } catch (const flashgate::Error& e) {
    ADD_FAILURE() << s.op() << ": workspace_size rejected a valid call: " << e.what();
    return false;
  }
  try {
    s.run();
  } catch (const flashgate::Error& e) {
    ADD_FAILURE() << s.op() << ": rejected a valid call: " << e.what();
    return false;
  }
  return true;
}

// expect_accepted, and then every output element was written (none still holds the NaN poison; -inf is a
// legal lse). Returns whether the call succeeded.
template <class Args>
bool expect_valid(Subject<Args>& s) {
  if (!expect_accepted(s)) return false;
  for (const std::string& name : OpTraits<Args>::outputs()) {
    if (!s.field(name).defined() || !s.has_storage(name)) continue;
    for (double x : s.storage_values(name))
      if (x != x) {
        ADD_FAILURE() << s.op() << ": output " << name << " has NaN (unwritten or computed) after a valid call";
        break;
      }
  }
  return true;
}

}  // namespace fgtest

namespace fgtest {

// ---- rule tables: one parameterised test per rule ------------------------------------------------------------

// One SPEC §8 rule: start from a valid base, break one thing, expect the rejection.
template <class Args>
struct Rule {
  std::string name;  // a gtest name: letters, digits, underscores
  Rejection want;
  std::function<void(Subject<Args>&)> breaks;
  std::function<Subject<Args>(uint64_t seed)> base;
};

template <class Args>
void PrintTo(const Rule<Args>& r, std::ostream* os) {
  *os << r.name;
}

template <class Args>
std::string rule_test_name(const testing::TestParamInfo<Rule<Args>>& info) {
  return info.param.name;
}

// Fresh inputs each run; the seed is printed on failure (FLASHGATE_SEED repeats it).
template <class Args>
void check_rule(const Rule<Args>& r) {
  const uint64_t seed = flashgate::harness::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed) + " (set FLASHGATE_SEED to repeat)");
  Subject<Args> s = r.base(seed);
  r.breaks(s);
  // Recorded for review: --gtest_output=xml lists every rule's message.
  testing::Test::RecordProperty("message", expect_rejected(s, r.want));
}

}  // namespace fgtest
