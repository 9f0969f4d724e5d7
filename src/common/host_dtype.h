// Host-side conversions between the storage formats and double: the CPU reference reads and writes
// every dtype through these, so they are exact (round-to-nearest-even where rounding happens).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "flashgate/tensor.h"

namespace flashgate::host {

inline float bits_to_float(uint32_t b) { float f; std::memcpy(&f, &b, 4); return f; }
inline uint32_t float_to_bits(float f) { uint32_t b; std::memcpy(&b, &f, 4); return b; }

// 2^e for a normal double exponent, built from its bits (exact; faster than ldexp in per-element loops).
inline double pow2(int e) {
  const uint64_t b = static_cast<uint64_t>(e + 1023) << 52;
  double d;
  std::memcpy(&d, &b, 8);
  return d;
}

// IEEE binary16.
inline double half_to_double(uint16_t h) {
  const int sign = h >> 15, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  double mag;
  if (exp == 0) mag = static_cast<double>(man) * pow2(-24);                   // zero / subnormal
  else if (exp == 31) mag = man ? NAN : INFINITY;
  else mag = static_cast<double>(man | 0x400) * pow2(exp - 25);
  return sign ? -mag : mag;
}

inline uint16_t double_to_half(double x) {
  // Round once from double: scale the value onto the half grid and round to nearest even.
  if (std::isnan(x)) return 0x7e00;
  const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  double a = std::fabs(x);
  if (a >= 65520.0) return sign | 0x7c00;  // rounds to infinity
  int e;
  std::frexp(a, &e);                       // a = f * 2^e, f in [0.5, 1)
  int exp = e - 1;                         // a = 1.m * 2^exp
  if (exp < -14) exp = -14;                // subnormal grid
  const double ulp = std::ldexp(1.0, exp - 10);
  double q = std::nearbyint(a / ulp);      // default rounding mode: nearest even
  double r = q * ulp;
  if (r == 0) return sign;
  int re;
  std::frexp(r, &re);
  int rexp = re - 1;
  if (rexp < -14) return sign | static_cast<uint16_t>(q);                      // subnormal
  uint16_t man = static_cast<uint16_t>(std::ldexp(r, -rexp) * 1024.0 - 1024.0);
  return sign | static_cast<uint16_t>((rexp + 15) << 10) | man;
}

// bfloat16: the upper half of a float.
inline double bf16_to_double(uint16_t b) { return bits_to_float(static_cast<uint32_t>(b) << 16); }

inline uint16_t double_to_bf16(double x) {
  if (std::isnan(x)) return 0x7fc0;
  // Two roundings (double -> float -> bf16) must not round twice to nearest: 1 + 2^-8 + 2^-40 would become
  // the tie 1 + 2^-8 and then 1. So double -> float rounds to odd (truncate, set the last bit if inexact),
  // which keeps the information the nearest-even float -> bf16 step needs (float has 16 more bits).
  float f = static_cast<float>(x);
  uint32_t u = float_to_bits(f);
  if (static_cast<double>(f) != x && !std::isinf(x)) {
    if (std::fabs(static_cast<double>(f)) > std::fabs(x)) u -= 1;  // rounded away from zero: step back
    u |= 1;
  }
  u += 0x7fff + ((u >> 16) & 1);
  return static_cast<uint16_t>(u >> 16);
}

// OCP fp8 E4M3 ("e4m3fn"): bias 7, no infinities, S.1111.111 is NaN, max 448.
inline double e4m3_to_double(uint8_t v) {
  const int sign = v >> 7, exp = (v >> 3) & 0xf, man = v & 0x7;
  double mag;
  if (exp == 0xf && man == 0x7) return NAN;
  if (exp == 0) mag = static_cast<double>(man) * pow2(-9);  // subnormal: m/8 * 2^-6
  else mag = static_cast<double>(man | 0x8) * pow2(exp - 10);
  return sign ? -mag : mag;
}

// Nearest-even encoding with saturation to +-448. (torch's float8_e4m3fn cast agrees up to |x| < 480 and
// gives NaN beyond; the harness scales caches into +-448, where both agree.)
inline uint8_t double_to_e4m3(double x) {
  if (std::isnan(x)) return 0x7f;
  const uint8_t sign = std::signbit(x) ? 0x80 : 0;
  double a = std::fabs(x);
  if (a >= 448.0) return sign | 0x7e;
  uint8_t best = 0;
  double best_err = INFINITY;
  for (int code = 0; code < 0x7f; ++code) {  // 127 finite magnitudes: exact search is simplest
    const double err = std::fabs(e4m3_to_double(static_cast<uint8_t>(code)) - a);
    if (err < best_err || (err == best_err && (code & 1) == 0)) { best_err = err; best = static_cast<uint8_t>(code); }
  }
  return sign | best;
}

// Reads element `index` (in elements from `data`) of a floating tensor as double.
inline double load(const void* data, DType t, int64_t index) {
  switch (t) {
    case DType::f16: return half_to_double(static_cast<const uint16_t*>(data)[index]);
    case DType::bf16: return bf16_to_double(static_cast<const uint16_t*>(data)[index]);
    case DType::f32: return static_cast<const float*>(data)[index];
    case DType::f64: return static_cast<const double*>(data)[index];
    case DType::e4m3: return e4m3_to_double(static_cast<const uint8_t*>(data)[index]);
    case DType::i32: return static_cast<const int32_t*>(data)[index];
    case DType::i64: return static_cast<double>(static_cast<const int64_t*>(data)[index]);
    case DType::i8: return static_cast<const int8_t*>(data)[index];
  }
  return NAN;
}

inline void store(void* data, DType t, int64_t index, double x) {
  switch (t) {
    case DType::f16: static_cast<uint16_t*>(data)[index] = double_to_half(x); return;
    case DType::bf16: static_cast<uint16_t*>(data)[index] = double_to_bf16(x); return;
    case DType::f32: static_cast<float*>(data)[index] = static_cast<float>(x); return;
    case DType::f64: static_cast<double*>(data)[index] = x; return;
    case DType::e4m3: static_cast<uint8_t*>(data)[index] = double_to_e4m3(x); return;
    case DType::i32: static_cast<int32_t*>(data)[index] = static_cast<int32_t>(x); return;
    case DType::i64: static_cast<int64_t*>(data)[index] = static_cast<int64_t>(x); return;
    case DType::i8: static_cast<int8_t*>(data)[index] = static_cast<int8_t>(x); return;
  }
}

// Integer element of an index tensor (int32 or int64).
inline int64_t load_index(const void* data, DType t, int64_t index) {
  return t == DType::i64 ? static_cast<const int64_t*>(data)[index]
                         : static_cast<int64_t>(static_cast<const int32_t*>(data)[index]);
}

}  // namespace flashgate::host
