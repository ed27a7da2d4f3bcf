// FP8 values and rows (impl/core/fp8.h) against a reference written here from the formats'
// definitions: every code decodes to sign x (1 + mant / 2^m) x 2^(exp - bias) (or the subnormal
// and special values), and encoding picks the nearest code by brute force over all 256 codes,
// ties to the even code, beyond the largest finite value the largest finite value.
#include "impl/core/fp8.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace shardrec {
namespace {

struct Format {
  Fp8Kind kind;
  int m, bias;
  float max_finite;
  float fit;  // the largest magnitude that rounds (not saturates) to max_finite
};
const Format kFormats[] = {{Fp8Kind::kE4M3, 3, 7, 448.f, 464.f},
                           {Fp8Kind::kE5M2, 2, 15, 57344.f, 61440.f}};

// The value of a code from the definitions (NaN for NaN codes, +-inf for E5M2's infinities).
double RefDecode(const Format& f, int c) {
  const int e_bits = 7 - f.m;
  const int sign = (c >> 7) ? -1 : 1;
  const int exp = (c & 0x7F) >> f.m;
  const int mant = c & ((1 << f.m) - 1);
  if (f.kind == Fp8Kind::kE4M3 && (c & 0x7F) == 0x7F) return std::nan("");
  if (f.kind == Fp8Kind::kE5M2 && exp == (1 << e_bits) - 1) {
    return mant == 0 ? sign * std::numeric_limits<double>::infinity() : std::nan("");
  }
  if (exp == 0) return sign * std::ldexp(mant, 1 - f.bias - f.m);
  return sign * std::ldexp(1.0 + std::ldexp(mant, -f.m), exp - f.bias);
}

// Nearest finite code, ties to the even code (the one whose mantissa's last bit is 0), saturating.
uint8_t RefEncode(const Format& f, float x) {
  if (std::isnan(x)) return std::signbit(x) ? 0xFF : 0x7F;
  const double v = std::fmax(-f.max_finite, std::fmin(f.max_finite, static_cast<double>(x)));
  int best = -1;
  double best_d = 0;
  for (int c = 0; c < 256; ++c) {
    const double r = RefDecode(f, c);
    if (!std::isfinite(r)) continue;
    if (r == 0 && std::signbit(r) != std::signbit(x)) continue;  // zero keeps the input's sign
    const double d = std::fabs(r - v);
    if (best < 0 || d < best_d || (d == best_d && (c & 1) == 0 && (best & 1) == 1)) {
      if (best >= 0 && d == best_d && (std::signbit(r) != std::signbit(x))) continue;
      best = c;
      best_d = d;
    }
  }
  return static_cast<uint8_t>(best);
}

TEST(Fp8, EveryCodeDecodesAsDefined) {
  for (const Format& f : kFormats) {
    for (int c = 0; c < 256; ++c) {
      const float got = DecodeFp8(f.kind, static_cast<uint8_t>(c));
      const double want = RefDecode(f, c);
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(got)) << c;
      } else {
        EXPECT_EQ(static_cast<double>(got), want) << "code " << c;
        EXPECT_EQ(std::signbit(got), (c & 0x80) != 0) << c;
      }
    }
    EXPECT_EQ(DecodeFp8(f.kind, f.kind == Fp8Kind::kE4M3 ? 0x7E : 0x7B), f.max_finite);
  }
}

TEST(Fp8, EveryFiniteCodeRoundTrips) {
  for (const Format& f : kFormats) {
    for (int c = 0; c < 256; ++c) {
      const float v = DecodeFp8(f.kind, static_cast<uint8_t>(c));
      if (!std::isfinite(v)) continue;
      EXPECT_EQ(EncodeFp8(f.kind, v), c) << "code " << c << " value " << v;
    }
  }
}

TEST(Fp8, EncodesTheNearestCodeTiesToEven) {
  std::mt19937 rng(7);
  for (const Format& f : kFormats) {
    std::vector<float> xs;
    // Every midpoint between neighbouring codes (the ties) and values just beside them.
    for (int c = 0; c < 127; ++c) {
      const float a = DecodeFp8(f.kind, static_cast<uint8_t>(c));
      const float b = DecodeFp8(f.kind, static_cast<uint8_t>(c + 1));
      if (!std::isfinite(a) || !std::isfinite(b)) continue;
      const float mid = (a + b) / 2;  // exact: both have few bits
      for (float x : {mid, std::nextafter(mid, 0.f), std::nextafter(mid, 1e30f)}) {
        xs.push_back(x);
        xs.push_back(-x);
      }
    }
    // Random magnitudes over every exponent the format meets, fp32 subnormals, specials.
    std::uniform_real_distribution<float> frac(1.f, 2.f);
    std::uniform_int_distribution<int> ex(-f.bias - f.m - 4,
                                          static_cast<int>(std::log2(f.max_finite)) + 2);
    for (int i = 0; i < 20000; ++i) {
      const float x = std::ldexp(frac(rng), ex(rng));
      xs.push_back(i % 2 ? x : -x);
    }
    for (float x :
         {0.f, -0.f, 1e-40f, -1e-45f, 1e30f, -1e30f, f.max_finite * 1.01f,
          std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity()}) {
      xs.push_back(x);
    }
    for (float x : xs) {
      ASSERT_EQ(EncodeFp8(f.kind, x), RefEncode(f, x))
          << "kind " << static_cast<int>(f.kind) << " x " << x;
    }
    EXPECT_TRUE(std::isnan(DecodeFp8(f.kind, EncodeFp8(f.kind, std::nanf("")))));
  }
}

TEST(Fp8, RowsKeepTheDocumentedBound) {
  std::mt19937 rng(11);
  for (const Format& f : kFormats) {
    for (int64_t dim : {1, 3, 64, 129}) {
      for (float spread : {1e-30f, 1e-3f, 1.f, 1e3f, 1e30f}) {
        std::normal_distribution<float> g(0.f, spread);
        std::vector<float> x(dim);
        for (auto& v : x) v = g(rng);
        if (dim > 2) x[1] = 0.f;
        std::vector<uint8_t> row(kFp8HeaderBytes + dim);
        EncodeFp8Row(f.kind, x.data(), dim, row.data());
        float scale;
        std::memcpy(&scale, row.data(), sizeof(scale));
        ASSERT_TRUE(IsValidFp8Scale(scale)) << scale;
        std::vector<float> back(dim);
        DecodeFp8Row(f.kind, row.data(), dim, back.data());
        float amax = 0;
        for (float v : x) amax = std::fmax(amax, std::fabs(v));
        // The scale is the smallest power of two with which the row rounds without saturating.
        EXPECT_LE(amax / scale, f.fit);
        if (amax > 0) {
          EXPECT_GT(amax / (scale / 2), f.fit);
        }
        const double sub = std::ldexp(static_cast<double>(scale), 1 - f.bias - f.m - 1);
        for (int64_t i = 0; i < dim; ++i) {
          const double err = std::fabs(static_cast<double>(back[i]) - x[i]);
          const double bound =
              std::fmax(std::ldexp(std::fabs(static_cast<double>(x[i])), -(f.m + 1)), sub);
          EXPECT_LE(err, bound) << "dim " << dim << " i " << i << " x " << x[i];
        }
        // Idempotent: encoding the decoded row gives the same bytes.
        std::vector<uint8_t> again(row.size());
        EncodeFp8Row(f.kind, back.data(), dim, again.data());
        EXPECT_EQ(again, row);
      }
    }
  }
}

TEST(Fp8, RowScaleSpecialCases) {
  for (const Format& f : kFormats) {
    // All zeros: scale 1, zero codes.
    std::vector<float> z(5, 0.f);
    std::vector<uint8_t> row(kFp8HeaderBytes + 5);
    EncodeFp8Row(f.kind, z.data(), 5, row.data());
    float scale;
    std::memcpy(&scale, row.data(), sizeof(scale));
    EXPECT_EQ(scale, 1.f);
    for (int i = 0; i < 5; ++i) EXPECT_EQ(row[kFp8HeaderBytes + i], 0);
    // A row whose largest value is exactly the largest finite one keeps scale 1.
    std::vector<float> m = {f.max_finite, -1.f};
    EncodeFp8Row(f.kind, m.data(), 2, row.data());
    std::memcpy(&scale, row.data(), sizeof(scale));
    EXPECT_EQ(scale, 1.f);
    // Non-finite values take no part in the scale: NaN stays NaN, infinity saturates.
    std::vector<float> s = {1.f, std::nanf(""), std::numeric_limits<float>::infinity()};
    EncodeFp8Row(f.kind, s.data(), 3, row.data());
    std::vector<float> back(3);
    DecodeFp8Row(f.kind, row.data(), 3, back.data());
    EXPECT_EQ(back[0], 1.f);
    EXPECT_TRUE(std::isnan(back[1]));
    EXPECT_TRUE(std::isfinite(back[2]));
  }
  EXPECT_FALSE(IsValidFp8Scale(3.f));
  EXPECT_FALSE(IsValidFp8Scale(-1.f));
  EXPECT_FALSE(IsValidFp8Scale(std::ldexp(1.f, kFp8MaxScaleExp + 1)));
  EXPECT_TRUE(IsValidFp8Scale(std::ldexp(1.f, kFp8MinScaleExp)));
}

}  // namespace
}  // namespace shardrec

namespace shardrec {
namespace {

// The stochastic reference: the two finite codes around x by brute force over all 256 (lo the
// largest magnitude <= |x|, hi the next), up iff (|x| - lo) / (hi - lo) >= 1 - bits x 2^-32;
// from the largest finite magnitude up, that value; a NaN stays NaN.
uint8_t RefEncodeStochastic(const Format& f, float x, uint32_t bits) {
  if (std::isnan(x)) return std::signbit(x) ? 0xFF : 0x7F;
  const double a = std::fabs(static_cast<double>(x));
  const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  if (a >= f.max_finite) return static_cast<uint8_t>(sign | RefEncode(f, f.max_finite));
  int lo = 0;
  double lo_v = 0, hi_v = 0;
  for (int c = 0; c < 128; ++c) {
    const double v = RefDecode(f, c);
    if (std::isfinite(v) && v <= a && v >= lo_v) {
      lo = c;
      lo_v = v;
    }
  }
  hi_v = RefDecode(f, lo + 1);
  const double need = std::ldexp(4294967296.0 - static_cast<double>(bits), -32);
  const bool up = (a - lo_v) / (hi_v - lo_v) >= need;  // exact: both quotients of short binaries
  return static_cast<uint8_t>(sign | (up ? lo + 1 : lo));
}

// Every code keeps itself whatever the bits; values between codes (normal and subnormal targets,
// fp32 subnormals, near saturation) take the reference's code for extreme and random bits; and
// over many bits the mean of the decoded values is the value (the rounding is unbiased).
TEST(Fp8Stochastic, RoundsBetweenTheNeighbouringCodesAsDefined) {
  std::mt19937 rng(7);
  for (const Format& f : kFormats) {
    for (int c = 0; c < 256; ++c) {
      const double v = RefDecode(f, c);
      if (!std::isfinite(v)) continue;
      for (uint32_t bits : {0u, 1u, 0x80000000u, 0xFFFFFFFFu})
        EXPECT_EQ(EncodeFp8Stochastic(f.kind, static_cast<float>(v), bits), c) << c;
    }
    std::vector<float> xs = {0.3f,   -1.0625f, 1.09375f, 447.0f,
                             449.0f, 460.0f,   -1e30f,   std::numeric_limits<float>::denorm_min(),
                             1e-40f};
    std::uniform_real_distribution<float> u(-2.0f, 2.0f);
    std::uniform_int_distribution<int> e(-30, 16);
    for (int i = 0; i < 2000; ++i) xs.push_back(std::ldexp(u(rng), e(rng)));
    for (float x : xs) {
      for (uint32_t bits : {0u, 1u, 0x7FFFFFFFu, 0x80000000u, 0xFFFFFFFEu, 0xFFFFFFFFu,
                            static_cast<uint32_t>(rng())}) {
        EXPECT_EQ(EncodeFp8Stochastic(f.kind, x, bits), RefEncodeStochastic(f, x, bits))
            << "x " << x << " bits " << bits;
      }
    }
    // Unbiased: the mean over 2^16 evenly spaced bit patterns is x to within 2^-16 of a step.
    for (float x : {0.3f, -1.1f, 3.3e-3f, 1e-3f}) {
      double sum = 0;
      for (uint32_t k = 0; k < 65536; ++k)
        sum += DecodeFp8(f.kind, EncodeFp8Stochastic(f.kind, x, k << 16));
      const uint8_t lo = RefEncodeStochastic(f, x, 0);
      const double step = std::fabs(RefDecode(f, lo + 1) - RefDecode(f, lo));
      EXPECT_NEAR(sum / 65536, x, step / 65536 + 1e-12) << x;
    }
  }
}

// A stochastic row: the nearest encoding's scale, each value within one unit in the last place
// (max(2^-m |x|, 2^(emin-m) scale)) of the one around it, and a decoded row keeps its bytes.
TEST(Fp8Stochastic, RowsKeepTheScaleAndTheDocumentedBound) {
  std::mt19937 rng(3);
  for (const Format& f : kFormats) {
    for (int64_t dim : {1, 5, 128}) {
      std::normal_distribution<float> g(0.f, 0.05f);
      std::vector<float> x(dim);
      for (auto& v : x) v = g(rng);
      std::vector<uint8_t> nearest(kFp8HeaderBytes + dim), row(kFp8HeaderBytes + dim);
      EncodeFp8Row(f.kind, x.data(), dim, nearest.data());
      const uint32_t salt = rng();
      auto bits_of = [&](int64_t i) { return static_cast<uint32_t>(i * 2654435761u) ^ salt; };
      EncodeFp8RowStochastic(f.kind, x.data(), dim, row.data(), bits_of);
      EXPECT_EQ(std::memcmp(row.data(), nearest.data(), kFp8HeaderBytes), 0);
      float scale;
      std::memcpy(&scale, row.data(), sizeof(scale));
      std::vector<float> back(dim);
      DecodeFp8Row(f.kind, row.data(), dim, back.data());
      const double sub = std::ldexp(static_cast<double>(scale), 1 - f.bias - f.m);
      for (int64_t i = 0; i < dim; ++i) {
        const double err = std::fabs(static_cast<double>(back[i]) - x[i]);
        EXPECT_LT(err, std::fmax(std::ldexp(std::fabs(static_cast<double>(x[i])), -f.m), sub));
        EXPECT_EQ(row[kFp8HeaderBytes + i],
                  RefEncodeStochastic(f, static_cast<float>(x[i] / scale), bits_of(i)));
      }
      std::vector<uint8_t> again(row.size());
      EncodeFp8RowStochastic(f.kind, back.data(), dim, again.data(), bits_of);
      EXPECT_EQ(again, row);
    }
  }
}

}  // namespace
}  // namespace shardrec
