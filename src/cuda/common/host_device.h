// Lets the plain structs of this folder be used from host C++ and from device code alike.
#pragma once

#if defined(__CUDACC__)
#define FG_HOST_DEVICE __host__ __device__ __forceinline__
#define FG_DEVICE __device__ __forceinline__
#else
#define FG_HOST_DEVICE inline
#endif
