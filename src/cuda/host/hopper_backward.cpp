#include "cuda/host/hopper_backward.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <limits>

#include "cuda/host/attention_params.h"
#include "cuda/host/hopper_maps.h"
#include "cuda/hopper/backward.h"

namespace flashgate::host {

int hopper_dkdv_key_rows() { return cuda::hopper::DkdvTile<64>::BN; }

std::string hopper_dkdv_refusal(const BackwardArgs& args, const cuda::bwd::BackwardParams& p, const DeviceFacts& dev) {
  const cuda::AttentionParams& a = p.a;
  if (dev.major != 9) return "needs an sm_90 GPU";
  if (a.dtype != cuda::ElementType::f16 && a.dtype != cuda::ElementType::bf16) return "takes fp16 and bf16 only";
  if (p.exact_D) return "takes head dims above 16 (smaller ones need the exact-D pre-pass)";
  if (a.K > 128 || a.V > 128) return "takes head dims K and V up to 128 so far";
  if (a.K % 8 != 0 || a.V % 8 != 0) return "takes head dims K and V that are multiples of 8 (its tensor maps)";
  if (a.T > std::numeric_limits<int32_t>::max()) return "sequences longer than 2^31 - 1 tokens are not supported";
  for (const Tensor* t : {&args.q, &args.k, &args.v, &args.dout})
    if (!token_head_map_ready(*t)) return "needs q, k, v and dout with 16-byte aligned rows and strides";
  if (cuda::row_copy_width(args.dk) < 4 || cuda::row_copy_width(args.dv) < 4)
    return "needs dk and dv with 4-byte aligned rows";
  return "";
}

void launch_hopper_dkdv(const BackwardArgs& args, const cuda::bwd::BackwardParams& p, const cuda::TileSchedule& keys,
                        cudaStream_t stream) {
  using cuda::hopper::DkdvTile;
  cuda::hopper::DkdvParams dp;
  dp.b = p;
  const int kd = p.a.K <= 64 && p.a.V <= 64 ? 64 : 128;
  const int query_rows = kd == 64 ? DkdvTile<64>::BM : DkdvTile<128>::BM;
  const cuda::ElementType type = p.a.dtype;
  const int sms = device_facts(args.q.device_index).sms;
  dp.q_map = cuda::make_tensor_map(args.q.data, type, token_head_map(args.q, query_rows));
  dp.k_map = cuda::make_tensor_map(args.k.data, type, token_head_map(args.k, DkdvTile<64>::BN));
  dp.v_map = cuda::make_tensor_map(args.v.data, type, token_head_map(args.v, DkdvTile<64>::BN));
  dp.do_map = cuda::make_tensor_map(args.dout.data, type, token_head_map(args.dout, query_rows));
  if (type == cuda::ElementType::f16) {
    if (kd == 64) cuda::hopper::launch_dkdv<__half, 64>(dp, keys, sms, stream);
    else cuda::hopper::launch_dkdv<__half, 128>(dp, keys, sms, stream);
  } else {
    if (kd == 64) cuda::hopper::launch_dkdv<__nv_bfloat16, 64>(dp, keys, sms, stream);
    else cuda::hopper::launch_dkdv<__nv_bfloat16, 128>(dp, keys, sms, stream);
  }
}

}  // namespace flashgate::host
