// A row's stochastic-rounding bits in one call, and a bf16 row rounded with them, vectorized (host
// only; rounding.h defines the bits).
#pragma once

#include <cstdint>

namespace shardrec::optim {

// bits[i] = RoundingColumnBits(row_key, first_col + i) for i in [0, n) (bits may be null when n
// is 0). Computed in AVX-512 or AVX2 registers where the host has them, with integer operations
// only, so every level writes the same bits. Thread-safe.
void RoundingRowBits(uint64_t row_key, int64_t first_col, int32_t n, uint32_t* bits);

// out[i] = FloatToBFloat16Stochastic(in[i], RoundingColumnBits(row_key, first_col + i)) for i in
// [0, n) (in and out may be null when n is 0): a bf16 row's stochastic rounding with its bits
// drawn in the same vector registers, at the level RoundingRowBits takes. Thread-safe.
void RoundBf16RowStochastic(uint64_t row_key, int64_t first_col, int32_t n, const float* in,
                            uint16_t* out);

// The instruction-set levels RoundingRowBits has a loop for (it takes the widest the host runs).
enum class RoundingBitsLevel : int32_t { kBaseline = 0, kAvx2 = 1, kAvx512 = 2 };

// RoundingRowBits at one level, for tests that check every level against the others: false,
// nothing written, when the host cannot run `level` (or it is not x86-64 and level is not
// kBaseline). Thread-safe.
bool RoundingRowBitsAt(RoundingBitsLevel level, uint64_t row_key, int64_t first_col, int32_t n,
                       uint32_t* bits);

// RoundBf16RowStochastic at one level, as RoundingRowBitsAt: false, nothing written, when the
// host cannot run `level`. Thread-safe.
bool RoundBf16RowStochasticAt(RoundingBitsLevel level, uint64_t row_key, int64_t first_col,
                              int32_t n, const float* in, uint16_t* out);

}  // namespace shardrec::optim
