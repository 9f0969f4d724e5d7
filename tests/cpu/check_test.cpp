// SPEC §8 argument rules of attention_forward and attention_backward: one test per rule and op. Each
// starts from a valid case, breaks one argument, and expects a flashgate::Error that names it, the same
// error from workspace_size, and no byte of any tensor changed (outputs are poisoned first).
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "small_bases.h"

namespace fgtest {
namespace {

constexpr ErrorKind kShape = ErrorKind::invalid_argument;
constexpr ErrorKind kType = ErrorKind::wrong_type;

template <class Args>
using Break = std::function<void(Subject<Args>&)>;

template <class Args>
Rule<Args> rule(std::string name, std::string arg, Break<Args> breaks, ErrorKind kind = kShape,
                Subject<Args> (*base)(uint64_t) = dense_base<Args>) {
  return Rule<Args>{std::move(name), Rejection{std::move(arg), kind, true}, std::move(breaks), base};
}

// Rules on q, k, v, g, sink, cu_seqlens, scale and window: the same for forward and backward.
template <class Args>
std::vector<Rule<Args>> input_rules() {
  using S = Subject<Args>;
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  std::vector<Rule<Args>> r = {
      // presence and rank
      rule<Args>("q_missing", "q", [](S& s) { s.drop("q"); }),
      rule<Args>("k_missing", "k", [](S& s) { s.drop("k"); }),
      rule<Args>("v_missing", "v", [](S& s) { s.drop("v"); }),
      rule<Args>("q_rank", "q", [](S& s) { s.change_rank("q"); }),
      rule<Args>("k_rank", "k", [](S& s) { s.change_rank("k"); }),
      rule<Args>("v_rank", "v", [](S& s) { s.change_rank("v"); }),
      rule<Args>("g_rank", "g", [](S& s) { s.change_rank("g"); }),
      rule<Args>("sink_rank", "sink", [](S& s) { s.change_rank("sink"); }),
      rule<Args>("cu_seqlens_rank", "cu_seqlens", [](S& s) { s.change_rank("cu_seqlens"); }, kShape, packed_base<Args>),
      // shapes against q [2,5,4,8]
      rule<Args>("k_batch", "k", [](S& s) { s.resize("k", 0, 3); }),
      rule<Args>("k_time", "k", [](S& s) { s.resize("k", 1, 6); }),
      rule<Args>("k_head_dim", "k", [](S& s) { s.resize("k", 3, 7); }),
      rule<Args>("v_batch", "v", [](S& s) { s.resize("v", 0, 1); }),
      rule<Args>("v_time", "v", [](S& s) { s.resize("v", 1, 4); }),
      rule<Args>("v_heads", "v", [](S& s) { s.resize("v", 2, 1); }),
      rule<Args>("v_dim_against_o", "o", [](S& s) { s.resize("v", 3, 7); }),
      rule<Args>("q_time_against_k", "k", [](S& s) { s.resize("q", 1, 6); }),
      rule<Args>("g_batch", "g", [](S& s) { s.resize("g", 0, 1); }),
      rule<Args>("g_time", "g", [](S& s) { s.resize("g", 1, 6); }),
      rule<Args>("g_heads", "g", [](S& s) { s.resize("g", 2, 2); }),
      rule<Args>("sink_heads", "sink", [](S& s) { s.resize("sink", 0, 3); }),
      rule<Args>("negative_size", "q", [](S& s) { s.field("q").shape[1] = -1; }),
      // heads and head dims
      rule<Args>("heads_not_a_multiple",
                 "k", [](S& s) { s.resize("k", 2, 3), s.resize("v", 2, 3); }),
      rule<Args>("more_kv_heads_than_q_heads",
                 "k", [](S& s) { s.resize("k", 2, 8), s.resize("v", 2, 8); }),
      rule<Args>("head_dim_k_0", "q", [](S& s) { s.resize("q", 3, 0), s.resize("k", 3, 0); }),
      rule<Args>("head_dim_k_513", "q", [](S& s) { s.resize("q", 3, 513), s.resize("k", 3, 513); }),
      rule<Args>("head_dim_v_0", "v", [](S& s) { s.resize("v", 3, 0); }),
      rule<Args>("head_dim_v_513", "v", [](S& s) { s.resize("v", 3, 513); }),
      // dtypes
      rule<Args>("q_int32", "q", [](S& s) { s.retype("q", DType::i32); }, kType),
      rule<Args>("q_fp8", "q", [](S& s) { s.retype("q", DType::e4m3); }, kType),
      rule<Args>("k_dtype_mixed", "k", [](S& s) { s.retype("k", DType::f16); }, kType),
      rule<Args>("v_dtype_mixed", "v", [](S& s) { s.retype("v", DType::bf16); }, kType),
      rule<Args>("q_half_others_float", "k", [](S& s) { s.retype("q", DType::f16); }, kType),
      rule<Args>("g_int32", "g", [](S& s) { s.retype("g", DType::i32); }, kType),
      rule<Args>("g_float64_with_fp32_q", "g", [](S& s) { s.retype("g", DType::f64); }, kType),
      rule<Args>("sink_half", "sink", [](S& s) { s.retype("sink", DType::f16); }, kType),
      rule<Args>("cu_seqlens_float", "cu_seqlens", [](S& s) { s.retype("cu_seqlens", DType::f32); }, kType,
                 packed_base<Args>),
      // scalars
      rule<Args>("window_negative", "window", [](S& s) { s.args.window = -1; }),
      rule<Args>("scale_nan", "scale", [nan](S& s) { s.args.scale = static_cast<float>(nan); }),
      rule<Args>("scale_inf", "scale", [inf](S& s) { s.args.scale = static_cast<float>(inf); }),
      rule<Args>("scale_minus_inf", "scale", [inf](S& s) { s.args.scale = static_cast<float>(-inf); }),
      // packed sequences: [0,2,2,5] valid
      rule<Args>("cu_seqlens_start", "cu_seqlens", [](S& s) { s.set_index("cu_seqlens", {3, 3, 4, 5}); }, kShape,
                 packed_base<Args>),
      rule<Args>("cu_seqlens_decreasing", "cu_seqlens", [](S& s) { s.set_index("cu_seqlens", {0, 3, 2, 5}); },
                 kShape, packed_base<Args>),
      rule<Args>("cu_seqlens_end_short", "cu_seqlens", [](S& s) { s.set_index("cu_seqlens", {0, 2, 2, 4}); },
                 kShape, packed_base<Args>),
      rule<Args>("cu_seqlens_end_long", "cu_seqlens", [](S& s) { s.set_index("cu_seqlens", {0, 2, 2, 6}); },
                 kShape, packed_base<Args>),
      rule<Args>("cu_seqlens_empty", "cu_seqlens", [](S& s) { s.reshape("cu_seqlens", {0}); }, kShape,
                 packed_base<Args>),
      rule<Args>("cu_seqlens_checked_on_host_without_validate", "cu_seqlens",
                 [](S& s) {
                   s.set_index("cu_seqlens", {0, 3, 2, 5});
                   s.args.validate = false;
                 },
                 kShape, packed_base<Args>),
      rule<Args>("cu_seqlens_with_batch_2", "cu_seqlens",
                 [](S& s) {
                   OwnedTensor cu(DType::i32, {2});
                   cu.fill_index({0, 5});
                   s.attach("cu_seqlens", cu);
                 }),
      // layout and placement
      rule<Args>("q_head_axis_strided", "q", [](S& s) { s.stride_last("q"); }),
      rule<Args>("k_head_axis_strided", "k", [](S& s) { s.stride_last("k"); }),
      rule<Args>("v_head_axis_strided", "v", [](S& s) { s.stride_last("v"); }),
      rule<Args>("g_last_axis_strided", "g", [](S& s) { s.stride_last("g"); }),
      rule<Args>("q_misaligned", "q", [](S& s) { s.misalign("q"); }),
      rule<Args>("k_misaligned", "k", [](S& s) { s.misalign("k"); }),
      rule<Args>("v_misaligned", "v", [](S& s) { s.misalign("v"); }),
      rule<Args>("sink_misaligned", "sink", [](S& s) { s.misalign("sink"); }),
      rule<Args>("k_negative_stride", "k", [](S& s) { s.negate_stride("k", 1); }),
      rule<Args>("k_on_another_device", "k", [](S& s) { s.label_device("k", Device::cuda); }, kType),
      rule<Args>("sink_on_another_device_index", "sink", [](S& s) { s.label_device("sink", Device::cpu, 1); },
                 kType),
      rule<Args>("float64_on_gpu", "q", [](S& s) { s.to_gpu(); }, kType, dense_f64_base<Args>),
  };
  return r;
}

std::vector<Rule<ForwardArgs>> forward_rules() {
  using S = Subject<ForwardArgs>;
  std::vector<Rule<ForwardArgs>> r = input_rules<ForwardArgs>();
  const std::vector<Rule<ForwardArgs>> outputs = {
      rule<ForwardArgs>("o_missing", "o", [](S& s) { s.drop("o"); }),
      rule<ForwardArgs>("o_rank", "o", [](S& s) { s.change_rank("o"); }),
      rule<ForwardArgs>("o_batch", "o", [](S& s) { s.resize("o", 0, 1); }),
      rule<ForwardArgs>("o_time", "o", [](S& s) { s.resize("o", 1, 4); }),
      rule<ForwardArgs>("o_heads", "o", [](S& s) { s.resize("o", 2, 2); }),
      rule<ForwardArgs>("o_dim", "o", [](S& s) { s.resize("o", 3, 8); }),
      rule<ForwardArgs>("o_dtype", "o", [](S& s) { s.retype("o", DType::f16); }, kType),
      rule<ForwardArgs>("o_head_axis_strided", "o", [](S& s) { s.stride_last("o"); }),
      rule<ForwardArgs>("o_misaligned", "o", [](S& s) { s.misalign("o"); }),
      rule<ForwardArgs>("o_zero_stride", "o", [](S& s) { s.zero_stride("o", 1); }),
      rule<ForwardArgs>("o_overlapping_strides", "o", [](S& s) { s.field("o").stride[2] = 1; }),
      rule<ForwardArgs>("o_on_another_device", "o", [](S& s) { s.label_device("o", Device::cuda); }, kType),
      rule<ForwardArgs>("lse_rank", "lse", [](S& s) { s.change_rank("lse"); }),
      rule<ForwardArgs>("lse_batch", "lse", [](S& s) { s.resize("lse", 0, 3); }),
      rule<ForwardArgs>("lse_time", "lse", [](S& s) { s.resize("lse", 1, 6); }),
      rule<ForwardArgs>("lse_heads", "lse", [](S& s) { s.resize("lse", 2, 2); }),
      rule<ForwardArgs>("lse_dtype", "lse", [](S& s) { s.retype("lse", DType::f16); }, kType),
      rule<ForwardArgs>("lse_zero_stride", "lse", [](S& s) { s.zero_stride("lse", 0); }),
  };
  r.insert(r.end(), outputs.begin(), outputs.end());
  return r;
}

std::vector<Rule<BackwardArgs>> backward_rules() {
  using S = Subject<BackwardArgs>;
  std::vector<Rule<BackwardArgs>> r = input_rules<BackwardArgs>();
  const std::vector<Rule<BackwardArgs>> more = {
      // the forward's results and the incoming gradient
      rule<BackwardArgs>("o_missing", "o", [](S& s) { s.drop("o"); }),
      rule<BackwardArgs>("lse_missing", "lse", [](S& s) { s.drop("lse"); }),
      rule<BackwardArgs>("dout_missing", "dout", [](S& s) { s.drop("dout"); }),
      rule<BackwardArgs>("o_time", "o", [](S& s) { s.resize("o", 1, 4); }),
      rule<BackwardArgs>("lse_heads", "lse", [](S& s) { s.resize("lse", 2, 8); }),
      rule<BackwardArgs>("lse_rank", "lse", [](S& s) { s.change_rank("lse"); }),
      rule<BackwardArgs>("dout_dim", "dout", [](S& s) { s.resize("dout", 3, 5); }),
      rule<BackwardArgs>("o_dtype", "o", [](S& s) { s.retype("o", DType::bf16); }, kType),
      rule<BackwardArgs>("lse_dtype", "lse", [](S& s) { s.retype("lse", DType::f64); }, kType),
      rule<BackwardArgs>("dout_dtype", "dout", [](S& s) { s.retype("dout", DType::f16); }, kType),
      rule<BackwardArgs>("dout_head_axis_strided", "dout", [](S& s) { s.stride_last("dout"); }),
      // gradients
      rule<BackwardArgs>("dq_missing", "dq", [](S& s) { s.drop("dq"); }),
      rule<BackwardArgs>("dk_missing", "dk", [](S& s) { s.drop("dk"); }),
      rule<BackwardArgs>("dv_missing", "dv", [](S& s) { s.drop("dv"); }),
      rule<BackwardArgs>("dq_rank", "dq", [](S& s) { s.change_rank("dq"); }),
      rule<BackwardArgs>("dq_heads", "dq", [](S& s) { s.resize("dq", 2, 2); }),
      rule<BackwardArgs>("dk_heads", "dk", [](S& s) { s.resize("dk", 2, 4); }),
      rule<BackwardArgs>("dv_dim", "dv", [](S& s) { s.resize("dv", 3, 8); }),
      rule<BackwardArgs>("dq_dtype", "dq", [](S& s) { s.retype("dq", DType::f16); }, kType),
      rule<BackwardArgs>("dk_dtype", "dk", [](S& s) { s.retype("dk", DType::bf16); }, kType),
      rule<BackwardArgs>("dv_dtype", "dv", [](S& s) { s.retype("dv", DType::f64); }, kType),
      rule<BackwardArgs>("dq_zero_stride", "dq", [](S& s) { s.zero_stride("dq", 0); }),
      rule<BackwardArgs>("dk_zero_stride", "dk", [](S& s) { s.zero_stride("dk", 2); }),
      rule<BackwardArgs>("dv_overlapping_strides", "dv", [](S& s) { s.field("dv").stride[1] = 1; }),
      rule<BackwardArgs>("dq_head_axis_strided", "dq", [](S& s) { s.stride_last("dq"); }),
      rule<BackwardArgs>("dk_misaligned", "dk", [](S& s) { s.misalign("dk"); }),
      rule<BackwardArgs>("dv_on_another_device", "dv", [](S& s) { s.label_device("dv", Device::cuda); }, kType),
      // dg iff g, dsink iff sink
      rule<BackwardArgs>("dg_without_g", "dg", [](S& s) { s.drop("g"); }),
      rule<BackwardArgs>("dsink_without_sink", "dsink", [](S& s) { s.drop("sink"); }),
      rule<BackwardArgs>("dg_missing_with_g", "dg", [](S& s) { s.drop("dg"); }),
      rule<BackwardArgs>("dsink_missing_with_sink", "dsink", [](S& s) { s.drop("dsink"); }),
      rule<BackwardArgs>("dg_time", "dg", [](S& s) { s.resize("dg", 1, 4); }),
      rule<BackwardArgs>("dg_dtype", "dg", [](S& s) { s.retype("dg", DType::f16); }, kType),
      rule<BackwardArgs>("dg_zero_stride", "dg", [](S& s) { s.zero_stride("dg", 1); }),
      rule<BackwardArgs>("dsink_heads", "dsink", [](S& s) { s.resize("dsink", 0, 2); }),
      rule<BackwardArgs>("dsink_dtype", "dsink", [](S& s) { s.retype("dsink", DType::f16); }, kType),
      rule<BackwardArgs>("dsink_zero_stride", "dsink", [](S& s) { s.zero_stride("dsink", 0); }),
  };
  r.insert(r.end(), more.begin(), more.end());
  return r;
}

class ForwardRule : public testing::TestWithParam<Rule<ForwardArgs>> {};
TEST_P(ForwardRule, Rejects) { check_rule(GetParam()); }
INSTANTIATE_TEST_SUITE_P(Spec8, ForwardRule, testing::ValuesIn(forward_rules()), rule_test_name<ForwardArgs>);

class BackwardRule : public testing::TestWithParam<Rule<BackwardArgs>> {};
TEST_P(BackwardRule, Rejects) { check_rule(GetParam()); }
INSTANTIATE_TEST_SUITE_P(Spec8, BackwardRule, testing::ValuesIn(backward_rules()), rule_test_name<BackwardArgs>);

// The bases themselves are valid, so every rule above fails for its own reason.
TEST(AttentionRuleBases, AreAccepted) {
  const uint64_t seed = flashgate::harness::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  expect_accepted(dense_base<ForwardArgs>(seed));
  expect_accepted(packed_base<ForwardArgs>(seed));
  expect_accepted(dense_f64_base<ForwardArgs>(seed));
  expect_accepted(dense_base<BackwardArgs>(seed));
  expect_accepted(packed_base<BackwardArgs>(seed));
  expect_accepted(dense_f64_base<BackwardArgs>(seed));
}

}  // namespace
}  // namespace fgtest
