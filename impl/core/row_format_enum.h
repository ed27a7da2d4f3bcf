// The row formats' enum alone (row_format.h has the vocabulary around it): plain data with no
// inline code, so the per-instruction-set kernel files (compiled with other target flags) can
// name the formats without sharing inline library code with the rest of the library.
#pragma once

#include <cstdint>

namespace shardrec {

// Values 0-2 mirror shardrec_comm_encoding_t (the wire encodings are the float formats).
// kFp8E4M3 and kFp8E5M2 (fp8.h): serving rows and training weight storage.
enum class RowFormat : int32_t {
  kFp32 = 0,
  kFp16 = 1,
  kBf16 = 2,
  kInt8 = 3,
  kInt4 = 4,
  kFp8E4M3 = 5,
  kFp8E5M2 = 6
};
inline constexpr int kNumRowFormats = 7;

}  // namespace shardrec
