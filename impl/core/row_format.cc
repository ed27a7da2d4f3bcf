// Names of the row formats (row_format.h).
#include "impl/core/row_format.h"

namespace shardrec {

const char* RowFormatName(RowFormat f) {
  switch (f) {
    case RowFormat::kFp32:
      return "fp32";
    case RowFormat::kFp16:
      return "fp16";
    case RowFormat::kBf16:
      return "bf16";
    case RowFormat::kInt8:
      return "int8";
    case RowFormat::kInt4:
      return "int4";
    case RowFormat::kFp8E4M3:
      return "fp8_e4m3";
    case RowFormat::kFp8E5M2:
      return "fp8_e5m2";
  }
  return "?";
}

bool RowFormatFromName(std::string_view name, RowFormat* out) {
  for (int32_t v = 0; v < kNumRowFormats; ++v) {
    const auto f = static_cast<RowFormat>(v);
    if (name == RowFormatName(f)) {
      *out = f;
      return true;
    }
  }
  return false;
}

}  // namespace shardrec
