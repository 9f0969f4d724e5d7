#include "bench.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "flashgate/flashgate.h"
#include "options.h"
#include "run_op.h"

namespace flashgate::cli {

extern const char* const kBenchRows;

namespace {

struct Row {
  std::string section, name;
  std::vector<std::string> flags;
};

std::string trim(const std::string& s) {
  const size_t a = s.find_first_not_of(" \t"), b = s.find_last_not_of(" \t");
  return a == std::string::npos ? "" : s.substr(a, b - a + 1);
}

std::vector<Row> parse_rows() {
  std::vector<Row> rows;
  std::istringstream in(kBenchRows);
  std::string line;
  while (std::getline(in, line)) {
    if (trim(line).empty() || trim(line)[0] == '#') continue;
    std::istringstream parts(line);
    std::string section, name, flags;
    std::getline(parts, section, '|');
    std::getline(parts, name, '|');
    std::getline(parts, flags);
    Row r{trim(section), trim(name), {}};
    std::istringstream words(flags);
    for (std::string w; words >> w;) r.flags.push_back(w);
    rows.push_back(r);
  }
  return rows;
}

// The same features on a problem small enough for the fp64 reference: the correctness gate before timing.
RunOptions shrunk(RunOptions o) {
  o.check = true;
  o.iterations = 1;
  o.batch = std::min<int64_t>(o.batch.value_or(1), 2);
  o.seqlen = std::min<int64_t>(o.seqlen.value_or(512), o.op == Op::decode || o.op == Op::paged ? 1500 : 384);
  if (!o.packed.empty()) o.packed = {0, 100, 37, 250};
  if (o.op == Op::decode || o.op == Op::paged) {  // unset head counts keep the op's default
    if (o.heads) o.heads = std::min<int64_t>(*o.heads, 8);
    if (o.kv_heads) o.kv_heads = std::min<int64_t>(*o.kv_heads, 2);
  }
  return o;
}

void bench_one(const std::string& label, RunOptions o) {
  std::string gate;
  try {
    const RunResult check = execute(shrunk(o), true);
    gate = check.passed() ? "checked" : "WRONG";
    for (auto& e : check.errors)
      if (!(e.second <= check.tolerance)) gate += " " + e.first;
    o.check = false;
    const RunResult full = execute(o, true);
    std::printf("%-58s %10.3f ms %9.1f %-8s %s\n", label.c_str(), full.median_ms, full.rate,
                std::string(full.unit).substr(0, 7).c_str(), gate.c_str());
  } catch (const Error& e) {
    std::printf("%-58s cannot run: %s\n", label.c_str(), e.what());
  }
  std::fflush(stdout);
}

}  // namespace

int run_bench(const std::vector<std::string>& args) {
  std::string filter;
  std::vector<std::string> extra;  // e.g. --backend cuda, --iters N
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--rows" && i + 1 < args.size()) filter = args[++i];
    else extra.push_back(args[i]);
  }
  parse_run_options(extra);  // the caller's own options: bad ones are bad usage once, not a failure per row
  std::printf("flashgate %s bench on %s (each row checked on a shrunk problem against the fp64 reference first)\n",
              version(), cuda_available() ? "the GPU" : "the CPU");
  for (const Row& row : parse_rows()) {
    if (!filter.empty() && row.name.find(filter) == std::string::npos && row.section.find(filter) == std::string::npos)
      continue;
    std::vector<std::string> flags = row.flags;
    flags.insert(flags.end(), extra.begin(), extra.end());
    RunOptions o;
    try {
      o = parse_run_options(flags);
    } catch (const UsageError& e) {  // a row past the op's limits (K576 training): reported like a library refusal
      std::printf("%-58s cannot run: %s\n", (row.section + " " + row.name).c_str(), e.message.c_str());
      continue;
    }
    if (row.section == "training") {
      o.op = Op::forward;
      bench_one("forward  " + row.name, o);
      o.op = Op::backward;
      bench_one("backward " + row.name, o);
    } else if (row.section == "decode") {
      bench_one("decode   " + row.name, o);
    } else {
      bench_one("paged bf16        " + row.name, o);
      o.fp8 = "per-tensor";
      bench_one("paged fp8 tensor  " + row.name, o);
      o.fp8 = "per-token";
      bench_one("paged fp8 token   " + row.name, o);
    }
  }
  return 0;
}

}  // namespace flashgate::cli
