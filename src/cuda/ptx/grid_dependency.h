// Programmatic dependent launch (sm_90+): a kernel launched with cudaLaunchAttributeProgrammaticStreamSerialization
// may start while the previous kernel in the stream still runs, once every CTA of that kernel has called
// launch_dependents() (or exited); it calls grid_dependency_wait() before reading what that kernel wrote.
// Both are no-ops below sm_90 (and without the launch attribute), where the launches simply serialise.
#pragma once

namespace flashgate::ptx {

// Lets the next kernel of the stream start its CTAs (where it was launched for it) when this one's CTAs have
// all called it. Safe at a CTA's start: the dependent waits below for this grid to complete.
__device__ __forceinline__ void launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

// Waits until the grids this kernel depends on have completed and their memory is visible.
__device__ __forceinline__ void grid_dependency_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

}  // namespace flashgate::ptx
