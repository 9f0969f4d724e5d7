// Kernels with large by-value parameters (diagnostic for the session 15 probe): each writes one word chosen
// from its parameter block so that the block is live.
#include <cuda_runtime.h>
template <int N> struct Block { int v[N / 4]; };
template <int N> __global__ void param_kernel(Block<N> b, int* out) {
  if (threadIdx.x == 0) out[blockIdx.x] = b.v[(blockIdx.x * 7) % (N / 4)];
}
extern "C" int launch_params(int bytes, int* out, void* stream) {
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  switch (bytes) {
    case 64: { Block<64> b{}; param_kernel<64><<<1, 32, 0, s>>>(b, out); break; }
    case 2048: { Block<2048> b{}; param_kernel<2048><<<1, 32, 0, s>>>(b, out); break; }
    case 8192: { Block<8192> b{}; param_kernel<8192><<<1, 32, 0, s>>>(b, out); break; }
    case 30000: { Block<30000> b{}; param_kernel<30000><<<1, 32, 0, s>>>(b, out); break; }
    default: return -1;
  }
  return static_cast<int>(cudaGetLastError());
}
