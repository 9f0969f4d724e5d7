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
  int64_t batch = 0, seqlen = 0, heads = 0, kv_heads = 0, head_dim = 0, v_dim = 0;  // 0: the op's default
  std::vector<int64_t> packed;  // --packed LENS
  int64_t q_len = 1;            // paged: query tokens per sequence
  int64_t block_size = 16;
  DType dtype = DType::bf16;
  Backend backend = Backend::automatic;
  bool gate = false, sink = false, deterministic = false, check = true;
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

// Parses the arguments after "run"; throws UsageError.
RunOptions parse_run_options(const std::vector<std::string>& args);

}  // namespace flashgate::cli
