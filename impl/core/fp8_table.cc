// The FP8 decode tables (fp8_table.h), computed at compile time from the formats' fields: a
// code's value is an integer significand times a power of two, both exact in fp32.
#include "impl/core/fp8_table.h"

#include <limits>

namespace shardrec {
namespace {

constexpr float Pow2(int e) {
  float v = 1.0f;
  for (; e > 0; --e) v *= 2.0f;
  for (; e < 0; ++e) v *= 0.5f;
  return v;
}

// m mantissa bits, exponent bias `bias`; E4M3 (fn) has its NaN at all ones and no infinity,
// E5M2 reserves its top exponent for infinities and NaNs as IEEE does.
constexpr float Decode(int mant_bits, int bias, bool fn, int code) {
  const int exp_bits = 7 - mant_bits;
  const int e = (code >> mant_bits) & ((1 << exp_bits) - 1);
  const int m = code & ((1 << mant_bits) - 1);
  const float sign = (code & 0x80) != 0 ? -1.0f : 1.0f;
  const int top = (1 << exp_bits) - 1;
  const float nan = (code & 0x80) != 0 ? -std::numeric_limits<float>::quiet_NaN()
                                       : std::numeric_limits<float>::quiet_NaN();
  if (fn && e == top && m == (1 << mant_bits) - 1) return nan;
  if (!fn && e == top) return m == 0 ? sign * std::numeric_limits<float>::infinity() : nan;
  if (e == 0) return sign * static_cast<float>(m) * Pow2(1 - bias - mant_bits);
  return sign * static_cast<float>((1 << mant_bits) + m) * Pow2(e - bias - mant_bits);
}

constexpr Fp8DecodeTables Tables() {
  Fp8DecodeTables t{};
  for (int c = 0; c < 256; ++c) {
    t.v[0][c] = Decode(3, 7, true, c);
    t.v[1][c] = Decode(2, 15, false, c);
  }
  return t;
}

}  // namespace

constinit const Fp8DecodeTables kFp8Decode = Tables();

}  // namespace shardrec
