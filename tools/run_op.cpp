// `flashgate run`: one op on fresh random inputs, timed, and checked against the fp64 CPU reference.
#include "run_op.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <new>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "api/device_runtime.h"
#include "flashgate/flashgate.h"
#include "harness/cases.h"
#include "harness/metrics.h"
#include "harness/timer.h"

namespace flashgate::cli {
namespace {

int64_t pick(std::optional<int64_t> asked, int64_t gpu_default, int64_t cpu_default, bool gpu) {
  return asked ? *asked : (gpu ? gpu_default : cpu_default);
}

// SPEC §7: bf16 with a scale above 1/sqrt(K) (peaked softmax) is held to 0.01, everything else to 0.005.
double tolerance_for(DType dtype, std::optional<float> scale, int64_t K) {
  const bool peaked = scale && *scale > 1.0 / std::sqrt(static_cast<double>(K)) * 1.0001;
  return dtype == DType::bf16 && peaked ? 0.01 : 0.005;
}

void compare(RunResult& out, const char* name, const harness::OwnedTensor& got, const harness::OwnedTensor& ref) {
  if (got.defined()) out.errors.emplace_back(name, harness::relative_rms(got.values(), ref.values()));
}

void set_rate(RunResult& r, double amount, const harness::Timing& t, double unit, const char* name) {
  r.median_ms = t.median_ms;
  r.rate = amount / (t.median_ms * 1e-3) / unit;
  r.unit = name;
}

// One run's setting: the options, where it runs, how often, and whether it prints.
struct Plan {
  const RunOptions& o;
  bool gpu = false;
  Device device = Device::cpu;
  int iters = 1;
  uint64_t seed = 0;
  Launch launch;
  bool quiet = false;
};

// ---- memory: a problem larger than the machine is an error saying what it needs, not an abort ---------------

double physical_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? static_cast<double>(pages) * static_cast<double>(page) : 0.0;
}

// "25275990016 bytes of host memory (23.5 GiB)"
std::string host_bytes_text(double bytes) {
  const double gib = bytes / (1024.0 * 1024.0 * 1024.0);
  const char* format = gib < 1e6 ? "%.0f bytes of host memory (%.1f GiB)" : "%.0f bytes of host memory (%.3g GiB)";
  char text[96];
  std::snprintf(text, sizeof text, format, bytes, gib);
  return text;
}

constexpr const char* kCaseContents = "for its inputs and outputs, their copy for a cpu run and the fp64 reference";

Error too_large(const std::string& problem, double needed, const char* contents, const std::string& why) {
  return Error(ErrorKind::runtime, "problem",
               "flashgate: run: " + problem + " needs about " + host_bytes_text(needed) + " " + contents + ": " + why);
}

// Refuses a problem larger than this machine's memory before allocating any of it: past that size malloc
// either throws or (Linux overcommits) succeeds, and the fill that touches the pages is then OOM-killed.
void require_host_memory(const std::string& problem, double needed, const char* contents = kCaseContents) {
  const double have = physical_memory_bytes();
  if (have > 0 && needed > have)
    throw too_large(problem, needed, contents, "this machine has " + host_bytes_text(have));
}

// The host bytes a run holds at once: the case, its copy for the backend when that runs on the cpu, and the
// fp64 reference case when checking.
double run_host_bytes(const Plan& p, double case_bytes, double reference_bytes) {
  return case_bytes * (p.gpu ? 1 : 2) + (p.o.check ? reference_bytes : 0);
}

// Makes the cases of a problem whose size `needed` was checked; an allocation that fails all the same (memory
// taken by others) reports the same count.
template <class Make>
auto allocate(const std::string& problem, double needed, Make make) {
  require_host_memory(problem, needed);
  try {
    return make();
  } catch (const std::bad_alloc&) {
    throw too_large(problem, needed, kCaseContents, "allocating it failed");
  }
}

// A run's cases: the inputs drawn on the host and their copy on the run's device, after checking that the
// machine holds them (`needed`, which the fp64 reference made later is checked against too).
template <class Case>
struct DrawnCases {
  double needed = 0;
  Case host, run;
};

template <class Case, class Config>
DrawnCases<Case> draw_cases(const Plan& p, const std::string& problem, const Config& cfg, const Config& ref_cfg) {
  DrawnCases<Case> c;
  c.needed = run_host_bytes(p, cfg.host_bytes(), ref_cfg.host_bytes());
  harness::Rng rng(p.seed);
  c.host = allocate(problem, c.needed, [&] { return Case::random(cfg, rng); });
  c.run = allocate(problem, c.needed, [&] { return c.host.to(p.device); });
  return c;
}

// Per-sequence lengths for decode and paged: N copies of the context length, or --packed.
std::vector<int64_t> context_lengths(const RunOptions& o, bool gpu) {
  if (!o.packed.empty()) return o.packed;
  const int64_t n = pick(o.batch, 8, 3, gpu), L = pick(o.seqlen, 4096, 300, gpu);
  if (L > INT64_MAX / n)  // the packed total of the keys is an int64
    throw UsageError{"--batch " + std::to_string(n) + " sequences of --seqlen " + std::to_string(L) +
                     " add up past 2^63-1 tokens"};
  require_host_memory(std::string("--op ") + op_name(o.op) + " with " + std::to_string(n) + " sequences",
                      8.0 * static_cast<double>(n), "for their lengths alone");
  return std::vector<int64_t>(n, L);
}

// ---- the run ------------------------------------------------------------------------------------------------

// A GPU run needs a device: name what is missing, with CUDA's reason, before the first allocation fails on it
// with an unrelated-looking error (a CUDA build without a GPU reports "driver version is insufficient").
void require_device(const RunOptions& o) {
  const std::string why = detail::cuda_device_unavailable();
  if (!why.empty())
    throw Error(ErrorKind::unsupported, "--backend",
                std::string("flashgate: --backend ") + backend_name(o.backend) + ": " + why);
}

// The header: the backend that runs these arguments (dispatch's choice, FLASHGATE_BACKEND included) beside the
// one asked for, since `auto` and a forced backend read the same otherwise.
template <class Args>
void print_header(const Plan& p, const Args& args) {
  if (p.quiet) return;
  const Backend ran = resolve_backend(args, p.o.backend);
  std::printf("flashgate %s  device: %s  backend: %s (asked: %s)  seed: %llu\n", version(),
              p.gpu ? harness::gpu_description().c_str() : "cpu", backend_name(ran), backend_name(p.o.backend),
              static_cast<unsigned long long>(p.seed));
}

// Times op(args, launch). On the GPU one untimed call first checks the index tensors (validate: host copies
// and a synchronisation); the timed calls then skip that check, as an engine that checked its tables once
// runs them, so the time is the kernels' and not a host round trip's.
template <class Args, class Op>
harness::Timing time_op(const Plan& p, Args args, Op op) {
  if (p.device == Device::cpu) return harness::time_calls(p.device, 0, p.iters, [&] { op(args, p.launch); });
  op(args, p.launch);
  args.validate = false;
  return harness::time_calls(p.device, 3, p.iters, [&] { op(args, p.launch); });
}

harness::AttentionConfig attention_config(const RunOptions& o, bool gpu) {
  harness::AttentionConfig c;
  c.batch = pick(o.batch, 2, 1, gpu);
  c.seqlen = pick(o.seqlen, 1024, 256, gpu);
  c.heads = pick(o.heads, 16, 4, gpu);
  c.kv_heads = pick(o.kv_heads, std::min<int64_t>(c.heads, 4), std::min<int64_t>(c.heads, 2), gpu);
  c.head_dim = pick(o.head_dim, 128, 64, gpu);
  c.v_dim = o.v_dim.value_or(c.head_dim);
  c.packed = o.packed;
  c.dtype = o.dtype;
  c.gate = o.gate, c.sink = o.sink, c.window = o.window, c.scale = o.scale, c.deterministic = o.deterministic;
  c.residual = o.residual;
  return c;
}

void run_attention(const Plan& p, RunResult& outcome) {
  const RunOptions& o = p.o;
  const harness::AttentionConfig cfg = attention_config(o, p.gpu);
  harness::AttentionConfig ref_cfg = cfg;
  ref_cfg.dtype = DType::f64, ref_cfg.row_pad = 0;
  outcome.problem = std::string(o.op == Op::forward ? "attention_forward " : "attention_backward ") + cfg.describe();
  DrawnCases<harness::AttentionCase> cases = draw_cases<harness::AttentionCase>(p, outcome.problem, cfg, ref_cfg);
  const harness::AttentionCase& host = cases.host;
  harness::AttentionCase& run = cases.run;
  const double needed = cases.needed;
  const double fwd_flops = 2.0 * cfg.heads * cfg.pairs() * (cfg.head_dim + cfg.v_dim);
  if (o.op == Op::forward) {
    print_header(p, run.forward_args());
    const harness::Timing t =
        time_op(p, run.forward_args(), [](const ForwardArgs& a, const Launch& l) { attention_forward(a, l); });
    set_rate(outcome, fwd_flops, t, 1e12, "TFLOP/s");
  } else {
    print_header(p, run.backward_args());
    attention_forward(run.forward_args(), p.launch);
    const harness::Timing t =
        time_op(p, run.backward_args(), [](const BackwardArgs& a, const Launch& l) { attention_backward(a, l); });
    set_rate(outcome, 2.5 * fwd_flops, t, 1e12, "TFLOP/s (2.5x forward FLOPs)");
  }
  if (!o.check) return;
  harness::AttentionCase ref = allocate(outcome.problem, needed, [&] { return host.to_f64(); });
  attention_forward(ref.forward_args(), Launch{Backend::cpu});
  if (o.op == Op::forward) {
    compare(outcome, "o", run.o, ref.o);
    compare(outcome, "lse", run.lse, ref.lse);
  } else {
    attention_backward(ref.backward_args(), Launch{Backend::cpu});
    for (auto [name, got, want] : {std::tuple{"dq", &run.dq, &ref.dq}, std::tuple{"dk", &run.dk, &ref.dk},
                                   std::tuple{"dv", &run.dv, &ref.dv}, std::tuple{"dg", &run.dg, &ref.dg},
                                   std::tuple{"dsink", &run.dsink, &ref.dsink}})
      compare(outcome, name, *got, *want);
  }
  outcome.tolerance = tolerance_for(cfg.dtype, cfg.scale, cfg.head_dim);
}

// The head shape of a serving run (decode, paged): GQA 32/8 D128 on the GPU, 8/2 D64 on the cpu, unless asked.
template <class Config>
void set_serving_heads(const Plan& p, Config& cfg) {
  const RunOptions& o = p.o;
  cfg.heads = pick(o.heads, 32, 8, p.gpu);
  cfg.kv_heads = pick(o.kv_heads, std::min<int64_t>(cfg.heads, 8), std::min<int64_t>(cfg.heads, 2), p.gpu);
  cfg.head_dim = pick(o.head_dim, 128, 64, p.gpu);
  cfg.v_dim = o.v_dim.value_or(cfg.head_dim);
}

void run_decode(const Plan& p, RunResult& outcome) {
  const RunOptions& o = p.o;
  harness::DecodeConfig cfg;
  cfg.seqlens = context_lengths(o, p.gpu);
  set_serving_heads(p, cfg);
  cfg.dtype = o.dtype, cfg.gate = o.gate, cfg.sink = o.sink, cfg.window = o.window, cfg.scale = o.scale;
  harness::DecodeConfig ref_cfg = cfg;
  ref_cfg.dtype = DType::f64, ref_cfg.row_pad = ref_cfg.q_row_pad = 0;
  outcome.problem = cfg.describe();
  DrawnCases<harness::DecodeCase> cases = draw_cases<harness::DecodeCase>(p, outcome.problem, cfg, ref_cfg);
  const harness::DecodeCase& host = cases.host;
  harness::DecodeCase& run = cases.run;
  const double needed = cases.needed;
  double bytes = 0;
  for (int64_t L : cfg.seqlens)
    bytes += static_cast<double>(o.window ? std::min<int64_t>(L, *o.window) : L) * cfg.kv_heads *
             (cfg.head_dim + cfg.v_dim) * dtype_size(cfg.dtype);
  print_header(p, run.args());
  const harness::Timing t = time_op(p, run.args(), [](const DecodeArgs& a, const Launch& l) { decode(a, l); });
  set_rate(outcome, bytes, t, 1e9, "GB/s of K/V read");
  if (!o.check) return;
  harness::DecodeCase ref = allocate(outcome.problem, needed, [&] { return host.to_f64(); });
  decode(ref.args(), Launch{Backend::cpu});
  compare(outcome, "o", run.o, ref.o);
}

void run_paged(const Plan& p, RunResult& outcome) {
  const RunOptions& o = p.o;
  harness::PagedConfig cfg;
  cfg.context_lens = context_lengths(o, p.gpu);
  cfg.query_lens.assign(cfg.context_lens.size(), 0);
  for (size_t n = 0; n < cfg.context_lens.size(); ++n) cfg.query_lens[n] = std::min(o.q_len, cfg.context_lens[n]);
  cfg.max_seqlen_q = o.q_len;  // as a serving engine passes it
  set_serving_heads(p, cfg);
  cfg.block_size = o.block_size;
  cfg.dtype = o.dtype, cfg.sink = o.sink, cfg.window = o.window, cfg.scale = o.scale;
  if (!o.fp8.empty()) {
    cfg.fp8 = true;
    cfg.scale_mode = o.fp8 == "per-token" ? detail::ScaleMode::per_token : detail::ScaleMode::per_tensor;
  }
  harness::PagedConfig ref_cfg = cfg;
  ref_cfg.dtype = DType::f64, ref_cfg.q_row_pad = 0;
  outcome.problem = cfg.describe();
  DrawnCases<harness::PagedCase> cases = draw_cases<harness::PagedCase>(p, outcome.problem, cfg, ref_cfg);
  const harness::PagedCase& host = cases.host;
  harness::PagedCase& run = cases.run;
  const double needed = cases.needed;
  print_header(p, run.args());
  const harness::Timing t =
      time_op(p, run.args(), [](const PagedArgs& a, const Launch& l) { paged_attention(a, l); });
  set_rate(outcome, host.kv_bytes_read(), t, 1e9, "GB/s of K/V read");
  if (!o.check) return;
  harness::PagedCase ref = allocate(outcome.problem, needed, [&] { return host.to_f64(); });
  paged_attention(ref.args(), Launch{Backend::cpu});
  compare(outcome, "o", run.o, ref.o);
}

}  // namespace

bool RunResult::passed() const {
  for (auto& e : errors)
    if (!(e.second <= tolerance)) return false;
  return true;
}

RunResult execute(const RunOptions& o, bool quiet) {
  Plan p{o};
  p.gpu = o.backend == Backend::cpu ? false : (o.backend != Backend::automatic || cuda_available());
  if (p.gpu) require_device(o);
  p.device = p.gpu ? Device::cuda : Device::cpu;
  p.iters = o.iterations ? o.iterations : (p.gpu ? 20 : 1);
  p.seed = o.seed ? *o.seed : harness::fresh_seed();
  p.launch.backend = o.backend;
  p.quiet = quiet;

  RunResult outcome;
  outcome.checked = o.check;
  switch (o.op) {
    case Op::forward:
    case Op::backward: run_attention(p, outcome); break;
    case Op::decode: run_decode(p, outcome); break;
    case Op::paged: run_paged(p, outcome); break;
  }
  if (!quiet)
    std::printf("op: %s\ntime: %.4f ms (median of %d)   %.4g %s\n", outcome.problem.c_str(), outcome.median_ms,
                p.iters, outcome.rate, outcome.unit);
  return outcome;
}

int run_op(const RunOptions& o) {
  const RunResult r = execute(o);
  if (!r.checked) {
    std::printf("check: skipped (--no-check)\n");
    return 0;
  }
  std::printf("check vs fp64 reference (relative RMS):");
  for (auto& e : r.errors) std::printf("  %s %.3e", e.first.c_str(), e.second);
  std::printf("   tolerance %.3g  %s\n", r.tolerance, r.passed() ? "PASS" : "FAIL");
  return r.passed() ? 0 : 1;
}

}  // namespace flashgate::cli
