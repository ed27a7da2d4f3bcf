// A row's stochastic-rounding bits in one call, vectorized (host only; rounding.h defines them).
#pragma once

#include <cstdint>

namespace shardrec::optim {

// bits[i] = RoundingColumnBits(row_key, first_col + i) for i in [0, n) (bits may be null when n
// is 0). Computed in AVX-512 or AVX2 registers where the host has them, with integer operations
// only, so every level writes the same bits. Thread-safe.
void RoundingRowBits(uint64_t row_key, int64_t first_col, int32_t n, uint32_t* bits);

// The instruction-set levels RoundingRowBits has a loop for (it takes the widest the host runs).
enum class RoundingBitsLevel : int32_t { kBaseline = 0, kAvx2 = 1, kAvx512 = 2 };

// RoundingRowBits at one level, for tests that check every level against the others: false,
// nothing written, when the host cannot run `level` (or it is not x86-64 and level is not
// kBaseline). Thread-safe.
bool RoundingRowBitsAt(RoundingBitsLevel level, uint64_t row_key, int64_t first_col, int32_t n,
                       uint32_t* bits);

}  // namespace shardrec::optim
