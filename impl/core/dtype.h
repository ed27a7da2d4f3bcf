// Element types shared by every module; values mirror shardrec_dtype_t.
#pragma once

#include <cstddef>
#include <cstdint>

namespace shardrec {

enum class DType : int32_t {
  kFloat32 = 0,
  kFloat16 = 1,
  kBFloat16 = 2,
  kFloat64 = 3,
  kInt32 = 4,
  kInt64 = 5,
  kUInt8 = 6,
  // Table weight storage only (never a tensor's element type): FP8 rows (fp8.h), each an fp32
  // power-of-two scale then one code a value. DTypeSize is the code's byte; a row takes
  // Fp8RowBytes(dim).
  kFp8E4M3 = 7,
  kFp8E5M2 = 8,
};

constexpr size_t DTypeSize(DType t) {
  switch (t) {
    case DType::kFloat32:
      return 4;
    case DType::kFloat16:
      return 2;
    case DType::kBFloat16:
      return 2;
    case DType::kFloat64:
      return 8;
    case DType::kInt32:
      return 4;
    case DType::kInt64:
      return 8;
    case DType::kUInt8:
    case DType::kFp8E4M3:
    case DType::kFp8E5M2:
      return 1;
  }
  return 0;
}

// The element types of tensors (what IsValidDType accepts); the FP8 values are weight storage
// types only (IsWeightDType).
constexpr bool IsValidDType(int32_t v) { return v >= 0 && v <= 6; }
inline constexpr int32_t kMaxDTypeValue = 8;

constexpr bool IsFp8DType(DType t) { return t == DType::kFp8E4M3 || t == DType::kFp8E5M2; }
// The types a table may store its weights in: fp32, fp16, bf16, FP8 E4M3 / E5M2.
constexpr bool IsWeightDType(DType t) {
  return t == DType::kFloat32 || t == DType::kFloat16 || t == DType::kBFloat16 || IsFp8DType(t);
}
// Bytes of one stored row of `dim` values of an FP8 dtype: the 4-byte scale, then the codes.
constexpr int64_t Fp8RowBytes(int64_t dim) { return dim + 4; }

constexpr const char* DTypeName(DType t) {
  switch (t) {
    case DType::kFloat32:
      return "float32";
    case DType::kFloat16:
      return "float16";
    case DType::kBFloat16:
      return "bfloat16";
    case DType::kFloat64:
      return "float64";
    case DType::kInt32:
      return "int32";
    case DType::kInt64:
      return "int64";
    case DType::kUInt8:
      return "uint8";
    case DType::kFp8E4M3:
      return "fp8_e4m3";
    case DType::kFp8E5M2:
      return "fp8_e5m2";
  }
  return "unknown";
}

}  // namespace shardrec
