// Internal: FP8 rows (core/fp8.h's layout: the row's fp32 power-of-two scale, then one code a
// value) decoded into and encoded from fp32 in the registers of a level's vector type I, for the
// fused backward (isa/fused_rows_body.h) and the Fp8Row* entry points (isa/fused_rows.h). The
// bits are core/fp8.h's DecodeFp8Row / EncodeFp8Row exactly: integer bit manipulation and exact
// float operations (a multiply by a power of two, a small integer converted) only, so nothing
// depends on the rounding mode; the one branch on values skips work whose result is unused. fp8.h's
// functions are not called here (their inline copies built for a wide instruction set could stand
// in for the baseline's at link time); only its constants are read, at compile time.
//
// I provides, besides what fused_rows_body.h uses: IReg / IMask (32-bit integer lanes and a
// comparison's result), AsInt, AsFloat, ISet1, IAnd, IOr, IAdd, ISub, Srl<n>, Sll<n>, IGt and
// IMax (signed), IEq, ISelect(m, a, b) (a where m holds), Any(m), CvtI32, ILoad, IStore,
// LoadBytes / StoreBytes (kWidth bytes to and from the lanes' low bytes).
#pragma once

#include <cstdint>
#include <utility>

#include "impl/core/fp8.h"

namespace shardrec::embedding::kernels::isa {
namespace {

// The format's constants (core/fp8.h's, evaluated at compile time).
template <Fp8Kind kKind>
struct Fp8Format {
  static constexpr fp8_detail::Params kP = fp8_detail::ParamsOf(kKind);
  static constexpr int kMant = kP.mant_bits;
  static constexpr int kShift = 23 - kMant;  // fp32 mantissa bits below the format's
  static constexpr uint32_t kMinNormal = fp8_detail::MinNormalBits(kP);
  static constexpr int kEmin = 1 - kP.bias;
  // fp32 bits of 2^e (e within fp32's normal exponents).
  static constexpr uint32_t Pow2Bits(int e) { return static_cast<uint32_t>(e + 127) << 23; }
  // The magnitude a subnormal target rounds up from: a value of |bits| greater than
  // Threshold(i) takes at least code i + 1. It is the fp32 bits of the midpoint (i + 1/2) units
  // (2^(emin - m) each); an odd i less one, as a tie there goes up to the even i + 1.
  static constexpr uint32_t Threshold(int i) {
    const uint32_t odd = static_cast<uint32_t>(2 * i + 1);  // the midpoint is odd x 2^(emin-m-1)
    int msb = 0;
    while ((odd >> (msb + 1)) != 0) ++msb;
    const uint32_t bits = Pow2Bits(kEmin - kMant - 1 + msb) | ((odd - (1u << msb)) << (23 - msb));
    return bits - static_cast<uint32_t>(i & 1);
  }
};

// One register of codes (lanes 0..255) decoded and multiplied by the row's scale: the bits of
// kFp8Decode's entry times the scale (DecodeFp8 values, NaNs as 0x7FC00000 with the code's sign).
template <class I, Fp8Kind kKind>
typename I::Reg DecodeFp8Reg(typename I::IReg c, typename I::Reg scale) {
  using F = Fp8Format<kKind>;
  using IReg = typename I::IReg;
  const IReg sign = I::template Sll<24>(I::IAnd(c, I::ISet1(0x80u)));
  const IReg mag = I::IAnd(c, I::ISet1(0x7Fu));
  // A normal code: its exponent and mantissa fields moved into fp32's, the exponent rebiased.
  const IReg normal = I::IAdd(I::template Sll<F::kShift>(mag),
                              I::ISet1(static_cast<uint32_t>(127 - F::kP.bias) << 23));
  // A subnormal one (exponent field 0): its mantissa, a small integer, times the unit; exact.
  const IReg sub =
      I::AsInt(I::Mul(I::CvtI32(mag), I::AsFloat(I::ISet1(F::Pow2Bits(F::kEmin - F::kMant)))));
  IReg v = I::ISelect(I::IGt(I::ISet1(1u << F::kMant), mag), sub, normal);
  if constexpr (kKind == Fp8Kind::kE4M3) {
    v = I::ISelect(I::IEq(mag, I::ISet1(0x7Fu)), I::ISet1(0x7FC00000u), v);
  } else {  // exponent field all ones: an infinity (mantissa 0) or a NaN
    const IReg special =
        I::ISelect(I::IEq(mag, I::ISet1(0x7Cu)), I::ISet1(0x7F800000u), I::ISet1(0x7FC00000u));
    v = I::ISelect(I::IGt(mag, I::ISet1(0x7Bu)), special, v);
  }
  return I::Mul(I::AsFloat(I::IOr(v, sign)), scale);
}

// The number of Threshold(i) that the magnitudes `a` exceed, the thresholds compile-time
// constants (a loop over i computed them at run time).
template <class I, Fp8Kind kKind, int... i>
typename I::IReg SubnormalCount(typename I::IReg a, std::integer_sequence<int, i...>) {
  using F = Fp8Format<kKind>;
  const typename I::IReg one = I::ISet1(1u);
  const typename I::IReg zero = I::ISet1(0u);
  typename I::IReg q = zero;
  ((q = I::IAdd(q, I::ISelect(I::IGt(a, I::ISet1(F::Threshold(i))), one, zero))), ...);
  return q;
}

// One register of scaled values encoded (EncodeFp8's codes in the lanes' low bytes).
template <class I, Fp8Kind kKind>
typename I::IReg EncodeFp8Reg(typename I::Reg y) {
  using F = Fp8Format<kKind>;
  using IReg = typename I::IReg;
  const IReg u = I::AsInt(y);
  const IReg sign = I::IAnd(I::template Srl<24>(u), I::ISet1(0x80u));
  const IReg a = I::IAnd(u, I::ISet1(0x7FFFFFFFu));
  // At least the smallest normal: fp8.h's NormalCode (round the exponent-and-mantissa field to
  // m mantissa bits, ties to even, a carry into the exponent; rebias; saturate; NaN).
  IReg r = I::IAdd(I::IAdd(a, I::ISet1((1u << (F::kShift - 1)) - 1u)),
                   I::IAnd(I::template Srl<F::kShift>(a), I::ISet1(1u)));
  r = I::ISub(I::template Srl<F::kShift>(r),
              I::ISet1(static_cast<uint32_t>(127 - F::kP.bias) << F::kMant));
  r = I::ISelect(I::IGt(a, I::ISet1(F::kP.max_bits - 1u)), I::ISet1(F::kP.max_code), r);
  r = I::ISelect(I::IGt(a, I::ISet1(0x7F800000u)), I::ISet1(F::kP.nan_code), r);
  // Below it: the count of units, rounded to nearest even, is the number of thresholds the
  // magnitude exceeds (2^m of them; all exceeded: the smallest normal, whose code is 2^m).
  // Skipped when no lane is below the smallest normal (the same bits either way; most registers
  // of a trained row have none).
  const typename I::IMask sub = I::IGt(I::ISet1(F::kMinNormal), a);
  if (!I::Any(sub)) return I::IOr(r, sign);
  const IReg q = SubnormalCount<I, kKind>(a, std::make_integer_sequence<int, (1 << F::kMant)>{});
  return I::IOr(I::ISelect(sub, q, r), sign);
}

// The exponent of a row's scale from its largest finite magnitude's bits: fp8.h's Fp8ScaleExp.
// (An fp32 subnormal magnitude is below 2^-126 and so always takes the smallest scale.)
template <Fp8Kind kKind>
int Fp8RowScaleExp(uint32_t amax_bits) {
  using F = Fp8Format<kKind>;
  if (amax_bits == 0) return 0;
  if ((amax_bits >> 23) == 0) return kFp8MinScaleExp;
  const int e = static_cast<int>(amax_bits >> 23) - 127;
  const uint32_t frac = amax_bits & 0x7FFFFFu;
  int k = e - F::kP.max_exp + (frac > F::kP.fit_frac_bits ? 1 : 0);
  if (k < kFp8MinScaleExp) k = kFp8MinScaleExp;
  if (k > kFp8MaxScaleExp) k = kFp8MaxScaleExp;
  return k;
}

// Row `row` (kFp8HeaderBytes + cols bytes) decoded into out[0..cols); exact (DecodeFp8Row).
template <class I, Fp8Kind kKind>
void DecodeFp8RowVec(const uint8_t* row, int32_t cols, float* out) {
  float scale;
  __builtin_memcpy(&scale, row, sizeof(scale));
  const typename I::Reg s = I::Set1(scale);
  const uint8_t* codes = row + kFp8HeaderBytes;
  int32_t c = 0;
  for (; c + I::kWidth <= cols; c += I::kWidth)
    I::Store(out + c, DecodeFp8Reg<I, kKind>(I::LoadBytes(codes + c), s));
  if (c < cols) {  // the last partial register through a zeroed copy of its codes
    uint8_t tail[I::kWidth] = {};
    for (int32_t i = 0; i < cols - c; ++i) tail[i] = codes[c + i];
    I::StoreFirst(out + c, DecodeFp8Reg<I, kKind>(I::LoadBytes(tail), s), cols - c);
  }
}

// EncodeFp8Stochastic's code (without the sign) of a magnitude `a` (fp32 bits) below the
// smallest normal value, with random bits b: the whole units, plus one on the carry of the
// fraction at 32-bit resolution. Rare in trained rows, so scalar; written here rather than
// called from core/fp8.h (see the top of this file).
template <Fp8Kind kKind>
uint32_t SubnormalStochastic(uint32_t a, uint32_t b) {
  using F = Fp8Format<kKind>;
  const int biased = static_cast<int>(a >> 23);
  const uint32_t mant = (a & 0x7FFFFFu) | (biased != 0 ? 0x800000u : 0u);
  const int e = biased != 0 ? biased : 1;
  const int k = (F::kEmin - F::kMant) - (e - 150);  // >= 1
  const uint32_t q = k >= 24 ? 0u : mant >> k;
  const uint32_t rem = k >= 24 ? mant : mant & ((1u << k) - 1u);
  const uint64_t frac32 = k <= 32 ? static_cast<uint64_t>(rem) << (32 - k)
                                  : (k - 32 < 32 ? static_cast<uint64_t>(rem >> (k - 32)) : 0u);
  return q + (static_cast<uint64_t>(b) + frac32 >= (uint64_t{1} << 32) ? 1u : 0u);
}

// r with its lanes whose magnitude a is below the smallest normal replaced by their stochastic
// codes (SubnormalStochastic with the lane's bits b). Out of line: rare in trained rows, and
// inlined it made EncodeFp8RegStochastic too large to inline, which then took a call and a reload
// of its constants for every register.
template <class I, Fp8Kind kKind>
__attribute__((noinline)) typename I::IReg SubnormalLanesStochastic(typename I::IReg a,
                                                                    typename I::IReg b,
                                                                    typename I::IReg r) {
  using F = Fp8Format<kKind>;
  uint32_t al[I::kWidth], bl[I::kWidth], rl[I::kWidth];
  I::IStore(al, a);
  I::IStore(bl, b);
  I::IStore(rl, r);
  for (int i = 0; i < I::kWidth; ++i)
    if (al[i] < F::kMinNormal) rl[i] = SubnormalStochastic<kKind>(al[i], bl[i]);
  return I::ILoad(rl);
}

// One register of scaled values encoded stochastically with the lanes' random bits `b`
// (EncodeFp8Stochastic's codes in the lanes' low bytes): a normal target adds the top `shift`
// bits of b below its kept mantissa bits and truncates (a carry moves into the exponent); a
// value below the largest finite one never rounds past it. Always inlined, so that a row's loop
// keeps the constants in registers.
template <class I, Fp8Kind kKind>
__attribute__((always_inline)) inline typename I::IReg EncodeFp8RegStochastic(typename I::Reg y,
                                                                              typename I::IReg b) {
  using F = Fp8Format<kKind>;
  using IReg = typename I::IReg;
  const IReg u = I::AsInt(y);
  const IReg sign = I::IAnd(I::template Srl<24>(u), I::ISet1(0x80u));
  const IReg a = I::IAnd(u, I::ISet1(0x7FFFFFFFu));
  IReg r = I::template Srl<F::kShift>(I::IAdd(a, I::template Srl<32 - F::kShift>(b)));
  r = I::ISub(r, I::ISet1(static_cast<uint32_t>(127 - F::kP.bias) << F::kMant));
  r = I::ISelect(I::IGt(a, I::ISet1(F::kP.max_bits - 1u)), I::ISet1(F::kP.max_code), r);
  r = I::ISelect(I::IGt(a, I::ISet1(0x7F800000u)), I::ISet1(F::kP.nan_code), r);
  if (I::Any(I::IGt(I::ISet1(F::kMinNormal), a))) r = SubnormalLanesStochastic<I, kKind>(a, b, r);
  return I::IOr(r, sign);
}

// The largest of the lanes of v (non-negative int32 lanes).
template <class I>
uint32_t LargestLane(typename I::IReg v) {
  uint32_t lanes[I::kWidth];
  I::IStore(lanes, v);
  uint32_t m = 0;
  for (int i = 0; i < I::kWidth; ++i) m = lanes[i] > m ? lanes[i] : m;
  return m;
}

// Writes the scale of x[0..cols) into `row` and returns its inverse (EncodeFp8Row's scale).
template <class I, Fp8Kind kKind>
typename I::Reg WriteFp8RowScale(const float* x, int32_t cols, uint8_t* row) {
  using IReg = typename I::IReg;
  // The largest finite magnitude as the largest of the magnitudes' bits (they order as the
  // values do, as non-negative int32). First the largest of all of them, one max a register:
  // the compare and select a register that also kept non-finite values out chained each register
  // on the last one's select (9.5 against 5.8 ns a 128-wide row in L1, AVX-512). Only a row with a
  // non-finite value (the largest bits at least infinity's) is read again with those counted as
  // zero. The lanes past the end are zero.
  const IReg abs_mask = I::ISet1(0x7FFFFFFFu);
  const int32_t full = cols / I::kWidth * I::kWidth;
  IReg m = I::ISet1(0u);
  for (int32_t c = 0; c < full; c += I::kWidth)
    m = I::IMax(m, I::IAnd(I::AsInt(I::LoadF32(x + c)), abs_mask));
  if (full < cols) m = I::IMax(m, I::IAnd(I::AsInt(I::LoadFirst(x + full, cols - full)), abs_mask));
  uint32_t amax_bits = LargestLane<I>(m);
  if (amax_bits >= 0x7F800000u) {
    const IReg inf = I::ISet1(0x7F800000u);
    const auto finite = [&](typename I::Reg v) {
      const IReg b = I::IAnd(I::AsInt(v), abs_mask);
      return I::ISelect(I::IGt(inf, b), b, I::ISet1(0u));
    };
    m = I::ISet1(0u);
    for (int32_t c = 0; c < full; c += I::kWidth) m = I::IMax(m, finite(I::LoadF32(x + c)));
    if (full < cols) m = I::IMax(m, finite(I::LoadFirst(x + full, cols - full)));
    amax_bits = LargestLane<I>(m);
  }
  const int k = Fp8RowScaleExp<kKind>(amax_bits);
  const uint32_t scale_bits = static_cast<uint32_t>(k + 127) << 23;
  __builtin_memcpy(row, &scale_bits, sizeof(scale_bits));
  // 2^-k: exact, as -k is within [-111, 126].
  return I::AsFloat(I::ISet1(static_cast<uint32_t>(127 - k) << 23));
}

// x[0..cols) encoded into `row`: the scale, then the codes (EncodeFp8Row's bits).
template <class I, Fp8Kind kKind>
void EncodeFp8RowVec(const float* x, int32_t cols, uint8_t* row) {
  const typename I::Reg inv = WriteFp8RowScale<I, kKind>(x, cols, row);
  const int32_t full = cols / I::kWidth * I::kWidth;
  uint8_t* codes = row + kFp8HeaderBytes;
  int32_t c = 0;
  for (; c < full; c += I::kWidth)
    I::StoreBytes(codes + c, EncodeFp8Reg<I, kKind>(I::Mul(I::LoadF32(x + c), inv)));
  if (c < cols) {
    uint8_t tail[I::kWidth];
    I::StoreBytes(tail, EncodeFp8Reg<I, kKind>(I::Mul(I::LoadFirst(x + c, cols - c), inv)));
    for (int32_t i = 0; i < cols - c; ++i) codes[c + i] = tail[i];
  }
}

// The most columns of a row whose stochastic bits EncodeFp8RowVecStochastic asks for at once: a
// whole number of registers at every level; rows up to 256 wide take one chunk, so that the
// caller keys the bits once a row.
constexpr int32_t kFp8BitsChunk = 256;

// x[0..cols) encoded into `row` with stochastic rounding (EncodeFp8RowStochastic's bits): the
// same scale, value c with bit word bits_at(c0, n)[c - c0], asked for a chunk [c0, c0 + n) of at
// most kFp8BitsChunk columns at a time (a pointer to n words, read in place).
template <class I, Fp8Kind kKind, class BitsAt>
void EncodeFp8RowVecStochastic(const float* x, int32_t cols, uint8_t* row, BitsAt bits_at) {
  static_assert(kFp8BitsChunk % I::kWidth == 0);
  const typename I::Reg inv = WriteFp8RowScale<I, kKind>(x, cols, row);
  uint8_t* codes = row + kFp8HeaderBytes;
  for (int32_t c0 = 0; c0 < cols; c0 += kFp8BitsChunk) {
    const int32_t n = cols - c0 < kFp8BitsChunk ? cols - c0 : kFp8BitsChunk;
    const uint32_t* bits = bits_at(c0, n);
    int32_t i = 0;
    for (; i + I::kWidth <= n; i += I::kWidth)
      I::StoreBytes(codes + c0 + i, EncodeFp8RegStochastic<I, kKind>(
                                        I::Mul(I::LoadF32(x + c0 + i), inv), I::ILoad(bits + i)));
    if (i < n) {  // the row's last partial register, its bits copied (none read past n)
      uint32_t tail_bits[I::kWidth] = {};
      for (int32_t j = 0; j < n - i; ++j) tail_bits[j] = bits[i + j];
      uint8_t tail[I::kWidth];
      I::StoreBytes(tail, EncodeFp8RegStochastic<I, kKind>(
                              I::Mul(I::LoadFirst(x + c0 + i, n - i), inv), I::ILoad(tail_bits)));
      for (int32_t j = 0; j < n - i; ++j) codes[c0 + i + j] = tail[j];
    }
  }
}

}  // namespace
}  // namespace shardrec::embedding::kernels::isa
