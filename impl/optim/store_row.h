// Writing an updated fp32 row into a 16-bit or FP8 shard: the host's fused backward
// (embedding/kernels/isa/fused_rows.h) updates fp16 / bf16 rows (and FP8 rows under stochastic
// rounding) in fp32 and hands each row here for the shard's rounding.
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

}  // namespace shardrec::optim
