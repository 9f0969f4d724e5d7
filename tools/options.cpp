#include "options.h"

#include <cstdlib>
#include <functional>
#include <map>

#include "flashgate/error.h"
#include "harness/cases.h"

namespace flashgate::cli {

const char* usage() {
  return R"(usage: flashgate run [--op forward|backward|decode|paged] [options]
       flashgate bench [--rows TEXT] [--backend B] [--iters N]
       flashgate version

Runs one op on fresh random inputs on the chosen backend, checks it against the fp64 CPU reference
(SPEC relative RMS per output) and prints the error, the time and TFLOP/s or GB/s.
With no options: a small forward problem, on the GPU if there is one, else on the CPU.

shape:    --batch N  --seqlen T  --heads HQ  --kv-heads H  --head-dim K  --v-dim V
          --packed L1,L2,...   packed sequences (forward/backward: B=1; decode: context lengths)
          --q-len N            paged: query tokens per sequence (default 1)
          --block-size N       paged: cache block size (default 16)
features: --gate  --sink  --window W  --scale S
          --fp8 per-tensor|per-token   paged: fp8 e4m3 KV cache with fp32 scales
          --deterministic      backward: bitwise reproducible gradients
run:      --dtype bf16|fp16|fp32  --backend auto|cpu|cuda|hopper  --iters N  --seed S  --no-check
bench:    runs the rows of bench/rows.txt (flashgate alone; bench/run.py compares with peers)
exit:     0 passed, 1 error above tolerance, 2 bad usage, 3 library error
)";
}

namespace {

int64_t parse_int(const std::string& flag, const std::string& text, int64_t min) {
  char* end = nullptr;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || v < min)
    throw UsageError{flag + ": expected an integer >= " + std::to_string(min) + ", got '" + text + "'"};
  return v;
}

float parse_float(const std::string& flag, const std::string& text) {
  char* end = nullptr;
  const float v = std::strtof(text.c_str(), &end);
  if (text.empty() || *end != '\0') throw UsageError{flag + ": expected a number, got '" + text + "'"};
  return v;
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
      {"--seqlen", [&](const std::string& v) { o.seqlen = parse_int("--seqlen", v, 0); }},
      {"--heads", [&](const std::string& v) { o.heads = parse_int("--heads", v, 1); }},
      {"--kv-heads", [&](const std::string& v) { o.kv_heads = parse_int("--kv-heads", v, 1); }},
      {"--head-dim", [&](const std::string& v) { o.head_dim = parse_int("--head-dim", v, 1); }},
      {"--v-dim", [&](const std::string& v) { o.v_dim = parse_int("--v-dim", v, 1); }},
      {"--q-len", [&](const std::string& v) { o.q_len = parse_int("--q-len", v, 1); }},
      {"--block-size", [&](const std::string& v) { o.block_size = parse_int("--block-size", v, 1); }},
      {"--window", [&](const std::string& v) { o.window = parse_int("--window", v, 0); }},
      {"--scale", [&](const std::string& v) { o.scale = parse_float("--scale", v); }},
      {"--iters", [&](const std::string& v) { o.iterations = static_cast<int>(parse_int("--iters", v, 1)); }},
      {"--seed", [&](const std::string& v) { o.seed = static_cast<uint64_t>(parse_int("--seed", v, 0)); }},
      {"--packed",
       [&](const std::string& v) {
         try {
           o.packed = harness::parse_lengths(v, "--packed");
         } catch (const Error& e) {
           throw UsageError{e.what()};
         }
       }},
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
           throw UsageError{e.what()};
         }
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
    } else if (auto v = valued.find(a); v != valued.end()) {
      if (i + 1 >= args.size()) throw UsageError{a + ": needs a value"};
      v->second(args[++i]);
    } else {
      throw UsageError{"unknown option '" + a + "'"};
    }
  }
  if (!o.packed.empty() && o.batch > 1 && o.op != Op::decode && o.op != Op::paged)
    throw UsageError{"--packed and --batch > 1 exclude each other (packed sequences have batch 1)"};
  if (!o.fp8.empty() && o.op != Op::paged) throw UsageError{"--fp8 applies to --op paged only"};
  if (o.deterministic && o.op != Op::backward) throw UsageError{"--deterministic applies to --op backward only"};
  return o;
}

}  // namespace flashgate::cli
