// Writing an updated fp32 row into a 16-bit or FP8 shard: the host's fused backward
// (embedding/kernels/isa/fused_rows.h) updates fp16 / bf16 rows in fp32 and hands each row here
// for the shard's rounding; it encodes FP8 rows itself, with RowRoundingBits when stochastic.
#pragma once

#include <cstdint>

#include "impl/optim/optimizer.h"

namespace shardrec::optim {

// Rounds `values` (shard.cols floats) into local row `row` of a 16-bit or FP8 shard (FP8: the
// whole row encoded, core/fp8.h), to nearest even or, with config.stochastic_rounding, with the
// bits keyed by (seed, step, table, row, column), the row a dynamic table's id (RoundingRow):
// the rounding optim::Apply does. Thread-safe for
// distinct rows.
void StoreRoundedRow(const OptimizerConfig& config, int64_t step, const ShardParams& shard,
                     int64_t row, const float* values);

// The stochastic-rounding bits StoreRoundedRow draws for columns [col, col + n) of local row
// `row` (config.stochastic_rounding set), into bits[0..n): for the fused backward's own FP8
// encoder, which must round as StoreRoundedRow does. Thread-safe.
void RowRoundingBits(const OptimizerConfig& config, int64_t step, const ShardParams& shard,
                     int64_t row, int32_t col, int32_t n, uint32_t* bits);

}  // namespace shardrec::optim
