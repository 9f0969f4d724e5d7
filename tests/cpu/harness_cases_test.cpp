// The harness's case descriptions (harness/cases.h), which name every case in failures and CLI output.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "harness/cases.h"

namespace flashgate::harness {
namespace {

// A description stays one line: long length lists (65600 packed sequences) show their ends, count and sum.
TEST(HarnessCases, DescribeAbbreviatesLongLengthLists) {
  AttentionConfig c;
  c.packed = {0, 15, 100};
  EXPECT_NE(c.describe().find("packed[0,15,100]"), std::string::npos) << c.describe();
  c.packed.assign(65600, 8);
  c.packed.back() = 3;
  const std::string d = c.describe();
  EXPECT_NE(d.find("packed[8,8,8,8,8,8,...,8,3 (65600 entries, sum 524795)]"), std::string::npos) << d;
  EXPECT_LT(d.size(), 200u);
  DecodeConfig dc;
  dc.seqlens.assign(100, 7);
  EXPECT_NE(dc.describe().find("(100 entries, sum 700)"), std::string::npos) << dc.describe();
}

// Host bytes a case holds (the CLI refuses a problem larger than the machine by this count, before allocating):
// exactly the tensors' storage for attention and decode, at least it for paged (which also stages the cache).
double storage(const std::vector<const OwnedTensor*>& tensors) {
  double bytes = 0;
  for (const OwnedTensor* t : tensors)
    if (t->defined()) bytes += static_cast<double>(t->raw_bytes().size());
  return bytes;
}

TEST(HarnessCases, HostBytesCountTheCase) {
  Rng rng(7);
  AttentionConfig a;
  a.batch = 2, a.seqlen = 5, a.heads = 4, a.kv_heads = 2, a.head_dim = 8, a.v_dim = 6;
  a.gate = a.sink = true;
  a.row_pad = 3;
  for (const DType dtype : {DType::bf16, DType::f32, DType::f64}) {
    a.dtype = dtype;
    const AttentionCase c = AttentionCase::random(a, rng);
    EXPECT_EQ(a.host_bytes(), storage({&c.q, &c.k, &c.v, &c.g, &c.sink, &c.cu_seqlens, &c.o, &c.lse, &c.o_residual,
                                       &c.dout, &c.dq, &c.dk, &c.dv, &c.dg, &c.dsink}))
        << a.describe();
  }
  a.packed = {3, 0, 4};
  const AttentionCase packed = AttentionCase::random(a, rng);
  EXPECT_EQ(a.host_bytes(), storage({&packed.q, &packed.k, &packed.v, &packed.g, &packed.sink, &packed.cu_seqlens,
                                     &packed.o, &packed.lse, &packed.o_residual, &packed.dout, &packed.dq,
                                     &packed.dk, &packed.dv, &packed.dg, &packed.dsink}));

  DecodeConfig d;
  d.gate = d.sink = true;
  d.q_row_pad = 1;
  const DecodeCase dc = DecodeCase::random(d, rng);
  EXPECT_EQ(d.host_bytes(), storage({&dc.q, &dc.k, &dc.v, &dc.cu_seqlens, &dc.g, &dc.sink, &dc.o}));

  PagedConfig p;
  p.fp8 = true;
  p.scale_mode = detail::ScaleMode::per_token;
  p.sink = true;
  const PagedCase pc = PagedCase::random(p, rng);
  EXPECT_GE(p.host_bytes(), storage({&pc.q, &pc.k_cache, &pc.v_cache, &pc.block_table, &pc.seq_lens_k,
                                     &pc.cu_seqlens_q, &pc.sink, &pc.k_scale, &pc.v_scale, &pc.o}));
}

// Sizes far beyond any machine still give a count (double, no int64 overflow) rather than wrapping around.
TEST(HarnessCases, HostBytesOfAbsurdSizesStayPositive) {
  AttentionConfig a;
  a.batch = int64_t{1} << 40, a.seqlen = int64_t{1} << 40, a.heads = 1 << 20;
  EXPECT_GT(a.host_bytes(), 1e30);
}

}  // namespace
}  // namespace flashgate::harness
