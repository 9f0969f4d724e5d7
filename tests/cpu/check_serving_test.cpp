// SPEC §8 argument rules of decode and paged_attention: one test per rule and op, as in check_test.cpp.
#include <limits>
#include <string>
#include <vector>

#include "small_bases.h"

namespace fgtest {
namespace {


constexpr ErrorKind kShape = ErrorKind::invalid_argument;
constexpr ErrorKind kType = ErrorKind::wrong_type;
const float kNaN = std::numeric_limits<float>::quiet_NaN();
const float kInf = std::numeric_limits<float>::infinity();

// ---- decode -----------------------------------------------------------------------------------------------

using DS = Subject<DecodeArgs>;

Rule<DecodeArgs> drule(std::string name, std::string arg, std::function<void(DS&)> breaks, ErrorKind kind = kShape,
                       Subject<DecodeArgs> (*base)(uint64_t) = decode_base) {
  return Rule<DecodeArgs>{std::move(name), Rejection{std::move(arg), kind, true}, std::move(breaks), base};
}

std::vector<Rule<DecodeArgs>> decode_rules() {
  return {
      // presence and rank
      drule("q_missing", "q", [](DS& s) { s.drop("q"); }),
      drule("k_missing", "k", [](DS& s) { s.drop("k"); }),
      drule("v_missing", "v", [](DS& s) { s.drop("v"); }),
      drule("cu_seqlens_missing", "cu_seqlens", [](DS& s) { s.drop("cu_seqlens"); }),
      drule("o_missing", "o", [](DS& s) { s.drop("o"); }),
      drule("q_rank", "q", [](DS& s) { s.change_rank("q"); }),
      drule("k_rank", "k", [](DS& s) { s.change_rank("k"); }),
      drule("v_rank", "v", [](DS& s) { s.change_rank("v"); }),
      drule("cu_seqlens_rank", "cu_seqlens", [](DS& s) { s.change_rank("cu_seqlens"); }),
      drule("o_rank", "o", [](DS& s) { s.change_rank("o"); }),
      drule("g_rank", "g", [](DS& s) { s.change_rank("g"); }),
      drule("sink_rank", "sink", [](DS& s) { s.change_rank("sink"); }),
      // shapes against q [3,4,8], k [7,2,8], v [7,2,6]
      drule("k_head_dim", "k", [](DS& s) { s.resize("k", 2, 7); }),
      drule("k_time_against_v", "v", [](DS& s) { s.resize("k", 0, 8); }),
      drule("v_time", "v", [](DS& s) { s.resize("v", 0, 6); }),
      drule("v_heads", "v", [](DS& s) { s.resize("v", 1, 1); }),
      drule("v_dim_against_o", "o", [](DS& s) { s.resize("v", 2, 5); }),
      drule("q_count_against_cu_seqlens", "cu_seqlens", [](DS& s) { s.resize("q", 0, 4); }),
      drule("cu_seqlens_length", "cu_seqlens", [](DS& s) { s.reshape("cu_seqlens", {5}); }),
      drule("o_count", "o", [](DS& s) { s.resize("o", 0, 2); }),
      drule("o_heads", "o", [](DS& s) { s.resize("o", 1, 2); }),
      drule("o_dim", "o", [](DS& s) { s.resize("o", 2, 8); }),
      drule("g_time", "g", [](DS& s) { s.resize("g", 0, 6); }),
      drule("g_heads", "g", [](DS& s) { s.resize("g", 1, 2); }),
      drule("sink_heads", "sink", [](DS& s) { s.resize("sink", 0, 2); }),
      // heads and head dims
      drule("heads_not_a_multiple", "k", [](DS& s) { s.resize("k", 1, 3), s.resize("v", 1, 3); }),
      drule("head_dim_k_0", "q", [](DS& s) { s.resize("q", 2, 0), s.resize("k", 2, 0); }),
      drule("head_dim_k_513", "q", [](DS& s) { s.resize("q", 2, 513), s.resize("k", 2, 513); }),
      drule("head_dim_v_0", "v", [](DS& s) { s.resize("v", 2, 0); }),
      drule("head_dim_v_513", "v", [](DS& s) { s.resize("v", 2, 513); }),
      // dtypes
      drule("q_int32", "q", [](DS& s) { s.retype("q", DType::i32); }, kType),
      drule("q_fp8", "q", [](DS& s) { s.retype("q", DType::e4m3); }, kType),
      drule("k_dtype_mixed", "k", [](DS& s) { s.retype("k", DType::bf16); }, kType),
      drule("v_dtype_mixed", "v", [](DS& s) { s.retype("v", DType::f16); }, kType),
      drule("o_dtype", "o", [](DS& s) { s.retype("o", DType::f64); }, kType),
      drule("g_int32", "g", [](DS& s) { s.retype("g", DType::i32); }, kType),
      drule("sink_half", "sink", [](DS& s) { s.retype("sink", DType::f16); }, kType),
      drule("cu_seqlens_float", "cu_seqlens", [](DS& s) { s.retype("cu_seqlens", DType::f32); }, kType),
      // scalars
      drule("window_negative", "window", [](DS& s) { s.args.window = -3; }),
      drule("scale_nan", "scale", [](DS& s) { s.args.scale = kNaN; }),
      drule("scale_inf", "scale", [](DS& s) { s.args.scale = kInf; }),
      // offsets: [0,3,3,7] valid
      drule("cu_seqlens_start", "cu_seqlens", [](DS& s) { s.set_index("cu_seqlens", {3, 3, 3, 7}); }),
      drule("cu_seqlens_decreasing", "cu_seqlens", [](DS& s) { s.set_index("cu_seqlens", {0, 4, 3, 7}); }),
      drule("cu_seqlens_end_short", "cu_seqlens", [](DS& s) { s.set_index("cu_seqlens", {0, 3, 3, 6}); }),
      drule("cu_seqlens_end_long", "cu_seqlens", [](DS& s) { s.set_index("cu_seqlens", {0, 3, 3, 8}); }),
      drule("cu_seqlens_checked_on_host_without_validate", "cu_seqlens",
            [](DS& s) {
              s.set_index("cu_seqlens", {0, 3, 3, 9});
              s.args.validate = false;
            }),
      // layout and placement
      drule("q_head_axis_strided", "q", [](DS& s) { s.stride_last("q"); }),
      drule("k_head_axis_strided", "k", [](DS& s) { s.stride_last("k"); }),
      drule("v_head_axis_strided", "v", [](DS& s) { s.stride_last("v"); }),
      drule("o_head_axis_strided", "o", [](DS& s) { s.stride_last("o"); }),
      drule("q_misaligned", "q", [](DS& s) { s.misalign("q"); }),
      drule("k_misaligned", "k", [](DS& s) { s.misalign("k"); }),
      drule("cu_seqlens_misaligned", "cu_seqlens", [](DS& s) { s.misalign("cu_seqlens"); }),
      drule("v_negative_stride", "v", [](DS& s) { s.negate_stride("v", 0); }),
      drule("o_zero_stride", "o", [](DS& s) { s.zero_stride("o", 1); }),
      drule("o_overlapping_strides", "o", [](DS& s) { s.field("o").stride[0] = 6; }),
      drule("v_on_another_device", "v", [](DS& s) { s.label_device("v", Device::cuda); }, kType),
      drule("float64_on_gpu", "q", [](DS& s) { s.to_gpu(); }, kType, decode_f64_base),
  };
}

class DecodeRule : public testing::TestWithParam<Rule<DecodeArgs>> {};
TEST_P(DecodeRule, Rejects) { check_rule(GetParam()); }
INSTANTIATE_TEST_SUITE_P(Spec8, DecodeRule, testing::ValuesIn(decode_rules()), rule_test_name<DecodeArgs>);

// ---- paged_attention ----------------------------------------------------------------------------------------

using PS = Subject<PagedArgs>;

Rule<PagedArgs> prule(std::string name, std::string arg, std::function<void(PS&)> breaks, ErrorKind kind = kShape,
                      Subject<PagedArgs> (*base)(uint64_t) = paged_base) {
  return Rule<PagedArgs>{std::move(name), Rejection{std::move(arg), kind, true}, std::move(breaks), base};
}

// The used block of sequence `n`, slot `b` in the [3,2] table.
int64_t slot(int64_t n, int64_t b) { return n * 2 + b; }

std::vector<Rule<PagedArgs>> paged_rules() {
  return {
      // presence and rank
      prule("q_missing", "q", [](PS& s) { s.drop("q"); }),
      prule("k_cache_missing", "k_cache", [](PS& s) { s.drop("k_cache"); }),
      prule("v_cache_missing", "v_cache", [](PS& s) { s.drop("v_cache"); }),
      prule("block_table_missing", "block_table", [](PS& s) { s.drop("block_table"); }),
      prule("seq_lens_k_missing", "seq_lens_k", [](PS& s) { s.drop("seq_lens_k"); }),
      prule("cu_seqlens_q_missing", "cu_seqlens_q", [](PS& s) { s.drop("cu_seqlens_q"); }),
      prule("o_missing", "o", [](PS& s) { s.drop("o"); }),
      prule("q_rank", "q", [](PS& s) { s.change_rank("q"); }),
      prule("k_cache_rank", "k_cache", [](PS& s) { s.change_rank("k_cache"); }),
      prule("v_cache_rank", "v_cache", [](PS& s) { s.change_rank("v_cache"); }),
      prule("block_table_rank", "block_table", [](PS& s) { s.change_rank("block_table"); }),
      prule("seq_lens_k_rank", "seq_lens_k", [](PS& s) { s.change_rank("seq_lens_k"); }),
      prule("cu_seqlens_q_rank", "cu_seqlens_q", [](PS& s) { s.change_rank("cu_seqlens_q"); }),
      prule("o_rank", "o", [](PS& s) { s.change_rank("o"); }),
      prule("sink_rank", "sink", [](PS& s) { s.change_rank("sink"); }),
      // shapes against q [4,4,8], caches [6,16,2,8]
      prule("k_cache_head_dim", "k_cache", [](PS& s) { s.resize("k_cache", 3, 7); }),
      prule("v_cache_blocks", "v_cache", [](PS& s) { s.resize("v_cache", 0, 7); }),
      prule("v_cache_block_size", "v_cache", [](PS& s) { s.resize("v_cache", 1, 32); }),
      prule("v_cache_heads", "v_cache", [](PS& s) { s.resize("v_cache", 2, 1); }),
      prule("v_dim_against_o", "o", [](PS& s) { s.resize("v_cache", 3, 6); }),
      prule("seq_lens_k_length", "seq_lens_k", [](PS& s) { s.reshape("seq_lens_k", {4}); }),
      prule("cu_seqlens_q_length", "cu_seqlens_q", [](PS& s) { s.reshape("cu_seqlens_q", {5}); }),
      prule("o_tokens", "o", [](PS& s) { s.resize("o", 0, 5); }),
      prule("o_heads", "o", [](PS& s) { s.resize("o", 1, 2); }),
      prule("o_dim", "o", [](PS& s) { s.resize("o", 2, 4); }),
      prule("sink_heads", "sink", [](PS& s) { s.resize("sink", 0, 8); }),
      // heads, head dims, block size
      prule("heads_not_a_multiple", "k_cache", [](PS& s) { s.resize("k_cache", 2, 3), s.resize("v_cache", 2, 3); }),
      prule("head_dim_k_0", "q", [](PS& s) { s.resize("q", 2, 0), s.resize("k_cache", 3, 0); }),
      prule("head_dim_k_577", "q", [](PS& s) { s.resize("q", 2, 577), s.resize("k_cache", 3, 577); }),
      prule("head_dim_v_0", "v_cache", [](PS& s) { s.resize("v_cache", 3, 0); }),
      prule("head_dim_v_513", "v_cache", [](PS& s) { s.resize("v_cache", 3, 513); }),
      prule("block_size_24", "k_cache", [](PS& s) { s.resize("k_cache", 1, 24), s.resize("v_cache", 1, 24); }),
      prule("block_size_8", "k_cache", [](PS& s) { s.resize("k_cache", 1, 8), s.resize("v_cache", 1, 8); }),
      prule("block_size_272", "k_cache", [](PS& s) { s.resize("k_cache", 1, 272), s.resize("v_cache", 1, 272); }),
      // dtypes
      prule("q_int32", "q", [](PS& s) { s.retype("q", DType::i32); }, kType),
      prule("q_fp8", "q", [](PS& s) { s.retype("q", DType::e4m3); }, kType),
      prule("k_cache_dtype_mixed", "k_cache", [](PS& s) { s.retype("k_cache", DType::f16); }, kType),
      prule("v_cache_dtype_mixed", "v_cache", [](PS& s) { s.retype("v_cache", DType::bf16); }, kType),
      prule("k_cache_fp8_v_cache_not", "v_cache", [](PS& s) { s.retype("k_cache", DType::e4m3); }, kType),
      prule("v_cache_fp8_k_cache_not", "v_cache", [](PS& s) { s.retype("v_cache", DType::e4m3); }, kType),
      prule("block_table_int64", "block_table", [](PS& s) { s.retype("block_table", DType::i64); }, kType),
      prule("seq_lens_k_int64", "seq_lens_k", [](PS& s) { s.retype("seq_lens_k", DType::i64); }, kType),
      prule("cu_seqlens_q_float", "cu_seqlens_q", [](PS& s) { s.retype("cu_seqlens_q", DType::f32); }, kType),
      prule("o_dtype", "o", [](PS& s) { s.retype("o", DType::bf16); }, kType),
      prule("sink_half", "sink", [](PS& s) { s.retype("sink", DType::f16); }, kType),
      // scalars
      prule("window_negative", "window", [](PS& s) { s.args.window = -1; }),
      prule("max_seqlen_q_zero", "max_seqlen_q", [](PS& s) { s.args.max_seqlen_q = 0; }),
      prule("max_seqlen_q_below_a_sequence", "max_seqlen_q", [](PS& s) { s.args.max_seqlen_q = 2; }),  // Lq 3
      prule("scale_nan", "scale", [](PS& s) { s.args.scale = kNaN; }),
      prule("scale_minus_inf", "scale", [](PS& s) { s.args.scale = -kInf; }),
      // index values: cu_seqlens_q [0,1,4,4], seq_lens_k [5,20,0], 1 + 2 + 0 used blocks of 6
      prule("cu_seqlens_q_start", "cu_seqlens_q", [](PS& s) { s.set_index("cu_seqlens_q", {1, 1, 4, 4}); }),
      prule("cu_seqlens_q_decreasing", "cu_seqlens_q", [](PS& s) { s.set_index("cu_seqlens_q", {0, 2, 1, 4}); }),
      prule("cu_seqlens_q_end", "cu_seqlens_q", [](PS& s) { s.set_index("cu_seqlens_q", {0, 1, 3, 3}); }),
      prule("cu_seqlens_q_end_against_q", "cu_seqlens_q", [](PS& s) { s.resize("q", 0, 5), s.resize("o", 0, 5); }),
      prule("block_table_entry_past_the_cache", "block_table",
            [](PS& s) { s.set_index_at("block_table", slot(1, 1), 6); }),
      prule("block_table_entry_negative", "block_table",
            [](PS& s) { s.set_index_at("block_table", slot(0, 0), -1); }),
      prule("seq_lens_k_past_the_table", "seq_lens_k", [](PS& s) { s.set_index_at("seq_lens_k", 1, 33); }),
      prule("seq_lens_k_negative", "seq_lens_k", [](PS& s) { s.set_index_at("seq_lens_k", 2, -1); }),
      prule("queries_longer_than_context", "cu_seqlens_q", [](PS& s) { s.set_index_at("seq_lens_k", 1, 2); }),
      prule("index_values_checked_on_host_without_validate", "block_table",
            [](PS& s) {
              s.set_index_at("block_table", slot(1, 0), 100);
              s.args.validate = false;
            }),
      // fp8 scales
      prule("k_scale_without_fp8", "k_scale",
            [](PS& s) {
              OwnedTensor one(DType::f32, {1});
              one.fill(1.0);
              s.attach("k_scale", one);
            }),
      prule("v_scale_without_fp8", "v_scale",
            [](PS& s) {
              OwnedTensor per_token(DType::f32, {6, 2, 16});
              per_token.fill(1.0);
              s.attach("v_scale", per_token);
            }),
      prule("k_scale_per_token_block_size", "k_scale", [](PS& s) { s.resize("k_scale", 2, 8); }, kShape,
            paged_fp8_per_token_base),
      prule("v_scale_per_token_heads", "v_scale", [](PS& s) { s.resize("v_scale", 1, 4); }, kShape,
            paged_fp8_per_token_base),
      prule("k_scale_per_token_cache_layout", "k_scale", [](PS& s) { s.reshape("k_scale", {6, 16, 2}); }, kShape,
            paged_fp8_per_token_base),
      prule("k_scale_rank", "k_scale", [](PS& s) { s.change_rank("k_scale"); }, kShape, paged_fp8_per_token_base),
      prule("v_scale_two_elements", "v_scale", [](PS& s) { s.reshape("v_scale", {2}); }, kShape,
            paged_fp8_per_token_base),
      prule("k_scale_half", "k_scale", [](PS& s) { s.retype("k_scale", DType::f16); }, kType, paged_fp8_per_token_base),
      prule("v_scale_misaligned", "v_scale", [](PS& s) { s.misalign("v_scale"); }, kShape, paged_fp8_per_token_base),
      // layout and placement
      prule("q_head_axis_strided", "q", [](PS& s) { s.stride_last("q"); }),
      prule("k_cache_head_axis_strided", "k_cache", [](PS& s) { s.stride_last("k_cache"); }),
      prule("v_cache_head_axis_strided", "v_cache", [](PS& s) { s.stride_last("v_cache"); }),
      prule("block_table_last_axis_strided", "block_table", [](PS& s) { s.stride_last("block_table"); }),
      prule("o_head_axis_strided", "o", [](PS& s) { s.stride_last("o"); }),
      prule("q_misaligned", "q", [](PS& s) { s.misalign("q"); }),
      prule("k_cache_misaligned", "k_cache", [](PS& s) { s.misalign("k_cache"); }),
      prule("block_table_misaligned", "block_table", [](PS& s) { s.misalign("block_table"); }),
      prule("k_cache_negative_stride", "k_cache", [](PS& s) { s.negate_stride("k_cache", 0); }),
      prule("o_zero_stride", "o", [](PS& s) { s.zero_stride("o", 0); }),
      prule("o_overlapping_strides", "o", [](PS& s) { s.field("o").stride[1] = 4; }),
      prule("k_cache_on_another_device", "k_cache", [](PS& s) { s.label_device("k_cache", Device::cuda); }, kType),
      prule("seq_lens_k_on_another_device", "seq_lens_k", [](PS& s) { s.label_device("seq_lens_k", Device::cuda); },
            kType),
      prule("float64_on_gpu", "q", [](PS& s) { s.to_gpu(); }, kType, paged_f64_base),
  };
}

class PagedRule : public testing::TestWithParam<Rule<PagedArgs>> {};
TEST_P(PagedRule, Rejects) { check_rule(GetParam()); }
INSTANTIATE_TEST_SUITE_P(Spec8, PagedRule, testing::ValuesIn(paged_rules()), rule_test_name<PagedArgs>);

TEST(ServingRuleBases, AreAccepted) {
  const uint64_t seed = flashgate::harness::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  expect_accepted(decode_base(seed));
  expect_accepted(decode_f64_base(seed));
  expect_accepted(paged_base(seed));
  expect_accepted(paged_fp8_per_token_base(seed));
  expect_accepted(paged_f64_base(seed));
  for (int64_t bound : {3, 1000}) {  // the base's longest query (cu_seqlens_q [0,1,4,4]) and a loose bound
    Subject<PagedArgs> bounded = paged_base(seed);
    bounded.args.max_seqlen_q = bound;
    expect_accepted(bounded);
  }
}

}  // namespace
}  // namespace fgtest
