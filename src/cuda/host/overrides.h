// Forced choices for tests and measurements, in place of what the serving planner would choose. One
// process-wide struct: tests set it (tests/support/gpu_run.h scopes it), the planner reads it once per call.
// Zero / false everywhere means "the planner decides".
#pragma once

namespace flashgate::cuda {

struct ServingOverrides {
  int num_splits = 0;      // key slices per row block (1..kMaxKeySlices), on the mma path
  int stages = 0;          // pipeline stages (2..4; fewer where a CTA's shared memory does not hold them)
  int heads_per_cta = 0;   // kv heads a CTA takes in turn (1..H)
  bool wide_rows = false;  // the 16-row layout even where an 8-row tile (keys as M) would do
};

ServingOverrides& serving_overrides();

// The slice backward (host/slice_backward.cpp): force_simt takes the SIMT kernels where the MMA path could run.
struct SliceBackwardOverrides {
  bool force_simt = false;
};
SliceBackwardOverrides& slice_backward_overrides();
// "mma" or "simt": the path the latest slice backward on the cuda backend took in this thread ("" before any), so
// that a test's failure can name it.
const char* last_slice_backward_path();

}  // namespace flashgate::cuda
