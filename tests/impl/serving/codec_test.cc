// The serving row codecs, white box: fp32 rows encoded to fp16, bf16, row-wise int8/int4 and FP8
// (encode.cc) and read back by the lookups' decoders (decode.cc) stay within each format's
// rounding bound, and the values a storage cannot hold are refused naming row and column.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "impl/core/fp8.h"
#include "impl/core/half.h"
#include "impl/serving/decode.h"
#include "impl/serving/encode.h"
#include "impl/serving/model.h"

namespace shardrec::serving {
namespace {

std::vector<float> RandomRows(int64_t rows, int32_t dim, float lo, float hi, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(static_cast<size_t>(rows * dim));
  for (float& x : v) x = u(rng);
  return v;
}

// Encodes `rows` and decodes every row back to fp32.
std::vector<float> RoundTrip(const std::vector<float>& src, int32_t dim, Storage s) {
  const int64_t rows = static_cast<int64_t>(src.size()) / dim;
  const uint64_t rb = RowBytes(s, dim);
  std::vector<uint8_t> enc(static_cast<size_t>(rows) * rb);
  const Status st = EncodeRows(src.data(), rows, dim, s, enc.data(), "t");
  EXPECT_TRUE(st.ok()) << st.ToString();
  std::vector<float> out(src.size());
  const DecodeFn decode = DecoderFor(s);
  std::vector<uint8_t> scratch(static_cast<size_t>(dim) + 1);
  for (int64_t r = 0; r < rows; ++r) {
    if (decode == nullptr) {
      std::memcpy(out.data() + r * dim, enc.data() + r * rb, rb);
    } else {
      decode(enc.data() + r * rb, dim, out.data() + r * dim, scratch.data());
    }
  }
  return out;
}

TEST(ServingCodec, Fp32IsExact) {
  const auto src = RandomRows(5, 7, -3.0f, 3.0f, 1);
  EXPECT_EQ(RoundTrip(src, 7, Storage::kFp32), src);
  EXPECT_EQ(DecoderFor(Storage::kFp32), nullptr);  // read in place
}

// Round to nearest: half a unit in the last place, 2^-11 of the value for fp16 (10 fraction
// bits), 2^-8 for bf16 (7 fraction bits), at normal magnitudes.
TEST(ServingCodec, HalfFormatsStayWithinHalfAnUlp) {
  const auto src = RandomRows(64, 33, -8.0f, 8.0f, 2);
  const auto fp16 = RoundTrip(src, 33, Storage::kFp16);
  const auto bf16 = RoundTrip(src, 33, Storage::kBf16);
  for (size_t i = 0; i < src.size(); ++i) {
    const float a = std::fabs(src[i]);
    // Below fp16's smallest normal (2^-14) the spacing is fixed at 2^-24.
    EXPECT_LE(std::fabs(fp16[i] - src[i]), std::fmax(a * 0x1p-11f, 0x1p-25f)) << src[i];
    EXPECT_LE(std::fabs(bf16[i] - src[i]), a * 0x1p-8f) << src[i];
  }
}

// The bound of encode.cc: each code rounds to nearest, so a value reads back within scale / 2 of
// itself, plus the fp32 rounding of code * scale + bias. The row's minimum is the bias and reads
// back exactly; its maximum is the top code.
void ExpectQuantizedBound(Storage s, int levels, int32_t dim) {
  const int64_t rows = 40;
  const auto src = RandomRows(rows, dim, -5.0f, 9.0f, 3 + dim);
  const auto back = RoundTrip(src, dim, s);
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = src.data() + r * dim;
    const float* y = back.data() + r * dim;
    float lo = x[0], hi = x[0];
    for (int32_t c = 1; c < dim; ++c) {
      lo = std::fmin(lo, x[c]);
      hi = std::fmax(hi, x[c]);
    }
    const float scale = (hi - lo) / static_cast<float>(levels);
    const float slack = 4.0f * std::numeric_limits<float>::epsilon() * std::fmax(-lo, hi);
    for (int32_t c = 0; c < dim; ++c) {
      EXPECT_LE(std::fabs(y[c] - x[c]), scale / 2 + slack) << "row " << r << " column " << c;
      if (x[c] == lo) {
        EXPECT_EQ(y[c], lo);
      }
    }
  }
}

TEST(ServingCodec, Int8StaysWithinHalfAStep) { ExpectQuantizedBound(Storage::kInt8, 255, 24); }

TEST(ServingCodec, Int4StaysWithinHalfAStepAtAnOddDim) {
  ExpectQuantizedBound(Storage::kInt4, 15, 13);
}

TEST(ServingCodec, Int4PacksTheEvenColumnInTheLowNibble) {
  // min 0 and max 15 make the scale 1, so the codes are the values.
  const float x[] = {1.0f, 15.0f, 0.0f};
  uint8_t row[kQuantHeaderBytes + 2];
  std::memset(row, 0xAA, sizeof(row));
  QuantizeRow(x, 3, 4, row);
  float scale, bias;
  std::memcpy(&scale, row, 4);
  std::memcpy(&bias, row + 4, 4);
  EXPECT_EQ(scale, 1.0f);
  EXPECT_EQ(bias, 0.0f);
  EXPECT_EQ(row[kQuantHeaderBytes], 0xF1);
  EXPECT_EQ(row[kQuantHeaderBytes + 1], 0x00);  // the pad nibble is cleared
  EXPECT_EQ(RowBytes(Storage::kInt4, 3), kQuantHeaderBytes + 2);
}

// FP8 rows (fp8.h's codec) through EncodeRows and the lookups' decoders: every value within the
// documented bound of its row's power-of-two scale, rows of very different ranges alike, and the
// bytes EncodeFp8Row writes.
TEST(ServingCodec, Fp8StaysWithinItsBound) {
  for (Storage s : {Storage::kFp8E4M3, Storage::kFp8E5M2}) {
    const Fp8Kind kind = s == Storage::kFp8E4M3 ? Fp8Kind::kE4M3 : Fp8Kind::kE5M2;
    const double rel = s == Storage::kFp8E4M3 ? std::ldexp(1.0, -4) : std::ldexp(1.0, -3);
    const double abs_units = s == Storage::kFp8E4M3 ? std::ldexp(1.0, -10) : std::ldexp(1.0, -17);
    const int32_t dim = 37;
    std::vector<float> src = RandomRows(6, dim, -3.0f, 3.0f, 11);
    for (int32_t c = 0; c < dim; ++c) {
      src[dim + c] *= 1e-6f;  // a tiny row and a huge one: the scale follows each row
      src[2 * dim + c] *= 1e20f;
    }
    src[3 * dim + 5] = 0.0f;
    const std::vector<float> back = RoundTrip(src, dim, s);
    std::vector<uint8_t> row(RowBytes(s, dim)), enc(src.size() / dim * RowBytes(s, dim));
    ASSERT_TRUE(EncodeRows(src.data(), 6, dim, s, enc.data(), "t").ok());
    for (int64_t r = 0; r < 6; ++r) {
      EncodeFp8Row(kind, src.data() + r * dim, dim, row.data());
      EXPECT_EQ(std::memcmp(row.data(), enc.data() + r * row.size(), row.size()), 0) << r;
      float scale;
      std::memcpy(&scale, row.data(), 4);
      ASSERT_TRUE(IsValidFp8Scale(scale));
      for (int32_t c = 0; c < dim; ++c) {
        const double x = src[r * dim + c];
        EXPECT_LE(std::fabs(back[r * dim + c] - x), std::max(rel * std::fabs(x), abs_units * scale))
            << StorageName(s) << " row " << r << " col " << c;
      }
    }
    EXPECT_EQ(back[3 * dim + 5], 0.0f);
  }
}

TEST(ServingCodec, ConstantRowsReadBackExactly) {
  const std::vector<float> src(9, -2.75f);
  EXPECT_EQ(RoundTrip(src, 9, Storage::kInt8), src);
  EXPECT_EQ(RoundTrip(src, 9, Storage::kInt4), src);
}

// Every fp16 pattern widens to the same float through the chosen decoder (F16C where the host
// has it) as through the portable conversion.
TEST(ServingCodec, Fp16DecoderWidensEveryPatternExactly) {
  const DecodeFn decode = DecoderFor(Storage::kFp16);
  ASSERT_NE(decode, nullptr);
  std::vector<uint16_t> all(65536);
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<uint16_t>(i);
  std::vector<float> out(all.size());
  std::vector<uint8_t> scratch(all.size() + 1);
  decode(reinterpret_cast<const uint8_t*>(all.data()), static_cast<int32_t>(all.size()), out.data(),
         scratch.data());
  for (size_t i = 0; i < all.size(); ++i) {
    const float want = HalfToFloat(all[i]);
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(out[i])) << i;
    } else {
      EXPECT_EQ(out[i], want) << i;
    }
  }
}

Status Encode(const std::vector<float>& src, int32_t dim, Storage s,
              NonFinite nf = NonFinite::kKeep) {
  std::vector<uint8_t> enc(src.size() / dim * RowBytes(s, dim));
  return EncodeRows(src.data(), static_cast<int64_t>(src.size()) / dim, dim, s, enc.data(),
                    "table t", nf);
}

TEST(ServingCodec, QuantizedStorageRefusesNonFiniteNamingRowAndColumn) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> src = {0, 1, 2, 3, 4, nan};
  for (Storage s : {Storage::kInt8, Storage::kInt4, Storage::kFp8E4M3, Storage::kFp8E5M2}) {
    const Status st = Encode(src, 3, s);
    EXPECT_EQ(st.code(), Code::kInvalidArgument);
    EXPECT_NE(st.message().find("table t row 1 column 2"), std::string::npos) << st.message();
    EXPECT_NE(st.message().find("cannot store"), std::string::npos) << st.message();
  }
}

TEST(ServingCodec, HalfFormatsRefuseFiniteValuesBeyondTheirRange) {
  const Status fp16 = Encode({1.0f, 70000.0f}, 2, Storage::kFp16);
  EXPECT_EQ(fp16.code(), Code::kInvalidArgument);
  EXPECT_NE(fp16.message().find("beyond fp16's range"), std::string::npos) << fp16.message();
  EXPECT_NE(fp16.message().find("as fp32 or bf16"), std::string::npos) << fp16.message();
  // bf16 keeps fp32's exponent: 70000 is inside its range; fp32's largest value rounds up past it.
  EXPECT_TRUE(Encode({1.0f, 70000.0f}, 2, Storage::kBf16).ok());
  const Status bf16 = Encode({std::numeric_limits<float>::max()}, 1, Storage::kBf16);
  EXPECT_EQ(bf16.code(), Code::kInvalidArgument);
  EXPECT_NE(bf16.message().find("beyond bf16's range"), std::string::npos) << bf16.message();
}

TEST(ServingCodec, QuantizedStorageRefusesASpanWiderThanFp32) {
  const float big = std::numeric_limits<float>::max() * 0.75f;
  const Status st = Encode({-big, big}, 2, Storage::kInt8);
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_NE(st.message().find("wider than fp32 can hold"), std::string::npos) << st.message();
}

TEST(ServingCodec, Fp32KeepsNonFiniteUnlessRefused) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_TRUE(Encode({1.0f, inf}, 2, Storage::kFp32).ok());
  const Status st = Encode({1.0f, inf}, 2, Storage::kFp32, NonFinite::kRefuse);
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_NE(st.message().find("does not take in a delta"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace shardrec::serving
