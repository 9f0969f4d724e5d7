// o's rounding residual (common/o_residual.h, ForwardArgs::o_residual): the code recovers a value to 2^-8 of its
// stored ulp in both formats and at every magnitude; the CPU forward writes codes that put o within that of the
// fp64 result; and the arguments' rules (int8, o's shape, fp16 / bf16 outputs only) reject before writing.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "common/host_dtype.h"
#include "common/o_residual.h"
#include "flashgate/error.h"
#include "reference_naive.h"

namespace {

using namespace flashgate;
using harness::AttentionCase;
using harness::AttentionConfig;
using reftest::kCpu;

// One code's unit at an exact value: 2^-8 of the format's ulp in its binade.
double unit(double exact, residual::Format f) {
  int e;
  std::frexp(exact, &e);  // |exact| in [2^(e-1), 2^e)
  return std::ldexp(1.0, e - 1 - f.mantissa_bits - 8);
}

double round_to(double x, residual::Format f) {
  return f.mantissa_bits == 7 ? host::bf16_to_double(host::double_to_bf16(x))
                              : host::half_to_double(host::double_to_half(x));
}

TEST(OResidual, CodesRecoverTheValueToAFractionOfItsUlp) {
  REFTEST_SEEDED_RNG(rng);
  struct Range { residual::Format f; double lo, hi; const char* name; };  // log2 magnitudes drawn
  for (const Range r : {Range{residual::kBf16, -110, 100, "bf16"}, Range{residual::kF16, -14, 15.9, "fp16"}}) {
    SCOPED_TRACE(r.name);
    std::uniform_real_distribution<double> log2_mag(r.lo, r.hi), sign(-1, 1);
    double before = 0, after = 0;
    for (int i = 0; i < 20000; ++i) {
      const float x = static_cast<float>(std::copysign(std::exp2(log2_mag(rng)), sign(rng)));
      const double rounded = round_to(x, r.f);
      const int8_t code = residual::encode(x, static_cast<float>(rounded), r.f);
      ASSERT_GE(code, -127);
      const double fixed = rounded + residual::decode(code, static_cast<float>(rounded), r.f);
      // Half a unit of rounding; within half a unit of a tie (half an ulp away) the code saturates at 127 units.
      ASSERT_LE(std::fabs(fixed - x), unit(x, r.f) * (std::fabs(code) == 127 ? 1.0 : 0.5)) << x;
      before += std::fabs(rounded - x) / std::fabs(x), after += std::fabs(fixed - x) / std::fabs(x);
    }
    EXPECT_LT(after, before / 100);  // ~2^-7 of the error without the code, on average
  }
  EXPECT_EQ(residual::encode(0.f, 0.f, residual::kBf16), 0);
  EXPECT_EQ(residual::decode(5, 0.f, residual::kBf16), 0.f);  // below fp32's normal range: nothing kept
  // Rounded up onto a power of two: the code counts in the binade below.
  const int8_t up = residual::encode(2.f - 0x1p-9f, 2.f, residual::kBf16);
  EXPECT_EQ(up, -64);  // 2^-9 below 2, where a unit is 2^-15 (2^-8 of bf16's ulp on [1, 2))
  EXPECT_EQ(residual::decode(-64, 2.f, residual::kBf16), -64 * std::ldexp(1.f, -15));
  EXPECT_EQ(residual::decode(64, 2.f, residual::kBf16), 64 * std::ldexp(1.f, -14));
  EXPECT_EQ(residual::decode(64, -2.f, residual::kBf16), -64 * std::ldexp(1.f, -14));  // the value's sign
}

TEST(OResidual, CpuForwardWritesTheCodesOfItsFp64Output) {
  REFTEST_SEEDED_RNG(rng);
  for (DType dtype : {DType::bf16, DType::f16})
    for (bool packed : {false, true}) {
      AttentionConfig cfg;
      cfg.dtype = dtype, cfg.heads = 4, cfg.kv_heads = 2, cfg.head_dim = 16, cfg.v_dim = 24, cfg.gate = true;
      cfg.sink = true, cfg.row_pad = packed ? 0 : 3;
      if (packed) cfg.packed = {5, 0, 19};
      else cfg.batch = 2, cfg.seqlen = 21;
      SCOPED_TRACE(cfg.describe());
      AttentionCase c = AttentionCase::random(cfg, rng);
      ASSERT_TRUE(c.o_residual.defined());
      AttentionCase ref = c.to_f64();
      attention_forward(c.forward_args(), kCpu);
      attention_forward(ref.forward_args(), kCpu);
      const std::vector<double> o = c.o.values(), codes = c.o_residual.values(), exact = ref.o.values();
      const residual::Format f = dtype == DType::f16 ? residual::kF16 : residual::kBf16;
      for (size_t i = 0; i < o.size(); ++i) {
        ASSERT_GE(codes[i], -127) << "element " << i << " was not written";
        const double fixed = o[i] + residual::decode(static_cast<int8_t>(codes[i]), static_cast<float>(o[i]), f);
        // Half a unit (one where the code saturates), plus the fp32 rounding of the exact value before it is coded.
        const double units = std::fabs(codes[i]) == 127 ? 1.0 : 0.5;
        if (exact[i] == 0) continue;  // rows without a visible key: o = 0 exactly
        if (f.mantissa_bits == 10 && std::fabs(exact[i]) < 0x1p-14) continue;  // fp16 subnormal: less is kept
        ASSERT_LE(std::fabs(fixed - exact[i]), unit(exact[i], f) * units + std::fabs(exact[i]) * 0x1p-24)
            << "element " << i << ": o " << o[i] << " code " << codes[i] << " exact " << exact[i];
      }
    }
}

TEST(OResidual, ArgumentRulesRejectBeforeWriting) {
  REFTEST_SEEDED_RNG(rng);
  AttentionConfig cfg;
  cfg.batch = 2, cfg.seqlen = 5, cfg.head_dim = 8, cfg.v_dim = 8;
  struct Case { const char* name; DType q_dtype; DType residual_dtype; int64_t v_dim; ErrorKind kind; };
  for (const Case k : {Case{"int16-wide codes", DType::bf16, DType::f16, 8, ErrorKind::wrong_type},
                       Case{"codes of another shape", DType::bf16, DType::i8, 7, ErrorKind::invalid_argument},
                       Case{"an fp32 output", DType::f32, DType::i8, 8, ErrorKind::invalid_argument}}) {
    SCOPED_TRACE(k.name);
    cfg.dtype = k.q_dtype;
    AttentionCase c = AttentionCase::random(cfg, rng);
    c.o_residual = harness::OwnedTensor(k.residual_dtype, {2, 5, cfg.heads, k.v_dim});
    c.poison_outputs();
    const std::vector<unsigned char> o_before = c.o.raw_bytes(), r_before = c.o_residual.raw_bytes();
    for (bool backward : {false, true}) {
      try {
        if (backward) attention_backward(c.backward_args(), kCpu);
        else attention_forward(c.forward_args(), kCpu);
        ADD_FAILURE() << "accepted";
      } catch (const Error& e) {
        EXPECT_EQ(e.argument(), "o_residual") << e.what();
        EXPECT_EQ(e.kind(), k.kind) << e.what();
      }
    }
    EXPECT_EQ(c.o.raw_bytes(), o_before);
    EXPECT_EQ(c.o_residual.raw_bytes(), r_before);
  }
}

}  // namespace
