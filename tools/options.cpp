#include "options.h"

#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <map>

#include "api/backend.h"
#include "flashgate/error.h"
#include "harness/cases.h"

namespace flashgate::cli {
namespace {

// Whether this program contains backend `b`: cuda and hopper exist only when their kernels were compiled in,
// so help and --backend say so up front instead of failing later on whatever device code is missing.
bool backend_built(Backend b) {
  switch (b) {
    case Backend::cuda: return detail::cuda_backend() != nullptr;
    case Backend::hopper: return detail::hopper_backend() != nullptr;
    case Backend::automatic:
    case Backend::cpu: return true;
  }
  return false;
}

std::string built_backends() {
  std::string names;
  for (Backend b : {Backend::automatic, Backend::cpu, Backend::cuda, Backend::hopper})
    if (backend_built(b)) names += (names.empty() ? "" : ", ") + std::string(backend_name(b));
  return names;
}

// The backends block of the usage, marking those this build lacks (hopper until its kernels exist).
std::string backends_help() {
  const auto lacking = [](Backend b) { return backend_built(b) ? "" : "  (not in this build)"; };
  return std::string("backends: auto    the GPU backends when a GPU is present (hopper, then cuda), else cpu\n") +
         "          cpu     the fp64 reference\n" +
         "          cuda    portable sm80+ kernels" + lacking(Backend::cuda) + "\n" +
         "          hopper  sm90a kernels, when built" + lacking(Backend::hopper) + "\n";
}

// A backend missing from this build is the library's `unsupported` error (exit 3, as dispatch reports a forced
// backend it lacks), raised before any tensor is allocated and naming the backend.
void require_built(Backend b) {
  if (backend_built(b)) return;
  throw Error(ErrorKind::unsupported, "--backend",
              std::string("flashgate: --backend: backend '") + backend_name(b) +
                  "' is not built into this program (built: " + built_backends() + ")");
}

}  // namespace

const char* usage() {
  static const std::string text = std::string(R"(usage: flashgate run [--op forward|backward|decode|paged] [options]
       flashgate bench [--rows TEXT] [--backend B] [--iters N]
       flashgate version
       flashgate help | --help | -h

Runs one op on fresh random inputs on the chosen backend, checks it against the fp64 CPU reference
(SPEC relative RMS per output) and prints the error, the time and TFLOP/s or GB/s.
With no options: a small forward problem, on the GPU if there is one, else on the CPU.

shape:    --batch N  --seqlen T  --heads HQ  --kv-heads H  --head-dim K  --v-dim V   (each >= 1; K, V <= 512,
                               K <= 576 for paged; unset: a default for the device)
          --packed L1,L2,...   packed sequence LENGTHS, not offsets: 15,85,200 is cu_seqlens 0,15,100,300
                               (forward/backward: B=1; decode/paged: one context length per sequence)
          --q-len N            paged: query tokens per sequence (default 1)
          --block-size N       paged: cache block size, a multiple of 16 in 16..256 (default 16)
features: --gate  --sink  --window W  --scale S
          --fp8 per-tensor|per-token   paged: fp8 e4m3 KV cache with fp32 scales
          --deterministic      backward: bitwise reproducible gradients
          --no-residual        forward / backward, fp16 / bf16: without o's rounding residual (the forward as an
                               inference call runs it; the backward's D from o alone)
run:      --dtype bf16|fp16|fp32  --backend B (below)  --iters N  --seed S  --no-check
)") + backends_help() + R"(bench:    runs the rows of bench/rows.txt (flashgate alone; bench/run.py compares with peers)
exit:     0 passed, 1 error above tolerance, 2 bad usage, 3 library error (incl. no device, too little memory)
)";
  return text.c_str();
}

const char* op_name(Op op) {
  switch (op) {
    case Op::forward: return "forward";
    case Op::backward: return "backward";
    case Op::decode: return "decode";
    case Op::paged: return "paged";
  }
  return "?";
}

bool asks_for_help(const std::vector<std::string>& args) {
  for (const std::string& a : args)
    if (a == "--help" || a == "-h") return true;
  return false;
}

namespace {

// An integer in [min, max]. Overflow is out of range too: strtoll clamps it to INT64_MAX, which would reach the
// harness as a size no machine can allocate instead of an error naming the option.
int64_t parse_int(const std::string& flag, const std::string& text, int64_t min, int64_t max = INT64_MAX) {
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno == ERANGE || v < min || v > max)
    throw UsageError{flag + ": expected an integer " +
                     (max == INT64_MAX ? ">= " + std::to_string(min)
                                       : "in " + std::to_string(min) + ".." + std::to_string(max)) +
                     ", got '" + text + "'"};
  return v;
}

float parse_float(const std::string& flag, const std::string& text) {
  char* end = nullptr;
  const float v = std::strtof(text.c_str(), &end);
  if (text.empty() || *end != '\0' || !std::isfinite(v))
    throw UsageError{flag + ": expected a finite number, got '" + text + "'"};
  return v;
}

// A library error about an option's text, as bad usage (main adds the "flashgate: " prefix itself).
UsageError usage_error(const Error& e) {
  const std::string prefix = "flashgate: ", text = e.what();
  return UsageError{text.rfind(prefix, 0) == 0 ? text.substr(prefix.size()) : text};
}

// Packed lengths whose total fits int64 (token offsets are int64 everywhere; a sum past it wraps negative).
std::vector<int64_t> parse_packed(const std::string& text) {
  std::vector<int64_t> lengths;
  try {
    lengths = harness::parse_lengths(text, "--packed");
  } catch (const Error& e) {
    throw usage_error(e);
  }
  int64_t total = 0;
  for (int64_t L : lengths) {
    if (L > INT64_MAX - total) throw UsageError{"--packed: the lengths add up past 2^63-1 tokens, got '" + text + "'"};
    total += L;
  }
  return lengths;
}

// The library's rule for paged caches (SPEC §6), checked here so that the CLI names its own option.
int64_t parse_block_size(const std::string& text) {
  const int64_t v = parse_int("--block-size", text, 16, 256);
  if (v % 16 != 0) throw UsageError{"--block-size: expected a multiple of 16 in 16..256, got '" + text + "'"};
  return v;
}

// Head dims past the op's limit (512; 576 for paged keys) are refused before any tensor is made.
void check_head_dims(const RunOptions& o) {
  const int64_t k_limit = o.op == Op::paged ? detail::kMaxPagedKeyDim : detail::kMaxHeadDim;
  if (o.head_dim && *o.head_dim > k_limit)
    throw UsageError{std::string("--head-dim: at most ") + std::to_string(k_limit) + " for --op " + op_name(o.op) +
                     ", got " + std::to_string(*o.head_dim)};
}

}  // namespace

RunOptions parse_run_options(const std::vector<std::string>& args) {
  RunOptions o;
  using Setter = std::function<void(const std::string&)>;
  // Flags that take a value.
  const std::map<std::string, Setter> valued = {
      {"--op",
       [&](const std::string& v) {
         static const std::map<std::string, Op> ops = {
             {"forward", Op::forward}, {"backward", Op::backward}, {"decode", Op::decode}, {"paged", Op::paged}};
         auto it = ops.find(v);
         if (it == ops.end()) throw UsageError{"--op: expected forward, backward, decode or paged, got '" + v + "'"};
         o.op = it->second;
       }},
      {"--batch", [&](const std::string& v) { o.batch = parse_int("--batch", v, 1); }},
      {"--seqlen", [&](const std::string& v) { o.seqlen = parse_int("--seqlen", v, 1); }},
      {"--heads", [&](const std::string& v) { o.heads = parse_int("--heads", v, 1); }},
      {"--kv-heads", [&](const std::string& v) { o.kv_heads = parse_int("--kv-heads", v, 1); }},
      // Head dims up to the largest any op takes; check_head_dims below applies the chosen op's own limit.
      {"--head-dim",
       [&](const std::string& v) { o.head_dim = parse_int("--head-dim", v, 1, detail::kMaxPagedKeyDim); }},
      {"--v-dim", [&](const std::string& v) { o.v_dim = parse_int("--v-dim", v, 1, detail::kMaxHeadDim); }},
      {"--q-len", [&](const std::string& v) { o.q_len = parse_int("--q-len", v, 1); }},
      {"--block-size", [&](const std::string& v) { o.block_size = parse_block_size(v); }},
      {"--window", [&](const std::string& v) { o.window = parse_int("--window", v, 0); }},
      {"--scale", [&](const std::string& v) { o.scale = parse_float("--scale", v); }},
      {"--iters", [&](const std::string& v) { o.iterations = static_cast<int>(parse_int("--iters", v, 1, INT_MAX)); }},
      {"--seed", [&](const std::string& v) { o.seed = static_cast<uint64_t>(parse_int("--seed", v, 0)); }},
      {"--packed", [&](const std::string& v) { o.packed = parse_packed(v); }},
      {"--dtype",
       [&](const std::string& v) {
         if (v == "bf16" || v == "bfloat16") o.dtype = DType::bf16;
         else if (v == "fp16" || v == "float16" || v == "f16") o.dtype = DType::f16;
         else if (v == "fp32" || v == "float32" || v == "f32") o.dtype = DType::f32;
         else throw UsageError{"--dtype: expected bf16, fp16 or fp32, got '" + v + "'"};
       }},
      {"--backend",
       [&](const std::string& v) {
         try {
           o.backend = parse_backend(v, "--backend");
         } catch (const Error& e) {
           throw usage_error(e);
         }
         require_built(o.backend);
       }},
      {"--fp8",
       [&](const std::string& v) {
         if (v != "per-tensor" && v != "per-token")
           throw UsageError{"--fp8: expected per-tensor or per-token, got '" + v + "'"};
         o.fp8 = v;
       }},
  };
  // Switches.
  const std::map<std::string, bool*> switches = {
      {"--gate", &o.gate}, {"--sink", &o.sink}, {"--deterministic", &o.deterministic}};

  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (auto s = switches.find(a); s != switches.end()) {
      *s->second = true;
    } else if (a == "--no-check") {
      o.check = false;
    } else if (a == "--no-residual") {
      o.residual = false;
    } else if (auto v = valued.find(a); v != valued.end()) {
      if (i + 1 >= args.size()) throw UsageError{a + ": needs a value"};
      v->second(args[++i]);
    } else {
      throw UsageError{"unknown option '" + a + "'"};
    }
  }
  check_head_dims(o);
  if (!o.packed.empty() && o.batch.value_or(1) > 1 && o.op != Op::decode && o.op != Op::paged)
    throw UsageError{"--packed and --batch > 1 exclude each other (packed sequences have batch 1)"};
  if (!o.fp8.empty() && o.op != Op::paged) throw UsageError{"--fp8 applies to --op paged only"};
  if (o.deterministic && o.op != Op::backward) throw UsageError{"--deterministic applies to --op backward only"};
  if (!o.residual && o.op != Op::forward && o.op != Op::backward)
    throw UsageError{"--no-residual applies to --op forward and backward only"};
  return o;
}

}  // namespace flashgate::cli
