// GPU test of programmatic dependent launch (src/cuda/ptx/grid_dependency.h): a producer grid whose CTAs
// allow the next kernel to start at once, then stall for different times before writing fresh random words;
// a consumer launched as a programmatic dependent waits in grid_dependency_wait and must read every word
// (none of the poison its buffer started with), in both launch forms. Skipped below sm_90.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "cuda/ptx/grid_dependency.h"
#include "harness/owned_tensor.h"
#include "support/compare.h"

namespace {

constexpr int kProducers = 512, kConsumers = 64;

__global__ void producer(const uint32_t* words, uint32_t* shared_words, long long spin_cycles) {
  flashgate::ptx::launch_dependents();
  // The last CTAs stall longest, so that a consumer that does not wait reads poison.
  const long long until = clock64() + spin_cycles * (1 + blockIdx.x % 8);
  while (clock64() < until) {
  }
  if (threadIdx.x == 0) shared_words[blockIdx.x] = words[blockIdx.x];
}

__global__ void consumer(const uint32_t* shared_words, uint32_t* seen) {
  flashgate::ptx::grid_dependency_wait();
  for (int i = threadIdx.x; i < kProducers; i += blockDim.x) seen[blockIdx.x * kProducers + i] = shared_words[i];
}

void check_dependent_launch(bool dependent) {
  int device = 0, major = 0;
  ASSERT_EQ(cudaGetDevice(&device), cudaSuccess);
  ASSERT_EQ(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device), cudaSuccess);
  if (major < 9) GTEST_SKIP() << "programmatic dependent launch needs sm_90";
  const uint64_t seed = flashgate::harness::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed) + (dependent ? ", dependent launch" : ", plain launch"));
  std::mt19937_64 rng(seed);
  std::vector<uint32_t> words(kProducers);
  for (uint32_t& w : words) w = static_cast<uint32_t>(rng() % 0xfffffffeu);  // never the poison 0xffffffff
  uint32_t *d_words = nullptr, *d_shared = nullptr, *d_seen = nullptr;
  ASSERT_EQ(cudaMalloc(&d_words, kProducers * 4), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&d_shared, kProducers * 4), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&d_seen, kConsumers * kProducers * 4), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(d_words, words.data(), kProducers * 4, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemset(d_shared, 0xff, kProducers * 4), cudaSuccess);
  ASSERT_EQ(cudaMemset(d_seen, 0xff, kConsumers * kProducers * 4), cudaSuccess);

  producer<<<kProducers, 32>>>(d_words, d_shared, 20000);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  cudaLaunchAttribute pdl{};
  pdl.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  pdl.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(kConsumers);
  config.blockDim = dim3(128);
  config.attrs = &pdl;
  config.numAttrs = dependent ? 1 : 0;
  ASSERT_EQ(cudaLaunchKernelEx(&config, consumer, static_cast<const uint32_t*>(d_shared), d_seen), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);

  std::vector<uint32_t> seen(kConsumers * kProducers);
  ASSERT_EQ(cudaMemcpy(seen.data(), d_seen, seen.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  cudaFree(d_words);
  cudaFree(d_shared);
  cudaFree(d_seen);
  for (int c = 0; c < kConsumers; ++c)
    for (int i = 0; i < kProducers; ++i)
      ASSERT_EQ(seen[c * kProducers + i], words[i]) << "consumer " << c << " word " << i;
}

TEST(Ptx, GridDependencyWaitSeesTheProducer) {
  FLASHGATE_REQUIRE_GPU();
  check_dependent_launch(true);
  check_dependent_launch(false);
}

}  // namespace
