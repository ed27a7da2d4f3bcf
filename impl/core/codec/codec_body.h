// Body of the codec passes (codec.h), included once per instruction-set level inside that level's
// namespace. Plain loops over the half.h conversions: the compiler vectorises them for the level.
// Needs impl/core/half.h, impl/core/fp8_table.h and <cstring> included first (outside any
// namespace).

namespace {

// fp16 with saturation: a finite value beyond the largest half (65504) becomes +-65504 instead
// of an infinity, so a large but finite pooled sum or gradient stays finite on the other side.
inline uint16_t ToHalfSaturating(float f) {
  const uint32_t x = FloatBits(f);
  const uint32_t ax = x & 0x7fffffffu;
  const uint16_t sat = static_cast<uint16_t>(((x >> 16) & 0x8000u) | 0x7bffu);
  const uint16_t h = FloatToHalf(f);
  return ax > 0x477fe000u && ax < 0x7f800000u ? sat : h;
}

void ToHalf(const float* src, size_t n, uint16_t* dst) {
  for (size_t i = 0; i < n; ++i) dst[i] = ToHalfSaturating(src[i]);
}
void ToBf16(const float* src, size_t n, uint16_t* dst) {
  for (size_t i = 0; i < n; ++i) dst[i] = FloatToBFloat16(src[i]);
}
void FromHalf(const uint16_t* src, size_t n, float* dst) {
  for (size_t i = 0; i < n; ++i) dst[i] = HalfToFloat(src[i]);
}
void FromBf16(const uint16_t* src, size_t n, float* dst) {
  for (size_t i = 0; i < n; ++i) dst[i] = BFloat16ToFloat(src[i]);
}
void AddHalf(const uint16_t* src, size_t n, float* dst) {
  for (size_t i = 0; i < n; ++i) dst[i] += HalfToFloat(src[i]);
}
void AddBf16(const uint16_t* src, size_t n, float* dst) {
  for (size_t i = 0; i < n; ++i) dst[i] += BFloat16ToFloat(src[i]);
}

// Rows are read through memcpy: a row of a mapped file or a byte buffer is not a uint16_t array.
void DecodeRowFp16(const uint8_t* row, int32_t dim, float* out, uint8_t*) {
  for (int32_t c = 0; c < dim; ++c) {
    uint16_t h;
    std::memcpy(&h, row + 2 * c, 2);
    out[c] = HalfToFloat(h);
  }
}
void DecodeRowBf16(const uint8_t* row, int32_t dim, float* out, uint8_t*) {
  for (int32_t c = 0; c < dim; ++c) {
    uint16_t h;
    std::memcpy(&h, row + 2 * c, 2);
    out[c] = BFloat16ToFloat(h);
  }
}
inline void Dequantize(const uint8_t* row, const uint8_t* codes, int32_t dim, float* out) {
  float scale, bias;
  std::memcpy(&scale, row, 4);
  std::memcpy(&bias, row + 4, 4);
  for (int32_t c = 0; c < dim; ++c) out[c] = static_cast<float>(codes[c]) * scale + bias;
}
void DecodeRowInt8(const uint8_t* row, int32_t dim, float* out, uint8_t*) {
  Dequantize(row, row + 8, dim, out);  // after the scale and bias (kQuantHeaderBytes)
}
void DecodeRowInt4(const uint8_t* row, int32_t dim, float* out, uint8_t* scratch) {
  const uint8_t* packed = row + 8;
  const int32_t bytes = (dim + 1) / 2;
  for (int32_t k = 0; k < bytes; ++k) {
    scratch[2 * k] = packed[k] & 0xF;
    scratch[2 * k + 1] = packed[k] >> 4;
  }
  Dequantize(row, scratch, dim, out);
}
// FP8 rows (row_format.h): the scale, then one code a value, decoded by table (exact) and scaled.
template <int kKind>
void DecodeRowFp8(const uint8_t* row, int32_t dim, float* out, uint8_t*) {
  float scale;
  std::memcpy(&scale, row, 4);
  const float* table = ::shardrec::kFp8Decode.v[kKind];
  const uint8_t* codes = row + 4;  // kFp8RowHeaderBytes
  for (int32_t c = 0; c < dim; ++c) out[c] = table[codes[c]] * scale;
}

constexpr Passes kPasses{ToHalf,
                         ToBf16,
                         FromHalf,
                         FromBf16,
                         AddHalf,
                         AddBf16,
                         {nullptr, DecodeRowFp16, DecodeRowBf16, DecodeRowInt8, DecodeRowInt4,
                          DecodeRowFp8<0>, DecodeRowFp8<1>}};

}  // namespace
