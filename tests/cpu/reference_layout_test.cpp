// The CPU reference reads and writes every tensor through its strides: the same problem stored head-major,
// with permuted cache axes, transposed per-token scales or a padded block table gives the same bits as the
// contiguous layout.
#include <gtest/gtest.h>

#include <vector>

#include "reference_naive.h"

namespace {

using namespace flashgate;
using harness::AttentionCase;
using harness::AttentionConfig;
using harness::OwnedTensor;
using harness::PagedCase;
using harness::PagedConfig;
using reftest::expect_identical;
using reftest::kCpu;

// A tensor's logical values stored with its axes in another order (`order[i]` = the logical axis at storage
// position i; the last axis stays last), and a view of that storage with the original shape.
class Permuted {
 public:
  Permuted(const OwnedTensor& t, std::vector<int> order) : rank_(t.view().rank), order_(std::move(order)) {
    const Tensor& v = t.view();
    dtype_ = v.dtype;
    int64_t storage_stride[kMaxRank];
    int64_t stride = 1;
    for (int i = rank_ - 1; i >= 0; --i) storage_stride[i] = stride, stride *= v.shape[order_[i]];
    view_ = v;
    for (int i = 0; i < rank_; ++i) view_.stride[order_[i]] = storage_stride[i];
    bytes_.assign(static_cast<size_t>(stride) * dtype_size(dtype_), 0);
    view_.data = bytes_.data();
    set(t.values());
  }
  const Tensor& view() const { return view_; }

  // Logical-order values in / out.
  void set(const std::vector<double>& values) {
    for_each([&](int64_t logical, int64_t offset) { host_store(offset, values[logical]); });
  }
  std::vector<double> values() const {
    std::vector<double> out(static_cast<size_t>(view_.numel()));
    for_each([&](int64_t logical, int64_t offset) { out[logical] = host_load(offset); });
    return out;
  }

 private:
  template <class F>
  void for_each(F f) const {
    int64_t idx[kMaxRank] = {0, 0, 0, 0};
    for (int64_t e = 0; e < view_.numel(); ++e) {
      int64_t off = 0;
      for (int a = 0; a < rank_; ++a) off += idx[a] * view_.stride[a];
      f(e, off);
      for (int a = rank_ - 1; a >= 0; --a) {
        if (++idx[a] < view_.shape[a]) break;
        idx[a] = 0;
      }
    }
  }
  void host_store(int64_t off, double x) {
    OwnedTensor one(dtype_, {1});
    one.set_values({x});
    std::copy_n(static_cast<const unsigned char*>(one.view().data), dtype_size(dtype_),
                bytes_.data() + off * dtype_size(dtype_));
  }
  double host_load(int64_t off) const {
    OwnedTensor one(dtype_, {1});
    std::copy_n(bytes_.data() + off * dtype_size(dtype_), dtype_size(dtype_),
                static_cast<unsigned char*>(one.view().data));
    return one.values()[0];
  }

  int rank_;
  std::vector<int> order_;
  DType dtype_;
  std::vector<unsigned char> bytes_;
  Tensor view_;
};

TEST(ReferenceLayout, HeadMajorAttentionEqualsTimeMajor) {
  REFTEST_SEEDED_RNG(rng);
  AttentionConfig cfg;
  cfg.dtype = DType::bf16, cfg.batch = 2, cfg.seqlen = 45, cfg.heads = 4, cfg.kv_heads = 2;
  cfg.head_dim = 24, cfg.v_dim = 16, cfg.gate = cfg.sink = true, cfg.window = 30;
  SCOPED_TRACE(cfg.describe());
  AttentionCase c = AttentionCase::random(cfg, rng);
  attention_forward(c.forward_args(), kCpu);
  attention_backward(c.backward_args(), kCpu);

  // [B,T,H,D] tensors stored [B,H,T,D]; [B,T,HQ] ones (g, lse, dg) keep their order (heads are their last,
  // contiguous axis) in fresh storage.
  const std::vector<int> bhtd = {0, 2, 1, 3}, same = {0, 1, 2};
  Permuted q(c.q, bhtd), k(c.k, bhtd), v(c.v, bhtd), dout(c.dout, bhtd), g(c.g, same);
  Permuted o(c.o, bhtd), lse(c.lse, same), dq(c.dq, bhtd), dk(c.dk, bhtd), dv(c.dv, bhtd), dg(c.dg, same);
  for (Permuted* out : {&o, &lse, &dq, &dk, &dv, &dg}) out->set(std::vector<double>(out->view().numel(), NAN));
  ForwardArgs fa = c.forward_args();
  fa.q = q.view(), fa.k = k.view(), fa.v = v.view(), fa.g = g.view(), fa.o = o.view(), fa.lse = lse.view();
  attention_forward(fa, kCpu);
  expect_identical("o", o.values(), c.o.values());
  expect_identical("lse", lse.values(), c.lse.values());
  BackwardArgs ba = c.backward_args();
  ba.q = q.view(), ba.k = k.view(), ba.v = v.view(), ba.g = g.view(), ba.o = o.view(), ba.lse = lse.view();
  ba.dout = dout.view(), ba.dq = dq.view(), ba.dk = dk.view(), ba.dv = dv.view(), ba.dg = dg.view();
  attention_backward(ba, kCpu);
  expect_identical("dq", dq.values(), c.dq.values());
  expect_identical("dk", dk.values(), c.dk.values());
  expect_identical("dv", dv.values(), c.dv.values());
  expect_identical("dg", dg.values(), c.dg.values());
}

TEST(ReferenceLayout, PermutedPagedCacheScalesAndTable) {
  REFTEST_SEEDED_RNG(rng);
  PagedConfig cfg;
  cfg.dtype = DType::bf16, cfg.fp8 = true, cfg.scale_mode = detail::ScaleMode::per_token, cfg.token_spread = 20;
  cfg.context_lens = {70, 3, 33}, cfg.query_lens = {6, 1, 33}, cfg.heads = 4, cfg.kv_heads = 2;
  cfg.head_dim = 40, cfg.v_dim = 24, cfg.sink = true;
  SCOPED_TRACE(cfg.describe());
  PagedCase c = PagedCase::random(cfg, rng);
  paged_attention(c.args(), kCpu);
  const std::vector<double> want = c.o.values();

  Permuted k_cache(c.k_cache, {0, 2, 1, 3}), v_cache(c.v_cache, {0, 2, 1, 3});  // [NB,H,BS,D] storage
  Permuted k_scale(c.k_scale, {1, 0, 2}), v_scale(c.v_scale, {1, 0, 2});        // [H,NB,BS] storage
  // The block table as the first columns of a wider table.
  const int64_t N = c.block_table.view().shape[0], M = c.block_table.view().shape[1];
  std::vector<int32_t> wide(N * (M + 3), -7);
  const std::vector<double> table = c.block_table.values();
  for (int64_t n = 0; n < N; ++n)
    for (int64_t b = 0; b < M; ++b) wide[n * (M + 3) + b] = static_cast<int32_t>(table[n * M + b]);
  PagedArgs a = c.args();
  a.k_cache = k_cache.view(), a.v_cache = v_cache.view(), a.k_scale = k_scale.view(), a.v_scale = v_scale.view();
  a.block_table = make_strided_tensor(wide.data(), DType::i32, {N, M}, {M + 3, 1});
  c.o.poison();
  paged_attention(a, kCpu);
  expect_identical("o", c.o.values(), want);
}

}  // namespace
