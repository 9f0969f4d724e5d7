// The register pool rule of the warp-specialised Hopper kernels (host-includable: their tile structs check it).
#pragma once

namespace flashgate::cuda::hopper {

// Whether a CTA of `warpgroups` warpgroups (one producer, the rest consumers; __launch_bounds__(128 warpgroups, 1))
// can move to these setmaxnreg counts: its pool is the registers it launched with, 65536 / threads a thread rounded
// down to 8, and a setmaxnreg.inc that the pool cannot serve waits forever.
constexpr bool register_split_fits(int warpgroups, int producer_regs, int consumer_regs) {
  return producer_regs + (warpgroups - 1) * consumer_regs <= warpgroups * (65536 / (128 * warpgroups) / 8 * 8);
}

}  // namespace flashgate::cuda::hopper
