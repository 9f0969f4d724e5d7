// What the host planners need to know of a GPU, asked once per device.
#pragma once

namespace flashgate::host {

struct DeviceFacts {
  int sms = 1;          // streaming multiprocessors
  int smem_per_sm = 0;  // bytes of shared memory of one SM (all its blocks)
  int smem_optin = 0;   // bytes of shared memory one block may opt in to
  int major = 0;        // compute capability
  int l2_bytes = 0;     // the L2 cache
};

// The facts of CUDA device `device` (cached; raises a CUDA error if the device cannot be asked).
DeviceFacts device_facts(int device);

}  // namespace flashgate::host
