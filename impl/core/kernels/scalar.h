// Internal: exact scalar widening of fp16 and bf16 elements for the pooled kernel (the columns
// past the last full vector, and the baseline level's fp16 loads): the bits of
// impl/core/half.h's HalfToFloat and BFloat16ToFloat, NaN payloads kept. Internal linkage (an
// anonymous namespace): each per-level translation unit keeps its own copy.
#pragma once

#include <cstdint>
#include <cstring>

namespace shardrec::core::kernels {
namespace {

inline float ScalarF16(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    const float v = static_cast<float>(mant) * (1.0f / 16777216.0f);
    std::memcpy(&bits, &v, 4);
    bits |= sign;
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 112u) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

inline float ScalarBf16(uint16_t h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

}  // namespace
}  // namespace shardrec::core::kernels
