// The formats an embedding row is held or sent in: one vocabulary for the training kernels (a
// table's weight storage), serving (a table's stored rows) and communication (the wire encodings
// of quantized collectives). Each place accepts the subset it implements (training: the float
// formats; the wire: fp32, fp16, bf16; serving: all) and names the others with the same words.
//
// Row-wise quantized rows (int8, int4) start with an fp32 scale and an fp32 bias (value = code x
// scale + bias), then the codes; int4 packs two codes a byte, the low nibble first.
// FP8 rows (E4M3, E5M2: fp8.h) start with an fp32 power-of-two scale (kFp8HeaderBytes), then one
// code a value (value = decoded code x scale); serving and training storage (SHARDREC_DTYPE_FP8_*
// tables) accept them.
#pragma once

#include <cstdint>
#include <string_view>

#include "impl/core/dtype.h"
#include "impl/core/row_format_enum.h"

namespace shardrec {

// The bytes of a quantized row's header (scale, bias).
inline constexpr uint64_t kQuantHeaderBytes = 8;

constexpr bool IsValidRowFormat(int32_t v) { return v >= 0 && v < kNumRowFormats; }
// fp32, fp16, bf16: one element per value, no header.
constexpr bool IsFloatFormat(RowFormat f) {
  return f == RowFormat::kFp32 || f == RowFormat::kFp16 || f == RowFormat::kBf16;
}
constexpr bool IsRowWiseQuantized(RowFormat f) {
  return f == RowFormat::kInt8 || f == RowFormat::kInt4;
}
constexpr bool IsFp8Format(RowFormat f) {
  return f == RowFormat::kFp8E4M3 || f == RowFormat::kFp8E5M2;
}
// The bytes of an FP8 row's header (its scale; fp8.h's kFp8HeaderBytes).
inline constexpr uint64_t kFp8RowHeaderBytes = 4;
// Bits of one stored value (the header not counted).
constexpr int ValueBits(RowFormat f) {
  switch (f) {
    case RowFormat::kFp32:
      return 32;
    case RowFormat::kFp16:
    case RowFormat::kBf16:
      return 16;
    case RowFormat::kInt8:
    case RowFormat::kFp8E4M3:
    case RowFormat::kFp8E5M2:
      return 8;
    case RowFormat::kInt4:
      return 4;
  }
  return 0;
}
// Bytes of one row of `dim` values, header included.
constexpr uint64_t RowBytes(RowFormat f, int64_t dim) {
  const auto d = static_cast<uint64_t>(dim);
  const uint64_t values = (d * static_cast<uint64_t>(ValueBits(f)) + 7) / 8;
  return IsRowWiseQuantized(f) ? kQuantHeaderBytes + values
         : IsFp8Format(f)      ? kFp8RowHeaderBytes + values
                               : values;
}

// "fp32", "fp16", "bf16", "int8", "int4", "fp8_e4m3", "fp8_e5m2"; "?" for a value outside the enum.
const char* RowFormatName(RowFormat f);
bool RowFormatFromName(std::string_view name, RowFormat* out);

// The float format of a weight dtype (kFloat32, kFloat16, kBFloat16); false for another dtype.
constexpr bool RowFormatOf(DType t, RowFormat* out) {
  switch (t) {
    case DType::kFloat32:
      *out = RowFormat::kFp32;
      return true;
    case DType::kFloat16:
      *out = RowFormat::kFp16;
      return true;
    case DType::kBFloat16:
      *out = RowFormat::kBf16;
      return true;
    default:
      return false;
  }
}
// The row format of a weight dtype its caller has checked (kFloat16, kBFloat16, the FP8 ones,
// else fp32).
constexpr RowFormat FloatFormatOf(DType t) {
  return t == DType::kFloat16    ? RowFormat::kFp16
         : t == DType::kBFloat16 ? RowFormat::kBf16
         : t == DType::kFp8E4M3  ? RowFormat::kFp8E4M3
         : t == DType::kFp8E5M2  ? RowFormat::kFp8E5M2
                                 : RowFormat::kFp32;
}
// The element type of a float format (kFloat32 for a quantized one, whose values decode to it).
constexpr DType ValueType(RowFormat f) {
  return f == RowFormat::kFp16   ? DType::kFloat16
         : f == RowFormat::kBf16 ? DType::kBFloat16
                                 : DType::kFloat32;
}

}  // namespace shardrec
