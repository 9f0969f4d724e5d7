// GPU tests of the sm_90a primitives (src/cuda/ptx/wgmma.h, warpgroup.h, tma.h) and of the host's tensor maps
// (src/cuda/host/tensor_map.h), in the shapes the Hopper attention kernels use them:
//   - TMA boxes with 128-byte swizzling completing on an mbarrier; S = Q K^T by wgmma from shared memory
//     (K-major descriptors); O = P V with P from registers (the accumulator's layout as an A operand) and V
//     MN-major (transposed B), against host matmuls, for bf16 and f16 and several N;
//   - a warp-specialised pipeline: a producer warpgroup (setmaxnreg down) streams tiles through a two-stage
//     ring of full/empty mbarriers, two consumer warpgroups (setmaxnreg up) take turns by named barriers
//     (ping-pong); the sums and the order of turns are checked;
//   - a cluster of two CTAs that swap blocks of floats every round through each other's shared memory (stores that
//     complete on the receiver's mbarrier, two slots freed by arrivals on the sender's), as the paired backward
//     swaps its partial S and dP.
// Every kernel is compiled for sm_90a only (other passes get an empty body); the tests skip on other GPUs.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "cuda/host/tensor_map.h"
#include "cuda/ptx/cluster.h"
#include "cuda/ptx/tma.h"
#include "cuda/ptx/warpgroup.h"
#include "cuda/ptx/wgmma.h"
#include "harness/owned_tensor.h"
#include "support/compare.h"
#include "support/device_vector.h"

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define FG_SM90A_BODY 1
#else
#define FG_SM90A_BODY 0
#endif

namespace {

using fgtest::DeviceVector;
using flashgate::cuda::ElementType;
using flashgate::cuda::TensorMapShape;
namespace ptx = flashgate::ptx;

bool device_is_sm90() {
  int device = 0, major = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return false;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess) return false;
  return major == 9;
}

#define FLASHGATE_REQUIRE_SM90()                                                   \
  do {                                                                             \
    FLASHGATE_REQUIRE_GPU();                                                       \
    if (!device_is_sm90()) GTEST_SKIP() << "not an sm_90 GPU: Hopper test skipped"; \
  } while (0)

template <class T>
T from_float(float x);
template <>
__nv_bfloat16 from_float<__nv_bfloat16>(float x) { return __float2bfloat16(x); }
template <>
__half from_float<__half>(float x) { return __float2half(x); }
template <class T>
float to_float(T x) {
  if constexpr (std::is_same_v<T, __half>) return __half2float(x);
  else return __bfloat162float(x);
}

template <class T>
std::vector<T> random_matrix(size_t n, std::mt19937_64& rng) {
  std::normal_distribution<float> d;
  std::vector<T> m(n);
  for (auto& x : m) x = from_float<T>(d(rng));
  return m;
}

// A row-major [rows][cols] 16-bit matrix as a 2-D tensor map of [rows][64]-column boxes.
CUtensorMap matrix_map(const void* data, ElementType type, int rows, int cols) {
  TensorMapShape s;
  s.rank = 2;
  s.dims[0] = static_cast<uint64_t>(cols), s.dims[1] = static_cast<uint64_t>(rows);
  s.strides[1] = static_cast<uint64_t>(cols);
  s.box[0] = 64, s.box[1] = static_cast<uint32_t>(rows);
  return flashgate::cuda::make_tensor_map(data, type, s);
}

// ---- S = Q K^T (shared memory operands), O = P V (P from registers, V transposed) -------------------------------

constexpr int kD = 128;  // head dim of Q, K and V: two 64-column blocks each

template <int kN>
struct TwoGemmSmem {
  static constexpr size_t q = 64 * kD * 2, k = size_t{kN} * kD * 2, v = size_t{kN} * kD * 2;
  static constexpr size_t bytes = q + k + v + 1024 /* alignment slack */;
};

// One warpgroup: S[64][kN] = Q[64][kD] K[kN][kD]^T, then O[64][kD] = bf16(S)[64][kN] V[kN][kD].
// S and O leave in the accumulator layout (row, column) for the host to compare.
template <class T, int kN>
__global__ void __launch_bounds__(128, 1)
    two_gemm_kernel(const __grid_constant__ CUtensorMap q_map, const __grid_constant__ CUtensorMap k_map,
                    const __grid_constant__ CUtensorMap v_map, float* s_out, float* o_out) {
#if FG_SM90A_BODY
  extern __shared__ unsigned char raw[];
  __shared__ alignas(8) uint64_t loaded;
  unsigned char* base = reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(raw) + 1023) & ~uintptr_t{1023});
  T* sq = reinterpret_cast<T*>(base);
  T* sk = reinterpret_cast<T*>(base + TwoGemmSmem<kN>::q);
  T* sv = reinterpret_cast<T*>(base + TwoGemmSmem<kN>::q + TwoGemmSmem<kN>::k);
  const int tid = threadIdx.x;
  if (tid == 0) {
    ptx::barrier_init(&loaded, 1);
    ptx::fence_barrier_init();
  }
  __syncthreads();
  if (tid == 0) {
    ptx::barrier_arrive_expect(&loaded, static_cast<uint32_t>(TwoGemmSmem<kN>::q + TwoGemmSmem<kN>::k +
                                                             TwoGemmSmem<kN>::v));
    for (int block = 0; block < kD / 64; ++block) {
      ptx::tma_load(sq + block * 64 * 64, &q_map, {block * 64, 0}, &loaded);
      ptx::tma_load(sk + block * kN * 64, &k_map, {block * 64, 0}, &loaded);
      ptx::tma_load(sv + block * kN * 64, &v_map, {block * 64, 0}, &loaded);
    }
  }
  ptx::barrier_wait(&loaded, 0);

  float s[kN / 2];
  ptx::wgmma_fence();
#pragma unroll
  for (int step = 0; step < kD / 16; ++step)
    ptx::Wgmma<T, kN, 0>::ss(s, ptx::k_major_descriptor(sq, 64, step), ptx::k_major_descriptor(sk, kN, step),
                             step > 0);
  ptx::wgmma_commit();
  ptx::wgmma_wait<0>();

  const int warp = tid / 32, lane = tid % 32, g = lane / 4, c = lane % 4;
  for (int j = 0; j < kN / 8; ++j)
    for (int e = 0; e < 4; ++e) {
      const int row = warp * 16 + g + (e / 2) * 8, col = j * 8 + 2 * c + e % 2;
      s_out[row * kN + col] = s[4 * j + e];
    }

  float o[kD / 2];
  uint32_t p[kN / 16][4];
  auto pack = [](float lo, float hi) {
    T l = static_cast<T>(lo), h = static_cast<T>(hi);
    uint16_t lb, hb;
    memcpy(&lb, &l, 2);
    memcpy(&hb, &h, 2);
    return static_cast<uint32_t>(lb) | (static_cast<uint32_t>(hb) << 16);
  };
#pragma unroll
  for (int t = 0; t < kN / 16; ++t) {
    p[t][0] = pack(s[8 * t + 0], s[8 * t + 1]);
    p[t][1] = pack(s[8 * t + 2], s[8 * t + 3]);
    p[t][2] = pack(s[8 * t + 4], s[8 * t + 5]);
    p[t][3] = pack(s[8 * t + 6], s[8 * t + 7]);
  }
  ptx::wgmma_fence();
#pragma unroll
  for (int t = 0; t < kN / 16; ++t) ptx::Wgmma<T, kD, 1>::rs(o, p[t], ptx::mn_major_descriptor(sv, kN, t), t > 0);
  ptx::wgmma_commit();
  ptx::wgmma_wait<0>();
  for (int j = 0; j < kD / 8; ++j)
    for (int e = 0; e < 4; ++e) {
      const int row = warp * 16 + g + (e / 2) * 8, col = j * 8 + 2 * c + e % 2;
      o_out[row * kD + col] = o[4 * j + e];
    }
#endif
}

template <class T, int kN>
void check_two_gemms() {
  const uint64_t seed = flashgate::harness::fresh_seed();
  SCOPED_TRACE("N " + std::to_string(kN) + " (seed " + std::to_string(seed) + ", FLASHGATE_SEED replays it)");
  std::mt19937_64 rng(seed);
  const std::vector<T> q = random_matrix<T>(64 * kD, rng), k = random_matrix<T>(size_t{kN} * kD, rng),
                       v = random_matrix<T>(size_t{kN} * kD, rng);
  DeviceVector<T> dq(q), dk(k), dv(v);
  DeviceVector<float> ds(std::vector<float>(64 * kN, NAN)), dout(std::vector<float>(64 * kD, NAN));
  const ElementType type = std::is_same_v<T, __half> ? ElementType::f16 : ElementType::bf16;
  const CUtensorMap qm = matrix_map(dq.ptr, type, 64, kD), km = matrix_map(dk.ptr, type, kN, kD),
                    vm = matrix_map(dv.ptr, type, kN, kD);
  const auto kernel = two_gemm_kernel<T, kN>;
  ASSERT_EQ(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 static_cast<int>(TwoGemmSmem<kN>::bytes)),
            cudaSuccess);
  kernel<<<1, 128, TwoGemmSmem<kN>::bytes>>>(qm, km, vm, ds.ptr, dout.ptr);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<float> s = ds.get(), o = dout.get();

  // S against a double-precision Q K^T of the same inputs; O against bf16/f16(S as computed) V, so that the
  // rounding of P is the kernel's own.
  std::vector<double> s_ref(64 * kN), o_ref(64 * kD, 0.0), s_got(s.begin(), s.end()), o_got(o.begin(), o.end());
  for (int i = 0; i < 64; ++i)
    for (int j = 0; j < kN; ++j) {
      double acc = 0;
      for (int d = 0; d < kD; ++d) acc += double(to_float(q[i * kD + d])) * double(to_float(k[j * kD + d]));
      s_ref[i * kN + j] = acc;
    }
  for (int i = 0; i < 64; ++i)
    for (int j = 0; j < kN; ++j) {
      const double p = to_float(from_float<T>(s[i * kN + j]));
      for (int d = 0; d < kD; ++d) o_ref[i * kD + d] += p * double(to_float(v[j * kD + d]));
    }
  EXPECT_LE(flashgate::harness::relative_rms(s_got, s_ref), 1e-5) << "S = Q K^T";
  EXPECT_LE(flashgate::harness::relative_rms(o_got, o_ref), 1e-5) << "O = P V";
}

TEST(PtxHopper, WgmmaFromSharedAndRegistersBf16) {
  FLASHGATE_REQUIRE_SM90();
  check_two_gemms<__nv_bfloat16, 64>();
  check_two_gemms<__nv_bfloat16, 128>();
  check_two_gemms<__nv_bfloat16, 192>();
}

TEST(PtxHopper, WgmmaFromSharedAndRegistersF16) {
  FLASHGATE_REQUIRE_SM90();
  check_two_gemms<__half, 64>();
  check_two_gemms<__half, 128>();
  check_two_gemms<__half, 256>();
}

// ---- a warp-specialised ring with ping-pong consumers ----------------------------------------------------------

constexpr int kTiles = 12, kTileRows = 64, kTileCols = 64, kStages = 2;

// Warpgroup 0 produces (one elected thread issues the copies); warpgroups 1 and 2 consume tile t when t % 2 is
// theirs, summing it, and then pass the turn to the other by named barriers 1 and 2. `order` records whose
// turn each tile's sum was taken in; sums[t] is the tile's sum.
__global__ void __launch_bounds__(384, 1)
    ring_kernel(const __grid_constant__ CUtensorMap map, float* sums, int* order) {
#if FG_SM90A_BODY
  extern __shared__ unsigned char raw[];
  __shared__ alignas(8) uint64_t full[kStages], empty[kStages];
  __shared__ int turn;
  unsigned char* base = reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(raw) + 1023) & ~uintptr_t{1023});
  auto stage_tile = [&](int s) { return reinterpret_cast<__nv_bfloat16*>(base + s * kTileRows * kTileCols * 2); };
  const int wg = ptx::warpgroup_index();
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) ptx::barrier_init(&full[s], 1), ptx::barrier_init(&empty[s], 256);
    turn = 0;
    ptx::fence_barrier_init();
  }
  __syncthreads();
  if (wg == 0) {
    ptx::setmaxnreg_dec<40>();
    if (threadIdx.x < 32 && ptx::elect_one()) {
      for (int t = 0; t < kTiles; ++t) {
        const int s = t % kStages;
        if (t >= kStages) ptx::barrier_wait(&empty[s], ((t / kStages) - 1) & 1);
        ptx::barrier_arrive_expect(&full[s], kTileRows * kTileCols * 2);
        ptx::tma_load(stage_tile(s), &map, {0, t * kTileRows}, &full[s]);
      }
    }
  } else {
    ptx::setmaxnreg_inc<232>();
    const int me = wg - 1, tid = ptx::warpgroup_thread();
    if (me == 1) ptx::named_barrier_arrive(1, 256);  // consumer 0 goes first
    for (int t = 0; t < kTiles; ++t) {
      const int s = t % kStages;
      ptx::barrier_wait(&full[s], (t / kStages) & 1);
      if (t % 2 == me) {
        ptx::named_barrier_sync(1 + me, 256);  // my turn
        float x = 0.f;  // the tile's swizzle permutes columns within a row: a row sum does not care
        for (int i = tid; i < kTileRows * kTileCols; i += 128) x += __bfloat162float(stage_tile(s)[i]);
        for (int m = 16; m > 0; m /= 2) x += __shfl_xor_sync(0xffffffffu, x, m);
        if (tid % 32 == 0) atomicAdd(&sums[t], x);
        if (tid == 0) order[t] = 100 * me + turn++;
        ptx::named_barrier_arrive(2 - me, 256);  // the other's turn
      }
      ptx::barrier_arrive(&empty[s]);
    }
    if (me == 0) ptx::named_barrier_sync(1, 256);  // the last arrive of consumer 1 is matched
  }
#endif
}

TEST(PtxHopper, WarpSpecialisedRingWithPingPong) {
  FLASHGATE_REQUIRE_SM90();
  const uint64_t seed = flashgate::harness::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const std::vector<__nv_bfloat16> data = random_matrix<__nv_bfloat16>(static_cast<size_t>(kTiles) * kTileRows * kTileCols, rng);
  DeviceVector<__nv_bfloat16> d(data);
  DeviceVector<float> sums(std::vector<float>(kTiles, 0.f));
  DeviceVector<int> order(std::vector<int>(kTiles, -1));
  // Boxes of one tile (kTileRows rows) of the [kTiles * kTileRows][kTileCols] matrix.
  TensorMapShape s;
  s.rank = 2;
  s.dims[0] = uint64_t{kTileCols}, s.dims[1] = static_cast<uint64_t>(kTiles) * kTileRows;
  s.strides[1] = uint64_t{kTileCols};
  s.box[0] = kTileCols, s.box[1] = kTileRows;
  const CUtensorMap tiles = flashgate::cuda::make_tensor_map(d.ptr, ElementType::bf16, s);
  const size_t smem = kStages * kTileRows * kTileCols * 2 + 1024;
  ASSERT_EQ(cudaFuncSetAttribute(ring_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)),
            cudaSuccess);
  ring_kernel<<<1, 384, smem>>>(tiles, sums.ptr, order.ptr);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<float> got = sums.get();
  const std::vector<int> turns = order.get();
  for (int t = 0; t < kTiles; ++t) {
    double want = 0;
    for (int i = 0; i < kTileRows * kTileCols; ++i) want += __bfloat162float(data[static_cast<size_t>(t) * kTileRows * kTileCols + i]);
    EXPECT_NEAR(got[t], want, 1e-3 * (1 + std::fabs(want))) << "tile " << t;
    EXPECT_EQ(turns[t], 100 * (t % 2) + t) << "tile " << t << " was summed out of turn";
  }
}

// Two warpgroups with code of their own hand a shared buffer back and forth on the .aligned-free named barriers:
// warpgroup 0 writes a round's values and arrives on barrier 1, warpgroup 1 waits there, reads values other warps
// wrote and arrives on barrier 2, where warpgroup 0 waits before it writes the next round.
constexpr int kHandoffRounds = 9;
__global__ void __launch_bounds__(256, 1) handoff_kernel(int* out) {
#if FG_SM90A_BODY
  __shared__ int slot[128];
  const int wg = threadIdx.x / 128, t = threadIdx.x % 128;
  for (int round = 0; round < kHandoffRounds; ++round) {
    if (wg == 0) {
      slot[t] = 1000 * round + t;
      ptx::named_barrier_arrive_any(1, 256);
      ptx::named_barrier_sync_any(2, 256);
    } else {
      ptx::named_barrier_sync_any(1, 256);
      out[128 * round + t] = slot[(t + 37) % 128];
      ptx::named_barrier_arrive_any(2, 256);
    }
  }
#endif
}

TEST(PtxHopper, NamedBarriersFromDifferentCode) {
  FLASHGATE_REQUIRE_SM90();
  DeviceVector<int> out(std::vector<int>(128 * kHandoffRounds, -1));
  handoff_kernel<<<1, 256>>>(out.ptr);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<int> got = out.get();
  for (int round = 0; round < kHandoffRounds; ++round)
    for (int t = 0; t < 128; ++t)
      ASSERT_EQ(got[128 * round + t], 1000 * round + (t + 37) % 128) << "round " << round << " thread " << t;
}

constexpr int kRounds = 7, kSwapFloats = 4 * 128;  // per round, each CTA sends a float4 from each of 128 threads

// CTA r of a 2-CTA cluster sends in[r][round][...] to the other each round, into slot round % 2 of the other's
// buffer, and writes what it received to out[r][round][...]. Slot reuse waits for the other's reads (empty), so a
// block never overwrites what is not yet read.
__global__ void __launch_bounds__(128, 1) swap_kernel(const float* in, float* out) {
#if FG_SM90A_BODY
  __shared__ alignas(16) float slots[2][kSwapFloats];
  __shared__ alignas(8) uint64_t full[2], empty[2];
  const int t = threadIdx.x;
  const uint32_t rank = ptx::cluster_rank(), other = rank ^ 1u;
  if (t == 0) {
    for (int s = 0; s < 2; ++s) ptx::barrier_init(&full[s], 1), ptx::barrier_init(&empty[s], 4);
    ptx::fence_barrier_init();
  }
  ptx::cluster_sync();
  for (int round = 0; round < kRounds; ++round) {
    const int s = round % 2;
    if (t == 0) ptx::barrier_arrive_expect(&full[s], kSwapFloats * 4);
    if (round >= 2) ptx::barrier_wait(&empty[s], ((round / 2) - 1) & 1);  // the other read this slot's last block
    const float* mine = in + (static_cast<size_t>(rank) * kRounds + round) * kSwapFloats + 4 * t;
    const float v[4] = {mine[0], mine[1], mine[2], mine[3]};
    ptx::store_to_peer(ptx::peer_shared(&slots[s][4 * t], other), v, ptx::peer_shared(&full[s], other));
    ptx::barrier_wait(&full[s], (round / 2) & 1);
    float* got = out + (static_cast<size_t>(rank) * kRounds + round) * kSwapFloats + 4 * t;
    for (int i = 0; i < 4; ++i) got[i] = slots[s][4 * t + i];
    __syncwarp();
    if (t % 32 == 0) ptx::arrive_on_peer(ptx::peer_shared(&empty[s], other));
  }
  ptx::cluster_sync();  // neither CTA leaves while the other may still arrive on its barriers
#endif
}

// The key pairs' protocol (DsSwap): each round a CTA writes its tile, has the copy engine copy it into the other's one
// slot (completing on the other's barrier) and reads what the other copied into its own; it writes its tile again only
// once the other has read the last one (empty), which also says the copy engine has read the tile.
__global__ void __launch_bounds__(128, 1) copy_swap_kernel(const float* in, float* out) {
#if FG_SM90A_BODY
  __shared__ alignas(128) float tile[kSwapFloats], slot[kSwapFloats];
  __shared__ alignas(8) uint64_t full, empty;
  const int t = threadIdx.x;
  const uint32_t rank = ptx::cluster_rank(), other = rank ^ 1u;
  if (t == 0) {
    ptx::barrier_init(&full, 1), ptx::barrier_init(&empty, 4);
    ptx::fence_barrier_init();
  }
  ptx::cluster_sync();
  for (int round = 0; round < kRounds; ++round) {
    if (t == 0) ptx::barrier_arrive_expect(&full, kSwapFloats * 4);
    if (round > 0) ptx::barrier_wait(&empty, (round - 1) & 1);
    const float* mine = in + (static_cast<size_t>(rank) * kRounds + round) * kSwapFloats + 4 * t;
    for (int i = 0; i < 4; ++i) tile[4 * t + i] = mine[i];
    ptx::fence_async_shared();
    __syncthreads();
    if (t == 0) ptx::copy_to_peer(ptx::peer_shared(slot, other), tile, kSwapFloats * 4, ptx::peer_shared(&full, other));
    ptx::barrier_wait(&full, round & 1);
    float* got = out + (static_cast<size_t>(rank) * kRounds + round) * kSwapFloats + 4 * t;
    for (int i = 0; i < 4; ++i) got[i] = slot[4 * t + i];
    __syncwarp();
    if (t % 32 == 0) ptx::arrive_on_peer(ptx::peer_shared(&empty, other));
  }
  ptx::cluster_sync();
#endif
}

// Runs a 2-CTA swap kernel on fresh random data and checks that each CTA received every round the other sent.
void check_pair_swap(void (*kernel)(const float*, float*)) {
  const uint64_t seed = flashgate::harness::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<float> data(2 * kRounds * kSwapFloats);
  for (float& x : data) x = normal(rng);
  DeviceVector<float> in(data);
  DeviceVector<float> out(std::vector<float>(data.size(), std::nanf("")));  // poisoned
  cudaLaunchAttribute cluster[1] = {};
  cluster[0].id = cudaLaunchAttributeClusterDimension;
  cluster[0].val.clusterDim.x = 2, cluster[0].val.clusterDim.y = 1, cluster[0].val.clusterDim.z = 1;
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(2), config.blockDim = dim3(128), config.attrs = cluster, config.numAttrs = 1;
  ASSERT_EQ(cudaLaunchKernelEx(&config, kernel, static_cast<const float*>(in.ptr), out.ptr), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<float> got = out.get();
  for (int r = 0; r < 2; ++r)
    for (int round = 0; round < kRounds; ++round)
      for (int i = 0; i < kSwapFloats; ++i) {
        const size_t at = (static_cast<size_t>(r) * kRounds + round) * kSwapFloats + i;
        const size_t sent = (static_cast<size_t>(r ^ 1) * kRounds + round) * kSwapFloats + i;
        ASSERT_EQ(got[at], data[sent]) << "CTA " << r << " round " << round << " float " << i;
      }
}

TEST(PtxHopper, ClusterPairSwapsThroughSharedMemory) {
  FLASHGATE_REQUIRE_SM90();
  check_pair_swap(swap_kernel);
}

TEST(PtxHopper, ClusterPairCopiesIntoTheOthersSharedMemory) {
  FLASHGATE_REQUIRE_SM90();
  check_pair_swap(copy_swap_kernel);
}

}  // namespace
