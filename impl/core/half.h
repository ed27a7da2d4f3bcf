// fp32 <-> fp16/bf16 conversions, the one implementation every module uses (weight storage,
// optimizer updates, 16-bit reductions in comm): round to nearest even, or stochastic rounding
// driven by caller-supplied random bits. Pure bit manipulation, host/device.
#pragma once

#include <cstdint>
#include <cstring>

#include "impl/core/host_device.h"

namespace shardrec {

SHARDREC_HD uint32_t FloatBits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof(u));
  return u;
}

SHARDREC_HD float BitsFloat(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof(f));
  return f;
}

// Both conversions compute every case and select one, without branches, so that loops over them
// vectorise (the wire codec of impl/comm relies on it); the results are the same as branching.
SHARDREC_HD float HalfToFloat(uint16_t h) {
#if defined(__CUDA_ARCH__)
  // The hardware conversion is exact: the same value as the bit manipulation below.
  float out;
  asm("cvt.f32.f16 %0, %1;" : "=f"(out) : "h"(h));
  return out;
#else
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  // Subnormal (or zero): mant * 2^-24 is exact in fp32.
  const uint32_t sub = FloatBits(static_cast<float>(mant) * (1.0f / 16777216.0f)) | sign;
  const uint32_t inf_nan = sign | 0x7f800000u | (mant << 13);
  const uint32_t normal = sign | ((exp + 112u) << 23) | (mant << 13);
  return BitsFloat(exp == 0 ? sub : exp == 31 ? inf_nan : normal);
#endif
}

SHARDREC_HD uint16_t FloatToHalf(float f) {
  const uint32_t x = FloatBits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t ax = x & 0x7fffffffu;
  // Normal range: rebias the exponent (-112) and round to nearest even.
  const uint32_t normal = (ax + 0xc8000fffu + ((ax >> 13) & 1u)) >> 13;
  // Below the smallest normal half: adding 0.5 makes the fp32 adder round to a multiple of
  // 2^-24 (the half subnormal step) with round-to-nearest-even.
  const uint32_t sub = FloatBits(BitsFloat(ax < 0x38800000u ? ax : 0u) + 0.5f) - 0x3f000000u;
  uint32_t h = ax < 0x38800000u ? sub : normal;
  h = ax >= 0x477ff000u ? 0x7c00u : h;  // >= 65520 rounds to inf; inf stays inf
  h = ax > 0x7f800000u ? 0x7e00u : h;   // NaN: a quiet NaN
  return static_cast<uint16_t>(sign | h);
}

SHARDREC_HD float BFloat16ToFloat(uint16_t h) { return BitsFloat(static_cast<uint32_t>(h) << 16); }

SHARDREC_HD uint16_t FloatToBFloat16(float f) {
  uint32_t x = FloatBits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u)
    return static_cast<uint16_t>((x >> 16) | 0x40u);  // quiet NaN
  x += 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(x >> 16);
}

// Rounds up in magnitude with probability equal to the discarded fraction; `bits` uniform.
SHARDREC_HD uint16_t FloatToBFloat16Stochastic(float f, uint32_t bits) {
  uint32_t x = FloatBits(f);
  if ((x & 0x7fffffffu) >= 0x7f800000u) return FloatToBFloat16(f);
  uint32_t r = x + (bits & 0xffffu);
  // Never round a finite value up to infinity.
  if ((r & 0x7f800000u) == 0x7f800000u) r = (x & 0x80000000u) | 0x7f7f0000u;
  return static_cast<uint16_t>(r >> 16);
}

SHARDREC_HD uint16_t FloatToHalfStochastic(float f, uint32_t bits) {
  uint16_t h = FloatToHalf(f);
  float fh = HalfToFloat(h);
  float af = f < 0 ? -f : f;
  float ah = fh < 0 ? -fh : fh;
  if (!(af == af) || ah == af || (h & 0x7fffu) >= 0x7c00u) {
    if ((h & 0x7fffu) == 0x7c00u && af == af && af < 3.4e38f)
      return static_cast<uint16_t>(h - 1);  // saturate
    return h;
  }
  // Magnitude neighbours lo < |f| < hi; half bit patterns are monotonic in magnitude.
  uint16_t lo = ah > af ? static_cast<uint16_t>(h - 1) : h;
  uint16_t hi = static_cast<uint16_t>(lo + 1);
  float alo = HalfToFloat(lo & 0x7fffu);
  float ahi = HalfToFloat(hi & 0x7fffu);
  float p = (af - alo) / (ahi - alo);
  float u = static_cast<float>(bits >> 8) * (1.0f / 16777216.0f);
  uint16_t pick = u < p ? hi : lo;
  if ((pick & 0x7fffu) >= 0x7c00u) pick = static_cast<uint16_t>(pick - 1);
  return pick;
}

}  // namespace shardrec
