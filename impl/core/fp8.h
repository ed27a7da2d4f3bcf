// 8-bit floating-point values and rows: the OCP 8-bit formats E4M3
// (the "FN" variant: no infinities, one NaN pattern per sign, largest finite 448) and E5M2 (IEEE-
// like: infinities and NaNs, largest finite 57344), and rows of them under one per-row scale.
//
// Conversions round to nearest, ties to even (or stochastically with given random bits,
// EncodeFp8Stochastic), and saturate: a finite value beyond the largest
// finite one, or an infinity, becomes the largest finite value of its sign (OCP's saturating
// mode), so an update that overshoots never turns a weight into an infinity or a NaN; a NaN stays
// a NaN. They are integer bit manipulation only: the same bits on every CPU, rounding mode, thread
// count and device (host/device functions).
//
// A row's scale is a power of two (as the OCP Microscaling formats' E8M0 scales are, but one per
// row): the smallest one with which the row's largest finite magnitude rounds to at most the
// format's largest finite value. Scaling by a power of two is exact, so a row's only rounding is
// the conversion of each value, and decoding is exact in fp32. Per value, the decoded row differs
// from the encoded one by at most half a unit in the last place: |decoded - x| <= max(2^-(m+1) |x|,
// 2^(emin-m-1) scale) with m mantissa bits and emin the smallest normal exponent (E4M3: 2^-4 |x|
// or 2^-10 scale; E5M2: 2^-3 |x| or 2^-17 scale). Non-finite values do not take part in the
// scale: a NaN stays a NaN, an infinity saturates.
#pragma once

#include <cstdint>
#include <cstring>

#include "impl/core/dtype.h"
#include "impl/core/host_device.h"

namespace shardrec {

enum class Fp8Kind : int32_t { kE4M3 = 0, kE5M2 = 1 };

// The kind of an FP8 weight dtype (DType::kFp8E4M3 or kFp8E5M2, which its caller has checked).
constexpr Fp8Kind Fp8KindOf(DType t) {
  return t == DType::kFp8E5M2 ? Fp8Kind::kE5M2 : Fp8Kind::kE4M3;
}

// A row of `dim` FP8 values: its fp32 scale, then one code a value.
inline constexpr uint64_t kFp8HeaderBytes = 4;
// Scales a row may carry: powers of two within [2^-126, 2^kFp8MaxScaleExp], so that no decoded
// value overflows fp32 (a stored row with any other scale is corrupt).
inline constexpr int kFp8MinScaleExp = -126;
inline constexpr int kFp8MaxScaleExp = 111;

namespace fp8_detail {

struct Params {
  int mant_bits;      // m
  int bias;           // exponent bias
  uint32_t max_bits;  // fp32 bits of the largest finite value
  uint8_t max_code;   // its code (positive)
  uint8_t nan_code;   // the NaN written for a NaN (positive)
  int max_exp;        // the largest finite value is in [2^max_exp, 2^(max_exp+1))
  // fp32 mantissa field of fit x 2^-max_exp, where `fit` (the largest finite value plus half its
  // unit in the last place) is the largest magnitude that converts to the largest finite value
  // by rounding rather than by saturating.
  uint32_t fit_frac_bits;
};

SHARDREC_HD constexpr Params ParamsOf(Fp8Kind k) {
  // E4M3: 448 = 1.75 x 2^8, code 0x7E (0x7F is NaN), fit 464 = 1.8125 x 2^8. E5M2: 57344 =
  // 1.75 x 2^15, code 0x7B (0x7C is infinity, 0x7D-0x7F NaN), fit 61440 = 1.875 x 2^15.
  return k == Fp8Kind::kE4M3 ? Params{3, 7, 0x43E00000u, 0x7E, 0x7F, 8, 0x680000u}
                             : Params{2, 15, 0x47600000u, 0x7B, 0x7F, 15, 0x700000u};
}

SHARDREC_HD uint32_t Bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof(u));
  return u;
}
SHARDREC_HD float Float(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof(f));
  return f;
}

// fp32 bits of the format's smallest normal value: magnitudes from it up take NormalCode.
SHARDREC_HD constexpr uint32_t MinNormalBits(const Params& p) {
  return static_cast<uint32_t>(127 + 1 - p.bias) << 23;
}

// EncodeFp8's code (without the sign) of a magnitude `a` (fp32 bits, sign cleared) at least
// MinNormalBits: NaN, saturated or rounded to a normal code. Branch-free (selects only), so a
// row's loop over it vectorizes; the same steps as EncodeFp8's normal branch.
SHARDREC_HD uint32_t NormalCode(const Params& p, uint32_t a) {
  const int shift = 23 - p.mant_bits;
  uint32_t r = a + ((1u << (shift - 1)) - 1u) + ((a >> shift) & 1u);
  r = (r >> shift) - (static_cast<uint32_t>(127 - p.bias) << p.mant_bits);
  r = a >= p.max_bits ? p.max_code : r;
  return a > 0x7F800000u ? p.nan_code : r;
}

// The first steps EncodeFp8 and EncodeFp8Stochastic share: x's sign and magnitude, its code
// where the rounding cannot matter (a NaN, a magnitude that saturates), else whether its target
// is a normal code (magnitude at least MinNormalBits) or a subnormal one, which the caller rounds.
struct Prologue {
  uint8_t sign;
  uint32_t a;   // fp32 bits of |x|
  int biased;   // fp32's biased exponent of |x|, 0 for its subnormals
  bool done;    // `code` is the result
  bool normal;  // not done, and the target is a normal code
  uint8_t code;
};

SHARDREC_HD Prologue Classify(const Params& p, float x) {
  const uint32_t u = Bits(x);
  Prologue r{};
  r.sign = static_cast<uint8_t>((u >> 24) & 0x80u);
  r.a = u & 0x7FFFFFFFu;
  r.biased = static_cast<int>(r.a >> 23);
  if (r.a > 0x7F800000u) {
    r.done = true;
    r.code = static_cast<uint8_t>(r.sign | p.nan_code);
  } else if (r.a >= p.max_bits) {
    r.done = true;
    r.code = static_cast<uint8_t>(r.sign | p.max_code);
  } else {
    r.normal = r.biased - 127 >= 1 - p.bias;
  }
  return r;
}

}  // namespace fp8_detail

// fp32 -> FP8, round to nearest even, saturating.
SHARDREC_HD uint8_t EncodeFp8(Fp8Kind kind, float x) {
  const fp8_detail::Params p = fp8_detail::ParamsOf(kind);
  const fp8_detail::Prologue pr = fp8_detail::Classify(p, x);
  if (pr.done) return pr.code;
  // Below max_bits nothing rounds past the largest finite value.
  if (pr.normal) return static_cast<uint8_t>(pr.sign | fp8_detail::NormalCode(p, pr.a));
  const uint8_t sign = pr.sign;
  const uint32_t a = pr.a;
  const int biased = pr.biased;
  const int emin = 1 - p.bias;
  // A subnormal target: the count of units 2^(emin-m), rounded; a count of 2^m is the smallest
  // normal, whose code is the same number.
  const uint32_t mant = (a & 0x7FFFFFu) | (biased != 0 ? 0x800000u : 0u);
  const int e = biased != 0 ? biased : 1;          // value = mant x 2^(e - 150)
  const int k = (emin - p.mant_bits) - (e - 150);  // > 0: the bits below one unit
  if (k > 25) return sign;                         // below a quarter unit
  uint32_t q = mant >> k;
  const uint32_t rem = mant & ((1u << k) - 1u);
  const uint32_t half = 1u << (k - 1);
  q += (rem > half || (rem == half && (q & 1u))) ? 1u : 0u;
  return static_cast<uint8_t>(sign | q);
}

// fp32 -> FP8, rounded stochastically with the 32 random bits `bits`: x lies between two adjacent
// codes lo <= |x| < hi, and rounds away from zero iff frac + bits x 2^-32 >= 1, where frac =
// (|x| - lo) / (hi - lo): exact for every normal target and every subnormal one from 2^-8 of
// the smallest unit up (x's fp32 unit is then at least 2^-32 of the code's); below that frac
// is cut to a multiple of 2^-32. With uniform bits the decoded value's expectation is
// x, and it is one of the two codes around x: |decoded - x| < one unit in the last place. A code
// is never rounded past the largest finite value: magnitudes from it up saturate as in
// EncodeFp8, a NaN stays a NaN. A value that is a code keeps it whatever the bits.
SHARDREC_HD uint8_t EncodeFp8Stochastic(Fp8Kind kind, float x, uint32_t bits) {
  const fp8_detail::Params p = fp8_detail::ParamsOf(kind);
  const fp8_detail::Prologue pr = fp8_detail::Classify(p, x);
  if (pr.done) return pr.code;
  const uint8_t sign = pr.sign;
  const uint32_t a = pr.a;
  const int biased = pr.biased;
  const int emin = 1 - p.bias;
  if (pr.normal) {
    // The fraction is the low `shift` bits: adding the top `shift` random bits carries into the
    // kept bits exactly when frac + bits x 2^-32 >= 1 (as FloatToBFloat16Stochastic does).
    const int shift = 23 - p.mant_bits;
    uint32_t r = (a + (bits >> (32 - shift))) >> shift;
    r -= static_cast<uint32_t>(127 - p.bias) << p.mant_bits;
    return static_cast<uint8_t>(sign | (r < p.max_code ? r : p.max_code));
  }
  // A subnormal target (EncodeFp8's units): the count of whole units, plus one on the carry of
  // the fraction at 32-bit resolution (the fraction's bits below it dropped, which the carry
  // test does not need: frac + b 2^-32 >= 1 holds for integer b iff it holds for frac cut).
  const uint32_t mant = (a & 0x7FFFFFu) | (biased != 0 ? 0x800000u : 0u);
  const int e = biased != 0 ? biased : 1;
  const int k = (emin - p.mant_bits) - (e - 150);  // >= 1
  const uint32_t q = k >= 24 ? 0u : mant >> k;     // mant < 2^24
  const uint32_t rem = k >= 24 ? mant : mant & ((1u << k) - 1u);
  const uint64_t frac32 = k <= 32 ? static_cast<uint64_t>(rem) << (32 - k)
                                  : (k - 32 < 32 ? static_cast<uint64_t>(rem >> (k - 32)) : 0u);
  const uint32_t up = static_cast<uint64_t>(bits) + frac32 >= (uint64_t{1} << 32) ? 1u : 0u;
  return static_cast<uint8_t>(sign | (q + up));
}

// FP8 -> fp32, exact.
SHARDREC_HD float DecodeFp8(Fp8Kind kind, uint8_t c) {
  const fp8_detail::Params p = fp8_detail::ParamsOf(kind);
  const uint32_t sign = static_cast<uint32_t>(c & 0x80u) << 24;
  const uint32_t exp_bits = 7 - p.mant_bits;
  const uint32_t exp = (c & 0x7Fu) >> p.mant_bits;
  const uint32_t mant = c & ((1u << p.mant_bits) - 1u);
  if (kind == Fp8Kind::kE4M3 && (c & 0x7Fu) == 0x7Fu) return fp8_detail::Float(sign | 0x7FC00000u);
  if (kind == Fp8Kind::kE5M2 && exp == (1u << exp_bits) - 1u) {
    return fp8_detail::Float(sign | (mant == 0 ? 0x7F800000u : 0x7FC00000u));
  }
  if (exp == 0) {
    // mant x 2^(1 - bias - m): a small integer times a power of two, exact.
    const float unit =
        fp8_detail::Float(static_cast<uint32_t>(127 + 1 - p.bias - p.mant_bits) << 23);
    return fp8_detail::Float(sign | fp8_detail::Bits(static_cast<float>(mant) * unit));
  }
  return fp8_detail::Float(sign | ((exp - p.bias + 127) << 23) | (mant << (23 - p.mant_bits)));
}

// The exponent of the scale of a row whose largest finite magnitude is `amax` (0 for an empty or
// all-zero row): the smallest k with which amax / 2^k rounds to at most the largest finite value
// (so nothing saturates), clamped to the scales a row may carry. Deciding on the rounded
// magnitude makes encoding idempotent: a decoded row encodes to the same bytes.
SHARDREC_HD int Fp8ScaleExp(Fp8Kind kind, float amax) {
  const fp8_detail::Params p = fp8_detail::ParamsOf(kind);
  const uint32_t a = fp8_detail::Bits(amax) & 0x7FFFFFFFu;
  if (a == 0 || a >= 0x7F800000u) return 0;
  int e;  // amax = frac x 2^e, frac in [1, 2) (fp32 subnormals: the leading bit found below)
  uint32_t frac;
  if ((a >> 23) != 0) {
    e = static_cast<int>(a >> 23) - 127;
    frac = a & 0x7FFFFFu;
  } else {
    e = -127;
    frac = a;
    while ((frac & 0x800000u) == 0) {
      frac <<= 1;
      --e;
    }
    frac &= 0x7FFFFFu;
  }
  int k = e - p.max_exp + (frac > p.fit_frac_bits ? 1 : 0);
  if (k < kFp8MinScaleExp) k = kFp8MinScaleExp;
  if (k > kFp8MaxScaleExp) k = kFp8MaxScaleExp;
  return k;
}

SHARDREC_HD float Fp8ScaleOf(int exp) {
  return fp8_detail::Float(static_cast<uint32_t>(exp + 127) << 23);
}

// Encodes `x[0..dim)` into `row` (kFp8HeaderBytes + dim bytes): the scale, then the codes,
// each EncodeFp8's. Written as loops without branches (the finite magnitudes' largest as the
// largest of their bits, which order as the values do; every code by NormalCode) and a fix-up
// of the values below the smallest normal, so that training's per-update encoding of whole rows
// vectorizes.
SHARDREC_HD void EncodeFp8Row(Fp8Kind kind, const float* x, int64_t dim, uint8_t* row) {
  uint32_t amax_bits = 0;
  for (int64_t i = 0; i < dim; ++i) {
    const uint32_t bits = fp8_detail::Bits(x[i]) & 0x7FFFFFFFu;
    const uint32_t finite = bits < 0x7F800000u ? bits : 0u;  // finite values only
    amax_bits = finite > amax_bits ? finite : amax_bits;
  }
  const int k = Fp8ScaleExp(kind, fp8_detail::Float(amax_bits));
  const float scale = Fp8ScaleOf(k);
  const float inv = Fp8ScaleOf(-k);  // exact: -k is within [-111, 126]
  memcpy(row, &scale, sizeof(scale));
  uint8_t* codes = row + kFp8HeaderBytes;
  const fp8_detail::Params p = fp8_detail::ParamsOf(kind);
  const uint32_t min_normal = fp8_detail::MinNormalBits(p);
  for (int64_t i = 0; i < dim; ++i) {
    const uint32_t u = fp8_detail::Bits(x[i] * inv);
    codes[i] =
        static_cast<uint8_t>(((u >> 24) & 0x80u) | fp8_detail::NormalCode(p, u & 0x7FFFFFFFu));
  }
  for (int64_t i = 0; i < dim; ++i) {
    const float y = x[i] * inv;
    if ((fp8_detail::Bits(y) & 0x7FFFFFFFu) < min_normal) codes[i] = EncodeFp8(kind, y);
  }
}

// EncodeFp8Row with each value rounded by EncodeFp8Stochastic, value i with bits_of(i) (a
// callable int64_t -> uint32_t): the same scale (a function of the row's values alone), so a
// decoded row encodes to the same bytes whatever the bits. Per value |decoded - x| < max(2^-m
// |x|, 2^(emin-m) scale), twice EncodeFp8Row's bound (E4M3: 2^-3 |x| or 2^-9 scale; E5M2: 2^-2
// |x| or 2^-16 scale), with expectation x below the largest finite value times the scale.
template <class BitsOf>
SHARDREC_HD void EncodeFp8RowStochastic(Fp8Kind kind, const float* x, int64_t dim, uint8_t* row,
                                        BitsOf bits_of) {
  uint32_t amax_bits = 0;
  for (int64_t i = 0; i < dim; ++i) {
    const uint32_t bits = fp8_detail::Bits(x[i]) & 0x7FFFFFFFu;
    const uint32_t finite = bits < 0x7F800000u ? bits : 0u;
    amax_bits = finite > amax_bits ? finite : amax_bits;
  }
  const int k = Fp8ScaleExp(kind, fp8_detail::Float(amax_bits));
  const float scale = Fp8ScaleOf(k);
  const float inv = Fp8ScaleOf(-k);
  memcpy(row, &scale, sizeof(scale));
  uint8_t* codes = row + kFp8HeaderBytes;
  for (int64_t i = 0; i < dim; ++i) codes[i] = EncodeFp8Stochastic(kind, x[i] * inv, bits_of(i));
}

// Decodes a row written by EncodeFp8Row into `out[0..dim)`; exact.
SHARDREC_HD void DecodeFp8Row(Fp8Kind kind, const uint8_t* row, int64_t dim, float* out) {
  float scale;
  memcpy(&scale, row, sizeof(scale));
  const uint8_t* codes = row + kFp8HeaderBytes;
  for (int64_t i = 0; i < dim; ++i) out[i] = DecodeFp8(kind, codes[i]) * scale;
}

// Whether a stored row's scale is one EncodeFp8Row writes (a power of two in range): readers of
// files check it before decoding.
SHARDREC_HD bool IsValidFp8Scale(float scale) {
  const uint32_t u = fp8_detail::Bits(scale);
  if ((u & 0x807FFFFFu) != 0) return false;  // positive, no mantissa bits
  const int e = static_cast<int>(u >> 23) - 127;
  return e >= kFp8MinScaleExp && e <= kFp8MaxScaleExp;
}

}  // namespace shardrec
