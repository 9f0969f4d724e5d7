// Lets the plain structs of this folder be used from host C++ and from device code alike.
#pragma once

#if defined(__CUDACC__)
#define FG_HOST_DEVICE __host__ __device__ __forceinline__
#define FG_DEVICE __device__ __forceinline__
#else
#define FG_HOST_DEVICE inline
#endif

// True in the device passes for sm_80..sm_89, false in the host pass and for sm_90+. Those targets allocate
// registers differently (ptxas), so a few register-only choices differ there (the backward TileConfig's live
// S or dQ columns, the fp8 serving kernel's launch bound). Device code only: never for anything the host also
// computes (tile extents, shared memory sizes), since the host pass always sees false.
namespace flashgate::cuda {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
inline constexpr bool kSm8xDevicePass = true;
#else
inline constexpr bool kSm8xDevicePass = false;
#endif
}  // namespace flashgate::cuda
