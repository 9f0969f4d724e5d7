// Command-line options of `flashgate run` (and `flashgate bench`), parsed into one struct.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "flashgate/ops.h"

namespace flashgate::cli {

enum class Op { forward, backward, decode, paged };

struct RunOptions {
  Op op = Op::forward;
  // Unset: the op's default for the device. Given sizes are >= 1: 0 is an error, not a way to ask for the default.
  std::optional<int64_t> batch, seqlen, heads, kv_heads, head_dim, v_dim;
  std::vector<int64_t> packed;  // --packed LENS
  int64_t q_len = 1;            // paged: query tokens per sequence
  int64_t block_size = 16;
  DType dtype = DType::bf16;
  Backend backend = Backend::automatic;
  bool gate = false, sink = false, deterministic = false, check = true, residual = true;
  std::optional<int64_t> window;
  std::optional<float> scale;
  std::string fp8;  // "", "per-tensor", "per-token"
  int iterations = 0;  // 0: default for the device
  std::optional<uint64_t> seed;
};

// Thrown for bad command lines: main prints the message and the usage, and exits with 2.
struct UsageError {
  std::string message;
};

const char* usage();
const char* op_name(Op op);

// Whether the arguments ask for help (--help or -h anywhere: no option takes a value that starts with "-h").
bool asks_for_help(const std::vector<std::string>& args);

// Parses the arguments after "run"; throws UsageError.
RunOptions parse_run_options(const std::vector<std::string>& args);

}  // namespace flashgate::cli
