// A row's stochastic-rounding bits in one call, vectorized (host only; rounding.h defines them).
#pragma once

#include <cstdint>

namespace shardrec::optim {

// bits[i] = RoundingColumnBits(row_key, first_col + i) for i in [0, n) (bits may be null when n
// is 0). Computed in AVX-512 or AVX2 registers where the host has them, with integer operations
// only, so every level writes the same bits. Thread-safe.
void RoundingRowBits(uint64_t row_key, int64_t first_col, int32_t n, uint32_t* bits);

}  // namespace shardrec::optim
