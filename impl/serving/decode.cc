// Portable row decoders (plain loops the compiler vectorises), and the choice of the fp16
// decoder by the host's instruction set. Every decoder gives the same bits: fp16 and bf16 widen
// exactly, and dequantization is one multiply and one add in fp32.
#include "impl/serving/decode.h"

#include <cstring>

#include "impl/core/cpu_features.h"
#include "impl/core/half.h"

namespace shardrec::serving {
namespace {

void DecodeFp16(const uint8_t* row, int32_t dim, float* out, uint8_t*) {
  for (int32_t c = 0; c < dim; ++c) {
    uint16_t h;
    std::memcpy(&h, row + 2 * c, 2);
    out[c] = HalfToFloat(h);
  }
}

void DecodeBf16(const uint8_t* row, int32_t dim, float* out, uint8_t*) {
  for (int32_t c = 0; c < dim; ++c) {
    uint16_t h;
    std::memcpy(&h, row + 2 * c, 2);
    const uint32_t bits = static_cast<uint32_t>(h) << 16;
    std::memcpy(out + c, &bits, 4);
  }
}

inline void Dequantize(const uint8_t* row, const uint8_t* codes, int32_t dim, float* out) {
  float scale, bias;
  std::memcpy(&scale, row, 4);
  std::memcpy(&bias, row + 4, 4);
  for (int32_t c = 0; c < dim; ++c) out[c] = static_cast<float>(codes[c]) * scale + bias;
}

void DecodeInt8(const uint8_t* row, int32_t dim, float* out, uint8_t*) {
  Dequantize(row, row + kQuantHeaderBytes, dim, out);
}

void DecodeInt4(const uint8_t* row, int32_t dim, float* out, uint8_t* scratch) {
  const uint8_t* packed = row + kQuantHeaderBytes;
  const int32_t bytes = (dim + 1) / 2;
  for (int32_t k = 0; k < bytes; ++k) {
    scratch[2 * k] = packed[k] & 0xF;
    scratch[2 * k + 1] = packed[k] >> 4;
  }
  Dequantize(row, scratch, dim, out);
}

}  // namespace

DecodeFn DecoderFor(Storage s) {
  switch (s) {
    case Storage::kFp16:
#if SHARDREC_SERVING_F16C
      if (HostCpu().f16c && HostCpu().avx) return &DecodeFp16F16c;
#endif
      return &DecodeFp16;
    case Storage::kBf16:
      return &DecodeBf16;
    case Storage::kInt8:
      return &DecodeInt8;
    case Storage::kInt4:
      return &DecodeInt4;
    case Storage::kFp32:
    case Storage::kAsTrained:
      break;
  }
  return nullptr;
}

}  // namespace shardrec::serving
