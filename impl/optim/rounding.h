// Stochastic-rounding bits: a pure function of (seed, step, table, global row, global column), so
// a 16-bit update gives the same bits on every plan, thread count and device. A dynamic table
// passes the row's id as its global row (optim::RoundingRow). Host/device.
#pragma once

#include <cstdint>

#include "impl/core/host_device.h"
#include "impl/core/rng.h"

namespace shardrec::optim {

SHARDREC_HD uint32_t RoundingBits(uint64_t seed, int64_t step, uint64_t table_key,
                                  int64_t global_row, int64_t global_col) {
  uint64_t k = Mix64(static_cast<uint64_t>(global_col));
  k = Mix64(static_cast<uint64_t>(global_row) ^ k);
  k = Mix64(table_key ^ k);
  k = Mix64(static_cast<uint64_t>(step) ^ k);
  return static_cast<uint32_t>(Mix64(seed ^ k) >> 32);
}

}  // namespace shardrec::optim
