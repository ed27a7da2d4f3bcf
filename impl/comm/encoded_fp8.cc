// FP8 wire encoding of float collectives (encoded_fp8.h).
#include "impl/comm/encoded_fp8.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "impl/core/check.h"
#include "impl/core/fp8.h"
#include "impl/core/fp8_table.h"

namespace shardrec::comm {

namespace {

Fp8Kind KindOf(Encoding e) {
  SR_CHECK(IsFp8Format(e));
  return e == Encoding::kFp8E5M2 ? Fp8Kind::kE5M2 : Fp8Kind::kE4M3;
}

// The scale of a block from its byte (the exponent + 127, in [1, 238] as the sender writes it).
float ScaleOfByte(uint8_t b) {
  const uint32_t bits = static_cast<uint32_t>(b) << 23;
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

template <bool kAdd>
void Decode(Encoding e, const uint8_t* src, size_t n, float* dst) {
  const float* table = kFp8Decode.v[static_cast<int>(KindOf(e))];
  for (size_t at = 0; at < n; at += kFp8WireBlock) {
    const size_t len = std::min(kFp8WireBlock, n - at);
    const float scale = ScaleOfByte(*src++);
    for (size_t i = 0; i < len; ++i) {
      const float v = table[src[i]] * scale;
      if constexpr (kAdd)
        dst[at + i] += v;
      else
        dst[at + i] = v;
    }
    src += len;
  }
}

}  // namespace

void EncodeFp8Wire(Encoding e, const float* src, size_t n, uint8_t* dst) {
  const Fp8Kind kind = KindOf(e);
  uint8_t row[kFp8HeaderBytes + kFp8WireBlock];
  for (size_t at = 0; at < n; at += kFp8WireBlock) {
    const size_t len = std::min(kFp8WireBlock, n - at);
    EncodeFp8Row(kind, src + at, static_cast<int64_t>(len), row);
    uint32_t scale_bits;
    std::memcpy(&scale_bits, row, sizeof(scale_bits));
    *dst++ = static_cast<uint8_t>(scale_bits >> 23);  // a positive power of two: its exponent
    std::memcpy(dst, row + kFp8HeaderBytes, len);
    dst += len;
  }
}

void DecodeFp8Wire(Encoding e, const uint8_t* src, size_t n, float* dst) {
  Decode<false>(e, src, n, dst);
}

void DecodeAddFp8Wire(Encoding e, const uint8_t* src, size_t n, float* dst) {
  Decode<true>(e, src, n, dst);
}

}  // namespace shardrec::comm
