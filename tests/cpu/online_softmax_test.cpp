// SoftmaxRow's lazy rescale against what the backward asks of the forward's o (SPEC §7's peaked rows). The forward
// rounds each probability to bf16 as P V's operand and divides by the fp32 sum; the backward takes D = o·do from o,
// and a key that holds nearly its row's mass gets dS = P (dP - D), which cancels down to D's error. So the rounding
// of the key the lazy rule leaves above the running max must stay small against the mass of the keys before it.
#include <gtest/gtest.h>

#include <cmath>

#include "common/host_dtype.h"
#include "cuda/common/online_softmax.h"

namespace flashgate::cuda {
namespace {

double to_bf16(double x) { return host::bf16_to_double(host::double_to_bf16(x)); }

// A row whose first key scored 0 and whose next key scores d above it (log2 units), d from 1/64 to 16. With do·v
// 1 for the later key and 0 for the earlier, the later key's dS errs by (round(P_late) - P_late) / P_early of itself:
// at most 2^-7, bf16's rounding of a value below 4 (half its spacing there), which a slack of one or two binades
// keeps and three or more do not.
TEST(OnlineSoftmax, LazyRescaleKeepsAPeakedKeysGradient) {
  for (int step = 1; step <= 16 * 64; ++step) {
    const float d = static_cast<float>(step) / 64.f;
    SoftmaxRow row;
    row.rescale_lazily(0.f);  // the first key sets the max
    float p_early = std::exp2(0.f - row.exp_offset());
    p_early *= row.rescale_lazily(d);
    const float p_late = std::exp2(d - row.exp_offset());
    const double err = std::fabs(to_bf16(p_late) - static_cast<double>(p_late)) / p_early;
    ASSERT_LE(err, std::ldexp(1.0, -7)) << "d = " << d << " (P_late " << p_late << ", P_early " << p_early << ")";
  }
}

TEST(OnlineSoftmax, LazyRescaleMovesOnlyPastTheSlack) {
  SoftmaxRow row;
  row.rescale_lazily(3.f);  // nothing seen: the max is set
  EXPECT_EQ(row.max2, 3.f);
  EXPECT_EQ(row.rescale_lazily(3.f + SoftmaxRow::kLazySlack), 1.f);  // within the slack: kept
  EXPECT_EQ(row.max2, 3.f);
  row.sum = 1.f;
  const float factor = row.rescale_lazily(3.f + SoftmaxRow::kLazySlack + 0.5f);
  EXPECT_FLOAT_EQ(factor, std::exp2(-(SoftmaxRow::kLazySlack + 0.5f)));
  EXPECT_FLOAT_EQ(row.sum, factor);
  EXPECT_EQ(row.max2, 3.f + SoftmaxRow::kLazySlack + 0.5f);
}

}  // namespace
}  // namespace flashgate::cuda
