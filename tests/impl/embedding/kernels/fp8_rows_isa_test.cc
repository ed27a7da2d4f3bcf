// The fused backward's FP8 row codec (isa/fp8_rows_body.h) at every instruction-set level the
// host has against core/fp8.h's DecodeFp8Row / EncodeFp8Row, bit for bit, on the values a
// training row rarely holds: rounding ties, the format's subnormals and the fp32 ones, signed
// zeros, saturation, infinities, NaNs, all-zero rows, and every code under the extreme scales.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <utility>
#include <vector>

#include "impl/core/fp8.h"
#include "impl/embedding/kernels/isa/fused_rows.h"
#include "impl/embedding/kernels/kernels.h"

namespace shardrec::embedding::kernels {
namespace {

struct Level {
  const char* name;
  isa::Fp8RowFn fn;
};

std::vector<Level> Levels() {
  std::vector<Level> l = {{"baseline", &isa::Fp8RowBaseline}};
#if SHARDREC_HAVE_X86_LEVELS
  if (HostCpuLevel() >= CpuLevel::kAvx2) l.push_back({"avx2", &isa::Fp8RowAvx2});
  if (HostCpuLevel() >= CpuLevel::kAvx512) l.push_back({"avx512", &isa::Fp8RowAvx512});
#endif
  return l;
}

float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Rows of `dim` values of one kind each: the value patterns the codec must get right.
std::vector<std::vector<float>> Rows(int32_t dim, uint32_t seed) {
  std::vector<std::vector<float>> rows;
  uint32_t s = seed;
  auto next = [&s] {
    s = s * 1664525u + 1013904223u;
    return s;
  };
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  // 0: random bit patterns of finite values over a wide exponent range (many of them far below
  // the row's largest, so subnormal codes and zeros).
  // 1: exact midpoints between codes (ties) and their neighbours, E4M3's and E5M2's, under a
  // scale of 1 (the row's largest is 448).
  // 2: fp32 subnormals and tiny normals only (the smallest scale).
  // 3: zeros of both signs (scale 1, codes 0x00 / 0x80).
  // 4: non-finite values among finite ones (NaN payloads, infinities: they saturate).
  // 5: huge magnitudes (the largest scale), with a NaN.
  // 6: as 1 under E5M2's scale of 1 (the row's largest is 57344).
  for (int kind = 0; kind < 7; ++kind) {
    std::vector<float> r(dim);
    for (int32_t i = 0; i < dim; ++i) {
      const uint32_t sign = (next() & 1u) << 31;
      float v = 0.0f;
      switch (kind) {
        case 0: {
          const uint32_t e = 100 + next() % 40;  // 2^-27 .. 2^12
          v = FromBits(sign | (e << 23) | (next() & 0x7FFFFFu));
          break;
        }
        case 1:
        case 6: {
          // k/2 units of 2^-10 (E4M3's subnormal half unit), of 2^-17 (E5M2's), and multiples
          // of 2^-4 around 1 (a normal tie), each +-1 ulp or exact.
          const int k = static_cast<int>(next() % 20);
          const float unit = (i % 3 == 0)   ? std::ldexp(1.0f, -10)
                             : (i % 3 == 1) ? std::ldexp(1.0f, -17)
                                            : std::ldexp(1.0f, -4);
          v = static_cast<float>(k) * unit + (i % 3 == 2 ? 1.0f : 0.0f);
          const int nudge = static_cast<int>(next() % 3) - 1;
          uint32_t b;
          std::memcpy(&b, &v, 4);
          if (b != 0) v = FromBits(b + static_cast<uint32_t>(nudge));
          if (sign != 0) v = -v;
          break;
        }
        case 2:
          v = FromBits(sign | (next() % 0x01000000u));  // below 2^-125
          break;
        case 3:
          v = FromBits(sign);
          break;
        case 4: {
          const uint32_t pick = next() % 5;
          v = pick == 0   ? FromBits(sign | 0x7F800001u | (next() & 0x3FFFFFu))  // NaN payloads
              : pick == 1 ? (sign != 0 ? -inf : inf)
                          : FromBits(sign | ((120 + next() % 16) << 23) | (next() & 0x7FFFFFu));
          break;
        }
        case 5:
          v = FromBits(sign | ((240 + next() % 14) << 23) | (next() & 0x7FFFFFu));
          if (i == dim / 2) v = nan;
          break;
      }
      r[i] = v;
    }
    if (kind == 1 && dim > 1) r[dim - 1] = 448.0f;    // pins E4M3's scale at 1
    if (kind == 6 && dim > 1) r[dim - 1] = 57344.0f;  // pins E5M2's
    rows.push_back(r);
  }
  return rows;
}

TEST(EmbeddingKernels, Fp8RowCodecEqualsCoreAtEveryCpuLevel) {
  const auto levels = Levels();
  for (DType dt : {DType::kFp8E4M3, DType::kFp8E5M2}) {
    const Fp8Kind kind = Fp8KindOf(dt);
    const auto type = dt == DType::kFp8E4M3 ? isa::WeightType::kFp8E4M3 : isa::WeightType::kFp8E5M2;
    for (int32_t dim : {1, 3, 4, 7, 8, 15, 16, 17, 31, 33, 64, 100, 131}) {
      const int64_t bytes = static_cast<int64_t>(kFp8HeaderBytes) + dim;
      for (const auto& row : Rows(dim, 7u + static_cast<uint32_t>(dim))) {
        std::vector<uint8_t> want(bytes);
        EncodeFp8Row(kind, row.data(), dim, want.data());
        std::vector<float> want_dec(dim);
        DecodeFp8Row(kind, want.data(), dim, want_dec.data());
        for (const Level& l : levels) {
          std::vector<float> in = row;
          std::vector<uint8_t> got(bytes + 16, 0xA5);  // past the row: must stay untouched
          l.fn(type, true, in.data(), dim, got.data());
          ASSERT_EQ(0, std::memcmp(got.data(), want.data(), bytes))
              << l.name << " encode, " << DTypeName(dt) << " dim " << dim;
          for (int i = 0; i < 16; ++i) ASSERT_EQ(got[bytes + i], 0xA5) << l.name;
          std::vector<float> dec(dim + 16, -7.0f);
          l.fn(type, false, dec.data(), dim, want.data());
          ASSERT_EQ(0, std::memcmp(dec.data(), want_dec.data(), dim * sizeof(float)))
              << l.name << " decode, " << DTypeName(dt) << " dim " << dim;
          for (int i = 0; i < 16; ++i) ASSERT_EQ(dec[dim + i], -7.0f) << l.name;
        }
      }
    }
    // Every code under the smallest, a middle and the largest scale decodes as core's does.
    for (int e : {kFp8MinScaleExp, -3, 0, kFp8MaxScaleExp}) {
      std::vector<uint8_t> row(kFp8HeaderBytes + 256);
      const float scale = std::ldexp(1.0f, e);
      std::memcpy(row.data(), &scale, 4);
      for (int c = 0; c < 256; ++c) row[kFp8HeaderBytes + c] = static_cast<uint8_t>(c);
      std::vector<float> want(256);
      DecodeFp8Row(kind, row.data(), 256, want.data());
      for (const Level& l : levels) {
        std::vector<float> got(256);
        l.fn(type, false, got.data(), 256, row.data());
        ASSERT_EQ(0, std::memcmp(got.data(), want.data(), sizeof(float) * 256))
            << l.name << " " << DTypeName(dt) << " scale 2^" << e;
      }
    }
  }
}

// The stochastic encoder (isa's EncodeFp8RowVecStochastic) against core/fp8.h's
// EncodeFp8RowStochastic on the same rows, with random bits and with the extreme bits (all zero:
// never up; all ones: up whenever the value is not a code), so a carry or subnormal rule that
// differs in one lane fails.
TEST(EmbeddingKernels, Fp8StochasticRowEncoderEqualsCoreAtEveryCpuLevel) {
  std::vector<std::pair<const char*, isa::Fp8RowStochasticFn>> levels = {
      {"baseline", &isa::Fp8RowStochasticBaseline}};
#if SHARDREC_HAVE_X86_LEVELS
  if (HostCpuLevel() >= CpuLevel::kAvx2) levels.push_back({"avx2", &isa::Fp8RowStochasticAvx2});
  if (HostCpuLevel() >= CpuLevel::kAvx512)
    levels.push_back({"avx512", &isa::Fp8RowStochasticAvx512});
#endif
  for (DType dt : {DType::kFp8E4M3, DType::kFp8E5M2}) {
    const Fp8Kind kind = Fp8KindOf(dt);
    const auto type = dt == DType::kFp8E4M3 ? isa::WeightType::kFp8E4M3 : isa::WeightType::kFp8E5M2;
    for (int32_t dim : {1, 3, 7, 16, 17, 63, 64, 65, 131, 200, 256, 257, 300, 520}) {
      const int64_t bytes = static_cast<int64_t>(kFp8HeaderBytes) + dim;
      for (int pattern = 0; pattern < 3; ++pattern) {
        std::vector<uint32_t> bits(dim);
        uint32_t s = 99u + static_cast<uint32_t>(dim);
        for (auto& b : bits) {
          s = s * 1664525u + 1013904223u;
          b = pattern == 0 ? 0u : pattern == 1 ? 0xFFFFFFFFu : s;
        }
        for (const auto& row : Rows(dim, 11u + static_cast<uint32_t>(dim))) {
          std::vector<uint8_t> want(bytes);
          EncodeFp8RowStochastic(kind, row.data(), dim, want.data(),
                                 [&](int64_t c) { return bits[c]; });
          for (const auto& [name, fn] : levels) {
            std::vector<uint8_t> got(bytes + 16, 0xA5);
            fn(type, row.data(), dim, bits.data(), got.data());
            ASSERT_EQ(0, std::memcmp(got.data(), want.data(), bytes))
                << name << " " << DTypeName(dt) << " dim " << dim << " bits pattern " << pattern;
            for (int i = 0; i < 16; ++i) ASSERT_EQ(got[bytes + i], 0xA5) << name;
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace shardrec::embedding::kernels
