// SPEC §8: index tensors on the GPU (cu_seqlens, block_table, seq_lens_k) are read and checked on the host
// when the caller asks (`validate`, the default), and the call is refused before anything is written.
// Skips visibly without a GPU. (With validate off, bad GPU indices must be bounded inside the kernels;
// that is a kernel test, not an argument test.)
#include <string>

#include "small_bases.h"
#include "support/compare.h"

namespace fgtest {
namespace {

class GpuIndexValues : public testing::Test {
 protected:
  void SetUp() override {
    seed_ = flashgate::harness::fresh_seed();
    trace_.emplace(__FILE__, __LINE__, "seed " + std::to_string(seed_));
  }
  uint64_t seed_ = 0;
  std::optional<testing::ScopedTrace> trace_;
};

TEST_F(GpuIndexValues, AttentionOffsetsAreChecked) {
  FLASHGATE_REQUIRE_GPU();
  for (bool backward : {false, true}) {
    if (backward) {
      auto s = packed_base<BackwardArgs>(seed_);
      s.set_index("cu_seqlens", {0, 3, 2, 5});
      s.to_gpu();
      expect_rejected(s, {"cu_seqlens"});
    } else {
      auto s = packed_base<ForwardArgs>(seed_);
      s.set_index("cu_seqlens", {0, 2, 2, 4});
      s.to_gpu();
      expect_rejected(s, {"cu_seqlens"});
    }
  }
}

TEST_F(GpuIndexValues, DecodeOffsetsAreChecked) {
  FLASHGATE_REQUIRE_GPU();
  auto s = decode_base(seed_);
  s.set_index("cu_seqlens", {3, 3, 3, 7});
  s.to_gpu();
  EXPECT_EQ(expect_rejected(s, {"cu_seqlens"}), "flashgate: decode: cu_seqlens: must start at 0, got 3");
}

TEST_F(GpuIndexValues, PagedIndicesAreChecked) {
  FLASHGATE_REQUIRE_GPU();
  {
    auto s = paged_base(seed_);
    s.set_index_at("block_table", 3, 6);  // sequence 1, block 1: in use, past the cache
    s.to_gpu();
    expect_rejected(s, {"block_table"});
  }
  {
    auto s = paged_base(seed_);
    s.set_index_at("seq_lens_k", 1, 33);  // past the table's 32 tokens
    s.to_gpu();
    expect_rejected(s, {"seq_lens_k"});
  }
  {
    auto s = paged_base(seed_);
    s.set_index_at("seq_lens_k", 1, 2);  // 3 queries over 2 keys
    s.to_gpu();
    expect_rejected(s, {"cu_seqlens_q"});
  }
  {
    auto s = paged_base(seed_);
    s.set_index("cu_seqlens_q", {0, 2, 1, 4});
    s.to_gpu();
    expect_rejected(s, {"cu_seqlens_q"});
  }
}

}  // namespace
}  // namespace fgtest
