// One element of an fp32 / fp16 / bf16 buffer, read as fp32 or written from fp32 (round to
// nearest even), at any alignment; and plain values appended to or read from a byte buffer.
// Used where rows of any storage type travel through byte buffers (checkpoints, table
// export/import, dynamic tables' delta and merge), so each reads and writes them the same way.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "impl/core/dtype.h"
#include "impl/core/half.h"

namespace shardrec {

// The element at `p` of a buffer of `dtype` (kFloat32, kFloat16 or kBFloat16) as fp32.
inline float LoadElement(DType dtype, const uint8_t* p) {
  if (dtype == DType::kFloat32) {
    float x;
    std::memcpy(&x, p, sizeof(x));
    return x;
  }
  uint16_t h;
  std::memcpy(&h, p, sizeof(h));
  return dtype == DType::kFloat16 ? HalfToFloat(h) : BFloat16ToFloat(h);
}

// Writes `x` at `p` as an element of `dtype` (kFloat32, kFloat16 or kBFloat16).
inline void StoreElement(DType dtype, float x, uint8_t* p) {
  if (dtype == DType::kFloat32) {
    std::memcpy(p, &x, sizeof(x));
    return;
  }
  const uint16_t h = dtype == DType::kFloat16 ? FloatToHalf(x) : FloatToBFloat16(x);
  std::memcpy(p, &h, sizeof(h));
}

// Appends the bytes of `v` to `b`.
template <typename T>
void PutValue(std::vector<uint8_t>* b, T v) {
  const size_t at = b->size();
  b->resize(at + sizeof(T));
  std::memcpy(b->data() + at, &v, sizeof(T));
}

// Reads a T at `p` and moves `p` past it. The caller has checked that the bytes are there.
template <typename T>
T GetValue(const uint8_t*& p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  p += sizeof(T);
  return v;
}

}  // namespace shardrec
