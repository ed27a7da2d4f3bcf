// Conversion of fp32 table rows to a serving storage type: fp16/bf16 rounding and row-wise
// int8/int4 quantization (FBGEMM's convention: bias = row minimum, scale = range / (2^bits - 1)).
#pragma once

#include <cstdint>
#include <string>

#include "impl/core/status.h"
#include "impl/serving/model.h"

namespace shardrec::serving {

// Encodes `rows` rows of `dim` floats (row stride dim) into `dst` (rows x RowBytes(s, dim)).
// kInvalidArgument naming `table` and the row for a non-finite value in a quantized table.
Status EncodeRows(const float* src, int64_t rows, int32_t dim, Storage s, uint8_t* dst,
                  const std::string& table);

// Quantizes one row: writes scale and bias, then the codes (int4: two per byte, even column in
// the low nibble). `bits` is 8 or 4.
void QuantizeRow(const float* x, int32_t dim, int bits, uint8_t* dst);

}  // namespace shardrec::serving
