// Body of the codec passes (codec.h), included once per instruction-set level inside that level's
// namespace. Plain loops over the half.h conversions: the compiler vectorises them for the level.
// Needs impl/core/half.h included first (outside any namespace).

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

constexpr Passes kPasses{ToHalf, ToBf16, FromHalf, FromBf16, AddHalf, AddBf16};

}  // namespace
