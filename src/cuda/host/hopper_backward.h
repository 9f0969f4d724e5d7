// The Hopper backward's host side: whether its dK/dV kernel (src/cuda/hopper/backward_kernel.cuh) takes the
// place of the portable one in a backward, and its launch. The passes around it are host/backward.cpp's.
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "cuda/common/backward_params.h"
#include "cuda/common/tile_scheduler.h"
#include "cuda/host/device_facts.h"
#include "flashgate/ops.h"

namespace flashgate::host {

// The tensors the Hopper dK/dV kernel reads through tensor maps (q, k, v, dout) and writes (dk, dv), of a whole-sequence
// backward or a slice pair's.
struct DkdvTensors {
  const Tensor &q, &k, &v, &dout, &dk, &dv;
};
template <class Args>  // BackwardArgs or SliceBackwardArgs
DkdvTensors dkdv_tensors(const Args& a) {
  return {a.q, a.k, a.v, a.dout, a.dk, a.dv};
}

// Key rows per item of the Hopper dK/dV kernel that serves `p` (the key tile schedule's tile_rows; a key pair's two
// CTAs share one item). Takes p.needs_row_sums() as final.
int hopper_dkdv_key_rows(const cuda::bwd::BackwardParams& p);

// "" when the Hopper dK/dV kernel serves this backward (its params `p` planned for the MMA path), else why not:
// it takes an sm_90 device, fp16/bf16, K and V up to 512 (multiples of 8; above 16: smaller ones take the
// exact-D pre-pass), every feature, both modes, and tensor-map-ready q, k, v, dout.
std::string hopper_dkdv_refusal(const DkdvTensors& t, const cuda::bwd::BackwardParams& p, const DeviceFacts& dev);

// Whether that kernel sums the sink's gradient itself (BackwardParams::sink_parts) rather than the row sums E: the
// narrow kernel's 128 bucket (K or V above 64, both up to 128) with a sink and no gate.
bool hopper_dkdv_sums_sink(const cuda::bwd::BackwardParams& p);

// Runs it over `keys` (tile_rows hopper_dkdv_key_rows()); p.head_parts must be 1.
void launch_hopper_dkdv(const DkdvTensors& t, const cuda::bwd::BackwardParams& p, const cuda::TileSchedule& keys,
                        cudaStream_t stream);

}  // namespace flashgate::host
