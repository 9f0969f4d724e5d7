// The API fuzz: small random valid cases of every op, random mutations that mostly make them invalid, and
// the property every call must have: it succeeds, or it throws flashgate::Error (naming an argument, with
// the same message from workspace_size) and leaves every byte of every tensor unchanged. Never a crash,
// never another exception type. Decisions come from a Choices source: a seeded generator in the gtest
// (tests/cpu/fuzz_test.cpp), the fuzzer's bytes in the libFuzzer target (tests/fuzz/).
#pragma once

#include <cstdint>
#include <exception>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "api_subject.h"

namespace fgtest::fuzz {

using flashgate::detail::ScaleMode;

// Where the fuzz's decisions come from.
class Choices {
 public:
  explicit Choices(std::function<uint64_t()> source) : next_(std::move(source)) {}
  int64_t below(int64_t n) { return n <= 0 ? 0 : static_cast<int64_t>(next_() % static_cast<uint64_t>(n)); }
  int64_t between(int64_t lo, int64_t hi) { return lo + below(hi - lo + 1); }
  bool percent(int p) { return below(100) < p; }
  template <class T>
  T pick(std::initializer_list<T> options) {
    return *(options.begin() + below(static_cast<int64_t>(options.size())));
  }
  uint64_t raw() { return next_(); }

 private:
  std::function<uint64_t()> next_;
};

inline DType any_input_dtype(Choices& c) { return c.pick({DType::f32, DType::f32, DType::f16, DType::bf16, DType::f64}); }
inline DType any_dtype(Choices& c) {
  return c.pick({DType::f16, DType::bf16, DType::f32, DType::f64, DType::e4m3, DType::i32, DType::i64});
}
inline std::optional<int64_t> any_window(Choices& c) {
  if (c.percent(50)) return std::nullopt;
  return c.between(0, 6);
}
inline std::optional<float> any_scale(Choices& c) {
  if (c.percent(70)) return std::nullopt;
  return c.pick({0.25f, 1.0f, -0.5f, 0.0f});
}

// ---- small random valid cases ----------------------------------------------------------------------------

inline flashgate::harness::AttentionConfig random_attention_config(Choices& c) {
  flashgate::harness::AttentionConfig cfg;
  cfg.batch = c.between(1, 2), cfg.seqlen = c.between(0, 6);
  cfg.kv_heads = c.between(1, 2), cfg.heads = cfg.kv_heads * c.between(1, 3);
  cfg.head_dim = c.between(1, 9), cfg.v_dim = c.between(1, 9);
  if (c.percent(30)) {
    cfg.packed.resize(static_cast<size_t>(c.between(1, 3)));
    for (int64_t& L : cfg.packed) L = c.between(0, 4);
  }
  cfg.dtype = any_input_dtype(c);
  cfg.gate = c.percent(50), cfg.sink = c.percent(50);
  cfg.window = any_window(c);
  cfg.scale = any_scale(c);
  cfg.row_pad = c.pick<int64_t>({0, 0, 0, 1, 2});
  cfg.deterministic = c.percent(20);
  return cfg;
}

template <class Args>
Subject<Args> random_valid(Choices& c, std::string& describe);

template <>
inline Subject<ForwardArgs> random_valid(Choices& c, std::string& describe) {
  const auto cfg = random_attention_config(c);
  describe = cfg.describe();
  Rng rng(c.raw());
  const auto kase = flashgate::harness::AttentionCase::random(cfg, rng);
  Subject<ForwardArgs> s = forward_subject(kase, c.raw());
  if (c.percent(20)) s.drop("lse");
  return s;
}

template <>
inline Subject<BackwardArgs> random_valid(Choices& c, std::string& describe) {
  const auto cfg = random_attention_config(c);
  describe = cfg.describe();
  Rng rng(c.raw());
  auto kase = flashgate::harness::AttentionCase::random(cfg, rng);
  kase.o.fill_normal(rng);  // stand-ins for a forward's results: finite values
  kase.lse.fill_normal(rng, 2.0, 1.0);
  return backward_subject(kase, c.raw());
}

template <>
inline Subject<DecodeArgs> random_valid(Choices& c, std::string& describe) {
  flashgate::harness::DecodeConfig cfg;
  cfg.seqlens.resize(static_cast<size_t>(c.between(0, 3)));
  for (int64_t& L : cfg.seqlens) L = c.between(0, 5);
  cfg.kv_heads = c.between(1, 2), cfg.heads = cfg.kv_heads * c.between(1, 3);
  cfg.head_dim = c.between(1, 9), cfg.v_dim = c.between(1, 9);
  cfg.dtype = any_input_dtype(c);
  cfg.gate = c.percent(50), cfg.sink = c.percent(50), cfg.gate_scale = c.percent(30);
  cfg.window = any_window(c);
  cfg.scale = any_scale(c);
  cfg.row_pad = c.pick<int64_t>({0, 0, 1});
  describe = cfg.describe();
  Rng rng(c.raw());
  return decode_subject(flashgate::harness::DecodeCase::random(cfg, rng), c.raw());
}

template <>
inline Subject<PagedArgs> random_valid(Choices& c, std::string& describe) {
  flashgate::harness::PagedConfig cfg;
  const int64_t n = c.between(1, 3);
  cfg.context_lens.clear(), cfg.query_lens.clear();
  for (int64_t i = 0; i < n; ++i) {
    const int64_t ctx = c.between(0, 40);
    cfg.context_lens.push_back(ctx);
    cfg.query_lens.push_back(c.between(0, std::min<int64_t>(ctx, 4)));
  }
  cfg.kv_heads = c.between(1, 2), cfg.heads = cfg.kv_heads * c.between(1, 3);
  cfg.head_dim = c.between(1, 9), cfg.v_dim = c.between(1, 9);
  cfg.block_size = c.pick<int64_t>({16, 16, 32});
  cfg.spare_blocks = c.between(0, 2);
  cfg.dtype = any_input_dtype(c);
  cfg.fp8 = c.percent(30);
  if (cfg.fp8) cfg.scale_mode = c.pick({ScaleMode::none, ScaleMode::per_tensor, ScaleMode::per_token});
  cfg.sink = c.percent(50);
  cfg.window = any_window(c);
  cfg.scale = any_scale(c);
  describe = cfg.describe();
  Rng rng(c.raw());
  return paged_subject(flashgate::harness::PagedCase::random(cfg, rng), c.raw());
}

// ---- mutations ------------------------------------------------------------------------------------------

inline int64_t corrupt_index(Choices& c, int64_t old) {
  switch (c.below(8)) {
    case 0: return -1;
    case 1: return old + 1;
    case 2: return old - 1;
    case 3: return 0;
    case 4: return std::numeric_limits<int32_t>::max();
    case 5: return std::numeric_limits<int32_t>::min();
    case 6: return old + 16;
    default: return c.between(0, 50);
  }
}

template <class Args>
void mutate_scalar(Subject<Args>& s, Choices& c, std::string& what) {
  switch (c.below(5)) {
    case 0:
      s.args.window = c.pick<int64_t>({-1, -100, 0, 1, 1000, std::numeric_limits<int64_t>::min()});
      what = "window=" + std::to_string(*s.args.window);
      return;
    case 1:
      s.args.scale = c.pick({std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                             -std::numeric_limits<float>::infinity(), 0.0f, 1e30f, -2.0f});
      what = "scale=" + std::to_string(*s.args.scale);
      return;
    case 2:
      s.args.validate = !s.args.validate;
      what = "validate flipped";
      return;
    case 3:
      s.launch.backend = c.pick({flashgate::Backend::cpu, flashgate::Backend::cuda, flashgate::Backend::hopper});
      what = std::string("backend=") + flashgate::backend_name(s.launch.backend);
      return;
    default:
      s.args.window.reset();
      s.args.scale.reset();
      what = "window and scale unset";
      return;
  }
}

// One random change; returns what it did. `labelled` keeps device relabelling to one tensor per case (with
// one relabelled tensor the call is refused before anything is read; see Subject::label_device).
template <class Args>
std::string mutate(Subject<Args>& s, Choices& c, bool& labelled) {
  const std::vector<std::string> names = s.field_names();
  const std::string name = names[static_cast<size_t>(c.below(static_cast<int64_t>(names.size())))];
  Tensor& f = s.field(name);
  const bool present = f.defined() && f.rank >= 1 && f.rank <= flashgate::kMaxRank;
  const int axis = present ? static_cast<int>(c.below(f.rank)) : 0;
  std::string what;
  switch (c.below(16)) {
    case 0:
      s.drop(name);
      return "drop " + name;
    case 1:
      if (!present) break;
      s.resize(name, axis, std::max<int64_t>(0, f.shape[axis] + c.pick<int64_t>({-1, 1, 1, 2})));
      return "resize " + name + " axis " + std::to_string(axis);
    case 2:
      if (!present) break;
      s.change_rank(name);
      return "change rank of " + name;
    case 3: {
      if (!present) break;
      const DType t = any_dtype(c);
      s.retype(name, t);
      return "retype " + name + " to " + flashgate::dtype_name(t);
    }
    case 4:
      if (!present) break;
      s.stride_last(name);
      return "stride 2 on the last axis of " + name;
    case 5:
      if (!present) break;
      s.misalign(name);
      return "misalign " + name;
    case 6:
      if (!present) break;
      s.zero_stride(name, axis);
      return "zero stride on " + name + " axis " + std::to_string(axis);
    case 7:
      if (!present) break;
      s.negate_stride(name, axis);
      return "negative stride on " + name + " axis " + std::to_string(axis);
    case 8:
      if (!present || labelled) break;
      labelled = true;
      if (c.percent(50)) s.label_device(name, Device::cuda);
      else s.label_device(name, f.device, f.device_index + 1);
      return "other device for " + name;
    case 9:
    case 10: {
      // Corrupt one value of an index tensor (the most likely way to read out of bounds).
      std::vector<std::string> index;
      for (const std::string& n : names)
        if (s.field(n).defined() && s.has_storage(n) && is_index_dtype(s.field(n).dtype) &&
            s.field(n).rank >= 1 && s.field(n).rank <= flashgate::kMaxRank)
          index.push_back(n);
      if (index.empty()) break;
      const std::string& n = index[static_cast<size_t>(c.below(static_cast<int64_t>(index.size())))];
      std::vector<int64_t> v = s.index_values(n);
      if (v.empty() || static_cast<int64_t>(v.size()) != s.field(n).numel()) break;
      const int64_t at = c.below(static_cast<int64_t>(v.size()));
      const int64_t value = corrupt_index(c, v[static_cast<size_t>(at)]);
      s.set_index_at(n, at, value);
      return "index " + n + "[" + std::to_string(at) + "]=" + std::to_string(value);
    }
    case 11:
      mutate_scalar(s, c, what);
      return what;
    case 12: {
      const std::string other = names[static_cast<size_t>(c.below(static_cast<int64_t>(names.size())))];
      s.swap_fields(name, other);
      return "swap " + name + " and " + other;
    }
    case 13: {
      // A fresh tensor of a random small shape and dtype in any slot (present or optional).
      std::vector<int64_t> shape(static_cast<size_t>(c.between(1, 4)));
      for (int64_t& d : shape) d = c.between(0, 4);
      const DType t = any_dtype(c);
      OwnedTensor fresh(t, shape);
      if (is_index_dtype(t)) fresh.fill(0);
      else fresh.fill(0.5);
      s.attach(name, fresh);
      return "attach a random tensor as " + name;
    }
    case 14:
      // Layout changes that keep a valid call valid: padded rows, permuted storage.
      if (!present || !s.has_storage(name)) break;
      if (f.rank >= 3 && c.percent(50)) {
        s.swap_storage_axes(name, 0, f.rank - 2);
        return "permuted storage for " + name;
      }
      s.pad_rows(name, c.between(1, 2));
      return "padded rows for " + name;
    default:
      break;
  }
  return "no change";
}

// ---- the property -----------------------------------------------------------------------------------------

// Calls workspace_size and the op once; returns "" when the outcome is allowed, else what went wrong.
// `valid` says whether the op accepted the call.
template <class Args>
std::string check_call(const Subject<Args>& s, bool& valid) {
  valid = false;
  const auto before = s.snapshot();
  std::optional<std::string> sizing_error;
  try {
    s.workspace();
  } catch (const flashgate::Error& e) {
    sizing_error = e.what();
  } catch (const std::exception& e) {
    return std::string("workspace_size threw a non-flashgate exception: ") + e.what();
  } catch (...) {
    return "workspace_size threw something that is not a std::exception";
  }
  try {
    s.run();
    valid = true;
  } catch (const flashgate::Error& e) {
    const std::string message = e.what();
    if (sizing_error && *sizing_error != message)
      return "workspace_size and the op disagree: '" + *sizing_error + "' vs '" + message + "'";
    if (!(before == s.snapshot())) return "rejected ('" + message + "') but tensor bytes changed";
    if (message.rfind("flashgate: ", 0) != 0) return "message lacks the 'flashgate: ' prefix: " + message;
    if (e.kind() != ErrorKind::runtime && e.argument().empty()) return "the error names no argument: " + message;
    if (message.find(e.argument()) == std::string::npos)
      return "message does not contain the argument '" + e.argument() + "': " + message;
    return "";
  } catch (const std::exception& e) {
    return std::string("the op threw a non-flashgate exception: ") + e.what();
  } catch (...) {
    return "the op threw something that is not a std::exception";
  }
  if (sizing_error) return "workspace_size refused ('" + *sizing_error + "') a call the op accepted";
  return "";
}

struct CaseResult {
  const char* op = "";
  bool valid = false;
  std::string failure;   // "" when the property held
  std::string describe;  // the base case and its mutations
};

template <class Args>
CaseResult run_case(Choices& c) {
  CaseResult r;
  r.op = OpTraits<Args>::name;
  Subject<Args> s = random_valid<Args>(c, r.describe);
  const int64_t mutations = c.pick<int64_t>({0, 1, 1, 1, 1, 2, 2, 2, 3, 4});
  bool labelled = false;
  for (int64_t i = 0; i < mutations; ++i) r.describe += "; " + mutate(s, c, labelled);
  r.failure = check_call(s, r.valid);
  return r;
}

// One case of a random op.
inline CaseResult run_any_case(Choices& c) {
  switch (c.below(4)) {
    case 0: return run_case<ForwardArgs>(c);
    case 1: return run_case<BackwardArgs>(c);
    case 2: return run_case<DecodeArgs>(c);
    default: return run_case<PagedArgs>(c);
  }
}

}  // namespace fgtest::fuzz
