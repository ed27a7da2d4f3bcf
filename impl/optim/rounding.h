// Stochastic-rounding bits: a pure function of (seed, step, table, global row, global column), so
// an update gives the same bits on every plan, thread count, instruction-set level and device. A
// dynamic table passes the row's id as its global row (optim::RoundingRow). Host/device.
//
// Two parts, so that a row's columns share the costly one: RoundingRowKey mixes (seed, step,
// table, row) with four splitmix64 steps, once a row; RoundingColumnBits mixes a column into that
// key with two rounds of MurmurHash3's 32-bit finaliser, whose 32-bit multiplies a row's loop
// vectorizes (five 64-bit mixes per value, as the bits were drawn before, made a stochastic
// step about 5x a nearest one).
#pragma once

#include <cstdint>

#include "impl/core/host_device.h"
#include "impl/core/rng.h"

namespace shardrec::optim {

SHARDREC_HD uint64_t RoundingRowKey(uint64_t seed, int64_t step, uint64_t table_key,
                                    int64_t global_row) {
  uint64_t k = Mix64(static_cast<uint64_t>(global_row));
  k = Mix64(table_key ^ k);
  k = Mix64(static_cast<uint64_t>(step) ^ k);
  return Mix64(seed ^ k);
}

// Fmix32's two multipliers (rounding_row.cc's vector loops take them apart).
inline constexpr uint32_t kFmix32Mul1 = 0x85ebca6bu;
inline constexpr uint32_t kFmix32Mul2 = 0xc2b2ae35u;

// MurmurHash3's 32-bit finaliser: a bijection of 32-bit words with full avalanche.
SHARDREC_HD constexpr uint32_t Fmix32(uint32_t h) {
  h ^= h >> 16;
  h *= kFmix32Mul1;
  h ^= h >> 13;
  h *= kFmix32Mul2;
  return h ^ (h >> 16);
}

// The bits of column `global_col` (its low 32 bits) of the row whose key is `row_key`: distinct
// columns of a row get distinct bits (Fmix32 is a bijection), and both halves of the key count.
SHARDREC_HD constexpr uint32_t RoundingColumnBits(uint64_t row_key, int64_t global_col) {
  const uint32_t h = Fmix32(static_cast<uint32_t>(row_key) ^ static_cast<uint32_t>(global_col));
  return Fmix32(h + static_cast<uint32_t>(row_key >> 32));
}

SHARDREC_HD uint32_t RoundingBits(uint64_t seed, int64_t step, uint64_t table_key,
                                  int64_t global_row, int64_t global_col) {
  return RoundingColumnBits(RoundingRowKey(seed, step, table_key, global_row), global_col);
}

}  // namespace shardrec::optim
