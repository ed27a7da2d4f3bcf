// Internal helpers of the CPU kernels: loading fp32/fp16/bf16 weight elements as fp32 and
// software prefetch of whole rows.
#pragma once

#include <cstdint>

#include "impl/core/half.h"

namespace shardrec::embedding::kernels::detail {

template <typename T>
inline float LoadAsFloat(T v);
template <>
inline float LoadAsFloat<float>(float v) {
  return v;
}

// fp16 and bf16 are stored as raw 16-bit patterns; these tags select the conversion.
struct Half {
  uint16_t bits;
};
struct BFloat16 {
  uint16_t bits;
};
template <>
inline float LoadAsFloat<Half>(Half v) {
  return HalfToFloat(v.bits);
}
template <>
inline float LoadAsFloat<BFloat16>(BFloat16 v) {
  return BFloat16ToFloat(v.bits);
}

// Touches every 64-byte line of a row so the loads of a later iteration hit in cache.
inline void PrefetchRow(const void* p, int64_t bytes) {
  const char* c = static_cast<const char*>(p);
  for (int64_t off = 0; off < bytes; off += 64) __builtin_prefetch(c + off, 0, 3);
}

inline void PrefetchRowForWrite(const void* p, int64_t bytes) {
  const char* c = static_cast<const char*>(p);
  for (int64_t off = 0; off < bytes; off += 64) __builtin_prefetch(c + off, 1, 3);
}

}  // namespace shardrec::embedding::kernels::detail
