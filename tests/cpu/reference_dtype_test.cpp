// The storage conversions the CPU reference reads and writes through (common/host_dtype.h): fp8 e4m3 decoding
// of all 256 codes against the OCP definition, f16 / bf16 decoding of all 65536 codes against independent
// formulas and their round trips, and every encoder's rounding (nearest, ties to even, one rounding only).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "common/host_dtype.h"
#include "reference_naive.h"

namespace {

using namespace flashgate;

bool same_value(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return a == b && std::signbit(a) == std::signbit(b);
}

TEST(ReferenceDtype, E4m3AllCodesMatchOcp) {
  for (int code = 0; code < 256; ++code) {
    const uint8_t c = static_cast<uint8_t>(code);
    EXPECT_TRUE(same_value(host::e4m3_to_double(c), reftest::ocp_e4m3(c))) << "code 0x" << std::hex << code;
  }
  // Hand-checked values of the OCP table.
  EXPECT_TRUE(std::isnan(host::e4m3_to_double(0x7f)));
  EXPECT_TRUE(std::isnan(host::e4m3_to_double(0xff)));
  EXPECT_EQ(host::e4m3_to_double(0x7e), 448.0);
  EXPECT_EQ(host::e4m3_to_double(0xfe), -448.0);
  EXPECT_EQ(host::e4m3_to_double(0x01), std::ldexp(1.0, -9));  // smallest subnormal
  EXPECT_EQ(host::e4m3_to_double(0x07), 7 * std::ldexp(1.0, -9));
  EXPECT_EQ(host::e4m3_to_double(0x08), std::ldexp(1.0, -6));  // smallest normal
  EXPECT_EQ(host::e4m3_to_double(0x38), 1.0);
  EXPECT_EQ(host::e4m3_to_double(0x78), 256.0);  // exponent 15 is a normal binade (no infinities)
  EXPECT_TRUE(same_value(host::e4m3_to_double(0x80), -0.0));
  EXPECT_EQ(host::e4m3_to_double(0x00), 0.0);
}

TEST(ReferenceDtype, E4m3EncodeRoundTripsAndRounds) {
  for (int code = 0; code < 256; ++code) {
    const uint8_t c = static_cast<uint8_t>(code);
    const double x = host::e4m3_to_double(c);
    if (std::isnan(x)) EXPECT_TRUE(std::isnan(host::e4m3_to_double(host::double_to_e4m3(x))));
    else EXPECT_EQ(host::double_to_e4m3(x), c) << "code 0x" << std::hex << code;
  }
  EXPECT_EQ(host::double_to_e4m3(1.0625), 0x38);  // tie between 1 (even) and 1.125: to even
  EXPECT_EQ(host::double_to_e4m3(1.1875), 0x3a);  // tie between 1.125 and 1.25 (even)
  EXPECT_EQ(host::double_to_e4m3(1.0626), 0x39);
  EXPECT_EQ(host::double_to_e4m3(1000.0), 0x7e);  // saturates
  EXPECT_EQ(host::double_to_e4m3(-1000.0), 0xfe);
}

double ref_half(uint16_t h) {  // IEEE binary16 from its fields, written independently
  const int sign = h >> 15, exponent = (h >> 10) & 31, mantissa = h & 1023;
  double m;
  if (exponent == 31) m = mantissa ? std::nan("") : INFINITY;
  else if (exponent == 0) m = mantissa * std::pow(2.0, -24);
  else m = (1024 + mantissa) * std::pow(2.0, exponent - 25);
  return sign ? -m : m;
}

double ref_bf16(uint16_t b) {  // the upper half of a binary32
  const uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

TEST(ReferenceDtype, HalfAndBf16AllCodesDecodeAndRoundTrip) {
  for (uint32_t code = 0; code < 65536; ++code) {
    const uint16_t c = static_cast<uint16_t>(code);
    const double h = host::half_to_double(c), b = host::bf16_to_double(c);
    ASSERT_TRUE(same_value(h, ref_half(c))) << "f16 code " << code;
    ASSERT_TRUE(same_value(b, ref_bf16(c))) << "bf16 code " << code;
    if (std::isnan(h)) ASSERT_TRUE(std::isnan(host::half_to_double(host::double_to_half(h))));
    else ASSERT_EQ(host::double_to_half(h), c) << "f16 code " << code;
    if (std::isnan(b)) ASSERT_TRUE(std::isnan(host::bf16_to_double(host::double_to_bf16(b))));
    else ASSERT_EQ(host::double_to_bf16(b), c) << "bf16 code " << code;
  }
}

// An encoder rounds x to nearest, ties to even: no neighbouring code is nearer, and a tie picks the even code.
template <class Encode, class Decode>
void expect_nearest_even(const char* what, double x, Encode encode, Decode decode) {
  const uint16_t c = encode(x);
  const double v = decode(c), err = std::fabs(v - x);
  if (std::isinf(v)) return;  // overflow handled by the hand checks
  for (int step : {-1, 1}) {
    const uint16_t n = static_cast<uint16_t>(c + step);
    const double w = decode(n);
    if (std::isnan(w) || std::signbit(w) != std::signbit(v) || (n & 0x7fff) == 0x7fff) continue;
    const double other = std::fabs(w - x);
    ASSERT_LE(err, other) << what << ": " << x << " encoded as " << v << " but " << w << " is nearer";
    if (err == other) ASSERT_EQ(c & 1, 0) << what << ": tie at " << x << " not rounded to even";
  }
}

TEST(ReferenceDtype, EncodersRoundOnceToNearestEven) {
  const uint64_t seed = harness::fresh_seed();
  SCOPED_TRACE("FLASHGATE_SEED=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<uint32_t> code(0, 0xffff);
  std::uniform_int_distribution<int> tiny(20, 60);
  auto half = [](double x) { return host::double_to_half(x); };
  auto bf16 = [](double x) { return host::double_to_bf16(x); };
  auto half_dec = [](uint16_t c) { return host::half_to_double(c); };
  auto bf16_dec = [](uint16_t c) { return host::bf16_to_double(c); };
  for (int i = 0; i < 200000; ++i) {
    // Points at, just above and just below the midpoint of two neighbouring codes.
    const uint16_t c = static_cast<uint16_t>(code(rng));
    for (auto [enc, dec, name] : {std::tuple{+half, +half_dec, "f16"}, std::tuple{+bf16, +bf16_dec, "bf16"}}) {
      const double a = dec(c), b = dec(static_cast<uint16_t>(c + 1));
      if (!std::isfinite(a) || !std::isfinite(b) || std::signbit(a) != std::signbit(b)) continue;
      const double mid = (a + b) / 2, nudge = std::fabs(mid) * std::ldexp(1.0, -tiny(rng));
      for (double x : {mid, mid + nudge, mid - nudge}) expect_nearest_even(name, x, enc, dec);
    }
    if (HasFatalFailure()) return;
  }
  // The double-rounding trap: just above a bf16 tie, a double -> float -> bf16 chain lands on the tie.
  EXPECT_EQ(host::double_to_bf16(1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -40)), 0x3f81);
  EXPECT_EQ(host::double_to_bf16(1.0 + std::ldexp(1.0, -8)), 0x3f80);
  EXPECT_EQ(host::double_to_bf16(-(1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -40))), 0xbf81);
  EXPECT_EQ(host::double_to_half(65519.0), 0x7bff);  // below the overflow midpoint
  EXPECT_EQ(host::double_to_half(65520.0), 0x7c00);  // the midpoint rounds to even: infinity
  EXPECT_EQ(host::double_to_bf16(1e39), 0x7f80);
  EXPECT_EQ(host::double_to_half(std::ldexp(1.0, -25)), 0x0000);  // half the smallest subnormal: to even (0)
  EXPECT_EQ(host::double_to_half(std::ldexp(1.5, -25)), 0x0001);
}

}  // namespace
