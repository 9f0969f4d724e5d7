#include "cuda/host/hopper_backward.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <limits>

#include "cuda/host/attention_params.h"
#include "cuda/host/hopper_maps.h"
#include "cuda/hopper/backward.h"

namespace flashgate::host {

namespace {
// Head dims above 128 take the wide kernel (backward.h's DkdvWideTile): K up to 192 with V up to 128 its own bucket
// where it serves the case, the rest up to 256 the 256 one, above that the 512 one (pairs of CTAs).
bool wide(const cuda::bwd::BackwardParams& p) { return p.a.K > 128 || p.a.V > 128; }
bool wide_192_128(const cuda::bwd::BackwardParams& p) {
  return p.a.K <= 192 && p.a.V <= 128 && (cuda::hopper::DkdvWideTile<192, 128>::kServesRowSums || !p.needs_row_sums());
}

template <class T, int kK, int kV>
void launch_wide(const DkdvTensors& args, cuda::hopper::DkdvParams& dp, const cuda::TileSchedule& keys,
                 cudaStream_t stream) {
  using Wide = cuda::hopper::DkdvWideTile<kK, kV>;
  const cuda::ElementType type = dp.b.a.dtype;
  dp.q_map = cuda::make_tensor_map(args.q.data, type, token_head_map(args.q, Wide::BM));
  dp.k_map = cuda::make_tensor_map(args.k.data, type, token_head_map(args.k, Wide::BN));
  dp.v_map = cuda::make_tensor_map(args.v.data, type, token_head_map(args.v, Wide::BN));
  dp.do_map = cuda::make_tensor_map(args.dout.data, type, token_head_map(args.dout, Wide::BM));
  cuda::hopper::launch_dkdv_wide<T, kK, kV>(dp, keys, stream);
}

template <class T>
void launch_wide(const DkdvTensors& args, cuda::hopper::DkdvParams& dp, const cuda::TileSchedule& keys,
                 cudaStream_t stream) {
  if (wide_192_128(dp.b)) launch_wide<T, 192, 128>(args, dp, keys, stream);
  else if (dp.b.a.K <= 256 && dp.b.a.V <= 256) launch_wide<T, 256, 256>(args, dp, keys, stream);
  else launch_wide<T, 512, 512>(args, dp, keys, stream);
}

// How many kv heads' items run together (BackwardParams::kv_heads_together): at least four (every head where there
// are fewer), more while the rows their tiles walk (q and dO of every query head of the group, and dQ's fp32
// accumulator) fit half the L2. Every head at once leaves those rows to DRAM (B8 T2048 D128: 244 against 273 TFLOP/s
// at four); fewer than four cost long sequences (GQA 32/8 D128 T8192: 395 at one, 431 at four; docs/perf-notes.md).
// Deterministic mode takes one kv head at a time where its key tiles come lightest first (each chain's next tile
// starts later, and only the tiles of one head running side by side keep that head's rows in L2: GQA 32/8 D128 T8192
// 358 against 297-303 TFLOP/s with every head at once; docs/perf-notes.md), two in the narrow kernel's ascending
// order (dq_ascending); the wide kernel's ascending order takes the default's groups (measured in that order on MHA
// D256 B1 H16 T16384: 356 TFLOP/s with four kv heads, 306-311 with every head at once, 312 with one, whose tiles wait
// on each other in a chain).
int kv_heads_together(const cuda::bwd::BackwardParams& p, const DeviceFacts& dev) {
  if (p.deterministic && !(p.dq_ascending && wide(p)))
    return std::min<int>(p.dq_ascending ? 2 : 1, static_cast<int>(p.a.H));
  const int64_t row_bytes = (p.a.K + p.a.V) * 2 + int64_t{p.K16} * 4;
  const int64_t head_bytes = std::max<int64_t>(1, p.a.B * p.a.T * p.a.group * row_bytes);
  const int64_t fit = int64_t{dev.l2_bytes} / 2 / head_bytes;
  return static_cast<int>(std::clamp<int64_t>(fit, std::min<int64_t>(4, p.a.H), p.a.H));
}

// An item of the dK/dV kernel that serves `p`: its keys (the key tile schedule's tile_rows) and its CTAs (two in the
// 512 bucket, head-dim halves, and in the 256 one without the row sums, key tiles).
struct ItemShape {
  int keys, ctas;
};
template <class Tile>
constexpr ItemShape wide_item() {
  return {Tile::kItemKeys, Tile::kCluster};
}
ItemShape item_shape(const cuda::bwd::BackwardParams& p) {
  using cuda::hopper::DkdvWideTile;
  static_assert(cuda::hopper::DkdvTile<64>::BN == cuda::hopper::DkdvTile<128>::BN);
  if (!wide(p)) return {cuda::hopper::DkdvTile<64>::BN, 1};
  if (wide_192_128(p)) return wide_item<DkdvWideTile<192, 128>>();
  if (p.a.K > 256 || p.a.V > 256) return wide_item<DkdvWideTile<512, 512>>();
  return p.needs_row_sums() ? wide_item<DkdvWideTile<256, 256, true>>() : wide_item<DkdvWideTile<256, 256, false>>();
}
}  // namespace

int hopper_dkdv_key_rows(const cuda::bwd::BackwardParams& p) { return item_shape(p).keys; }

bool hopper_dkdv_sums_sink(const cuda::bwd::BackwardParams& p) {
  const bool bucket_128 = !wide(p) && (p.a.K > 64 || p.a.V > 64);  // Consumer::kSinkParts
  return bucket_128 && p.a.has_sink && !p.a.has_gate;
}

std::string hopper_dkdv_refusal(const DkdvTensors& args, const cuda::bwd::BackwardParams& p, const DeviceFacts& dev) {
  const cuda::AttentionParams& a = p.a;
  if (dev.major != 9) return "needs an sm_90 GPU";
  if (a.dtype != cuda::ElementType::f16 && a.dtype != cuda::ElementType::bf16) return "takes fp16 and bf16 only";
  if (p.K16 == 16) return "takes head dims K above 16";
  if (a.K > 512 || a.V > 512) return "takes head dims K and V up to 512";
  // Where the exact-D pre-pass gives D, a row with one key has dS = P (dP - D) = 0 only when the dK/dV kernel sums
  // S and dP in the pre-pass's (and the forward's) order: the 512 bucket's CTA pair adds two halves' sums instead.
  if (p.exact_D && (a.K > 256 || a.V > 256))
    return "takes rows that see at most 64 keys (exact D) with head dims up to 256 only";
  if (a.K % 8 != 0 || a.V % 8 != 0) return "takes head dims K and V that are multiples of 8 (its tensor maps)";
  if (a.T > std::numeric_limits<int32_t>::max()) return "sequences longer than 2^31 - 1 tokens are not supported";
  const ItemShape item = item_shape(p);
  const int64_t ctas = cuda::make_key_tile_schedule(a, item.keys, nullptr).num_tiles * a.H * item.ctas;
  if (ctas > std::numeric_limits<int32_t>::max()) return "needs fewer than 2^31 CTAs ((key tile, kv head) pairs)";
  for (const Tensor* t : {&args.q, &args.k, &args.v, &args.dout})
    if (!token_head_map_ready(*t)) return "needs q, k, v and dout with 16-byte aligned rows and strides";
  if (cuda::row_copy_width(args.dk) < 16 || cuda::row_copy_width(args.dv) < 16)  // the kernels store 16-byte pieces
    return "needs dk and dv with 16-byte aligned rows";
  return "";
}

void launch_hopper_dkdv(const DkdvTensors& args, const cuda::bwd::BackwardParams& p, const cuda::TileSchedule& keys,
                        cudaStream_t stream) {
  using cuda::hopper::DkdvTile;
  cuda::hopper::DkdvParams dp;
  const DeviceFacts dev = device_facts(args.q.device_index);
  dp.b = p;
  // Deterministic mode's ascending order (BackwardParams::dq_ascending) walks the query heads innermost, which the
  // row sums and the sink's parts (summed per head over its rows) allow only in the 256 / 256 split consumers, for
  // up to kAscendingGroup query heads a kv head (their column sums kept apart). It pays where every key tile sees
  // the rows below it and a tile's turn comes late enough after the one before it: where several query heads share
  // the kv head (their steps in between). With one query head a kv head the descending order measured better in the
  // wide kernel too (MHA D256 B2 H8 T8192 337-341 against 315-323 TFLOP/s, B1 H16 T16384 369-371 against 346-348;
  // B1 H8 T32768 348-350 against 358; GQA 16/4 D256 229-234 against 325-327). A window's key tiles see bands of like
  // size, where it costs (GQA 32/8 D128 T8192 window 1024: 243 against 306 TFLOP/s).
  using Split = cuda::hopper::DkdvWideTile<256, 256>;
  const bool sums_ascend = wide(p) && !wide_192_128(p) && p.a.K <= 256 && p.a.V <= 256 &&
                           p.a.group <= Split::kAscendingGroup;
  dp.b.dq_ascending = p.deterministic && (!p.needs_row_sums() || sums_ascend) && !p.sink_parts && p.a.window < 0 &&
                      p.a.group > 1;
  dp.b.kv_heads_together = kv_heads_together(dp.b, dev);
  const cuda::ElementType type = p.a.dtype;
  if (wide(p)) {
    if (type == cuda::ElementType::f16) launch_wide<__half>(args, dp, keys, stream);
    else launch_wide<__nv_bfloat16>(args, dp, keys, stream);
    return;
  }
  const int kd = p.a.K <= 64 && p.a.V <= 64 ? 64 : 128;
  const int query_rows = kd == 64 ? DkdvTile<64>::BM : DkdvTile<128>::BM;
  dp.q_map = cuda::make_tensor_map(args.q.data, type, token_head_map(args.q, query_rows));
  dp.k_map = cuda::make_tensor_map(args.k.data, type, token_head_map(args.k, DkdvTile<64>::BN));
  dp.v_map = cuda::make_tensor_map(args.v.data, type, token_head_map(args.v, DkdvTile<64>::BN));
  dp.do_map = cuda::make_tensor_map(args.dout.data, type, token_head_map(args.dout, query_rows));
  if (type == cuda::ElementType::f16) {
    if (kd == 64) cuda::hopper::launch_dkdv<__half, 64>(dp, keys, dev.sms, stream);
    else cuda::hopper::launch_dkdv<__half, 128>(dp, keys, dev.sms, stream);
  } else {
    if (kd == 64) cuda::hopper::launch_dkdv<__nv_bfloat16, 64>(dp, keys, dev.sms, stream);
    else cuda::hopper::launch_dkdv<__nv_bfloat16, 128>(dp, keys, dev.sms, stream);
  }
}

}  // namespace flashgate::host
