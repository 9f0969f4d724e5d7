// Median wall time of a repeated call: CUDA events on the GPU, a steady clock on the host.
#pragma once

#include <functional>

#include "flashgate/tensor.h"

struct CUstream_st;

namespace flashgate::harness {

struct Timing {
  double median_ms = 0;
  double min_ms = 0;
  int iterations = 0;
};

// Runs `fn` `warmup` times, then `iterations` times, timing each run on `device` (GPU runs are timed with
// events on the default stream and synchronised).
Timing time_calls(Device device, int warmup, int iterations, const std::function<void()>& fn);

}  // namespace flashgate::harness
