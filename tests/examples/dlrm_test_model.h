// The small DLRM the example tests train: 4 dense features, 5 tables of uneven sizes (one of 3
// rows, so row-wise shards can be empty), dim 4, two-layer bottom and top MLPs. Small enough for
// a double-precision reference and for sanitizer runs; uneven enough to reach every sharding.
#pragma once

#include <cstdint>

#include "dlrm_model.h"

namespace dlrm_test {

constexpr int kDense = 4, kSparse = 5, kDim = 4;
constexpr int64_t kRows[kSparse] = {50, 7, 200, 3, 31};
constexpr int64_t kBottom[] = {8, kDim};
constexpr int64_t kTop[] = {8, 1};

// The example's defaults with the small model's shape and `shard`-way sharding; the tests set
// the optimizers, batch and seed they need.
inline dlrm_config_t SmallConfig(int shard) {
  dlrm_config_t c;
  dlrm_config_defaults(&c);
  c.num_dense = kDense;
  c.num_sparse = kSparse;
  c.rows = kRows;
  c.emb_dim = kDim;
  c.bottom = kBottom;
  c.num_bottom = 2;
  c.top = kTop;
  c.num_top = 2;
  c.shard_size = shard;
  return c;
}

}  // namespace dlrm_test
