// The row-wise quantization parameters (scale, bias) of a served int8/int4 table's rows, for
// callers that bound a lookup's error: each value reads back within scale / 2 of the trained one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "impl/core/status.h"
#include "impl/serving/model.h"

namespace shardrec::serving {

// For each of ids[0..n), the scale and bias of its stored row in `m`'s table `table`: a fixed
// table's row index in [0, rows), any id of a dynamic table (one without a row reads the zero
// row: scale 0, bias 0). biases may be null. kNotFound for an unknown table; kInvalidArgument
// for a table not stored as int8/int4 or a fixed table's index out of range (naming it; nothing
// is written then).
Status RowQuantization(const Model& m, const std::string& table, const int64_t* ids, size_t n,
                       float* scales, float* biases);

}  // namespace shardrec::serving
