// Conversion of fp32 table rows to a serving storage type: fp16/bf16 rounding and row-wise
// int8/int4 quantization (FBGEMM's convention: bias = row minimum, scale = range / (2^bits - 1)).
#pragma once

#include <cstdint>
#include <string>

#include "impl/core/status.h"
#include "impl/serving/model.h"

namespace shardrec::serving {

// What EncodeRows accepts of values that are not finite.
enum class NonFinite {
  kKeep,    // stored as given where the storage can (a checkpoint's table, as trained)
  kRefuse,  // refused in every storage (a delta's new rows)
};

// Encodes `rows` rows of `dim` floats (row stride dim) into `dst` (rows x RowBytes(s, dim)).
// kInvalidArgument naming `what` (the table, or a delta of it), the row and the column for a
// non-finite value in a quantized table (or in any table with NonFinite::kRefuse), and for a
// finite value that fp16 or bf16 would round to infinity (beyond the storage's range).
Status EncodeRows(const float* src, int64_t rows, int32_t dim, Storage s, uint8_t* dst,
                  const std::string& what, NonFinite non_finite = NonFinite::kKeep);

// Quantizes one row: writes scale and bias, then the codes (int4: two per byte, even column in
// the low nibble). `bits` is 8 or 4.
void QuantizeRow(const float* x, int32_t dim, int bits, uint8_t* dst);

}  // namespace shardrec::serving
