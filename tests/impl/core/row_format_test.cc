// The row-format vocabulary (row_format.h) and the row codec's decoders (codec/codec.h): sizes and
// names of every format, and each level's stored-row decoders against a plain reference written
// here from the documented layout (fp16 every one of the 65536 patterns; bf16, int8 and int4 rows
// of several dimensions, odd ones included so the int4 tail nibble and the F16C tail are met;
// FP8 rows of random codes, NaNs included, against fp8.h's DecodeFp8Row).
#include "impl/core/row_format.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "impl/core/codec/codec.h"
#include "impl/core/cpu_features.h"
#include "impl/core/fp8.h"
#include "impl/core/half.h"

namespace shardrec {
namespace {

TEST(RowFormat, SizesAndNames) {
  EXPECT_EQ(RowBytes(RowFormat::kFp32, 3), 12u);
  EXPECT_EQ(RowBytes(RowFormat::kFp16, 3), 6u);
  EXPECT_EQ(RowBytes(RowFormat::kBf16, 3), 6u);
  EXPECT_EQ(RowBytes(RowFormat::kInt8, 3), kQuantHeaderBytes + 3);
  EXPECT_EQ(RowBytes(RowFormat::kInt4, 3), kQuantHeaderBytes + 2);  // two codes a byte
  EXPECT_EQ(RowBytes(RowFormat::kInt4, 4), kQuantHeaderBytes + 2);
  EXPECT_EQ(RowBytes(RowFormat::kFp8E4M3, 3), kFp8HeaderBytes + 3);
  EXPECT_EQ(RowBytes(RowFormat::kFp8E5M2, 3), kFp8HeaderBytes + 3);
  EXPECT_STREQ(RowFormatName(RowFormat::kFp8E4M3), "fp8_e4m3");
  EXPECT_STREQ(RowFormatName(RowFormat::kFp8E5M2), "fp8_e5m2");
  for (int32_t v = 0; v < kNumRowFormats; ++v) {
    const auto f = static_cast<RowFormat>(v);
    RowFormat back = RowFormat::kFp32;
    ASSERT_TRUE(RowFormatFromName(RowFormatName(f), &back)) << RowFormatName(f);
    EXPECT_EQ(back, f);
    EXPECT_EQ(int{IsFloatFormat(f)} + int{IsRowWiseQuantized(f)} + int{IsFp8Format(f)}, 1)
        << RowFormatName(f);
  }
  RowFormat f;
  EXPECT_FALSE(RowFormatFromName("fp8", &f));
  EXPECT_FALSE(IsValidRowFormat(kNumRowFormats));
  EXPECT_EQ(FloatFormatOf(DType::kBFloat16), RowFormat::kBf16);
  EXPECT_EQ(ValueType(RowFormat::kFp16), DType::kFloat16);
  ASSERT_TRUE(RowFormatOf(DType::kFloat16, &f));
  EXPECT_EQ(f, RowFormat::kFp16);
  EXPECT_FALSE(RowFormatOf(DType::kInt64, &f));
}

// A stored row of `format` decoded the plain way: widen, or code x scale + bias.
std::vector<float> Reference(RowFormat format, const std::vector<uint8_t>& row, int32_t dim) {
  std::vector<float> out(static_cast<size_t>(dim));
  if (IsFp8Format(format)) {  // fp8.h's row decoder
    DecodeFp8Row(format == RowFormat::kFp8E4M3 ? Fp8Kind::kE4M3 : Fp8Kind::kE5M2, row.data(), dim,
                 out.data());
    return out;
  }
  float scale = 0, bias = 0;
  if (IsRowWiseQuantized(format)) {
    std::memcpy(&scale, row.data(), 4);
    std::memcpy(&bias, row.data() + 4, 4);
  }
  for (int32_t c = 0; c < dim; ++c) {
    uint16_t h = 0;
    if (!IsRowWiseQuantized(format)) std::memcpy(&h, row.data() + 2 * c, 2);
    const uint8_t* codes = row.data() + kQuantHeaderBytes;
    switch (format) {
      case RowFormat::kFp16:
        out[c] = HalfToFloat(h);
        break;
      case RowFormat::kBf16:
        out[c] = BFloat16ToFloat(h);
        break;
      case RowFormat::kInt8:
        out[c] = static_cast<float>(codes[c]) * scale + bias;
        break;
      case RowFormat::kInt4: {
        const uint8_t code = c % 2 == 0 ? codes[c / 2] & 0xF : codes[c / 2] >> 4;
        out[c] = static_cast<float>(code) * scale + bias;
        break;
      }
      case RowFormat::kFp32:
      case RowFormat::kFp8E4M3:
      case RowFormat::kFp8E5M2:
        break;
    }
  }
  return out;
}

void ExpectSameBits(const std::vector<float>& want, const std::vector<float>& got, const char* what,
                    int32_t dim) {
  ASSERT_EQ(want.size(), got.size());
  for (size_t c = 0; c < want.size(); ++c)
    ASSERT_EQ(std::memcmp(&want[c], &got[c], 4), 0)
        << what << " dim " << dim << " value " << c << ": " << want[c] << " vs " << got[c];
}

std::vector<const codec::Passes*> Levels() {
  std::vector<const codec::Passes*> levels{&codec::Baseline(), &codec::Best()};
#if SHARDREC_HAVE_X86_CODEC_LEVELS
  if (HostCpu().avx2 && HostCpu().f16c) levels.push_back(&codec::Avx2());
#endif
  return levels;
}

TEST(RowCodec, DecodersMatchTheLayoutAtEveryLevel) {
  std::mt19937 rng(7);
  for (const codec::Passes* p : Levels()) {
    EXPECT_EQ(p->decode_row[static_cast<int>(RowFormat::kFp32)], nullptr);
    // Every fp16 pattern, NaNs and infinities included, as one long row.
    {
      const int32_t dim = 65536;
      std::vector<uint8_t> row(2 * static_cast<size_t>(dim));
      for (int32_t c = 0; c < dim; ++c) {
        const auto h = static_cast<uint16_t>(c);
        std::memcpy(row.data() + 2 * c, &h, 2);
      }
      std::vector<float> got(static_cast<size_t>(dim));
      std::vector<uint8_t> scratch(static_cast<size_t>(dim) + 1);
      p->decode_row[static_cast<int>(RowFormat::kFp16)](row.data(), dim, got.data(),
                                                        scratch.data());
      ExpectSameBits(Reference(RowFormat::kFp16, row, dim), got, "fp16", dim);
    }
    for (RowFormat f : {RowFormat::kFp16, RowFormat::kBf16, RowFormat::kInt8, RowFormat::kInt4,
                        RowFormat::kFp8E4M3, RowFormat::kFp8E5M2}) {
      for (int32_t dim : {1, 3, 7, 8, 9, 16, 33, 64, 127}) {
        std::vector<uint8_t> row(RowBytes(f, dim));
        for (uint8_t& b : row) b = static_cast<uint8_t>(rng());
        if (IsRowWiseQuantized(f)) {
          const float scale = 0.01f * static_cast<float>(rng() % 100 + 1);
          const float bias = -0.5f + 0.001f * static_cast<float>(rng() % 1000);
          std::memcpy(row.data(), &scale, 4);
          std::memcpy(row.data() + 4, &bias, 4);
        }
        if (IsFp8Format(f)) {  // a scale EncodeFp8Row writes; every code, NaNs included
          const float scale = std::ldexp(1.0f, static_cast<int>(rng() % 60) - 30);
          std::memcpy(row.data(), &scale, 4);
        }
        std::vector<float> got(static_cast<size_t>(dim));
        std::vector<uint8_t> scratch(static_cast<size_t>(dim) + 1);
        // Rows start anywhere in a mapped file: decode one that is not 4-byte aligned.
        std::vector<uint8_t> shifted(row.size() + 2);
        std::memcpy(shifted.data() + 2, row.data(), row.size());
        p->decode_row[static_cast<int>(f)](shifted.data() + 2, dim, got.data(), scratch.data());
        ExpectSameBits(Reference(f, row, dim), got, RowFormatName(f), dim);
      }
    }
  }
}

}  // namespace
}  // namespace shardrec
