// Replicas that diverged, then synced once: the set-up the 2D sync's rounding tests share
// (replica_sync16_test for fp16/bf16 weights, replica_fp8_test for FP8 rows).
#pragma once

#include <cstdint>
#include <vector>

#include "tests/capi/embedding/embedding_test_util.h"

namespace shardrec::testing {

// Every table's weights on every replica, just before and just after the sync.
struct SyncedWeights {
  Scenario scenario;
  // before[t][r]: replica r's weights of table t (rows x dim, row-major) before the sync;
  // after[t][r]: after it.
  std::vector<std::vector<std::vector<float>>> before, after;
};

// `world` replicas of one rank each (sharding groups of 1, no automatic sync) train the standard
// table-wise scenario's first two batches, each its own, with every table stored as `dtype` and
// a large learning rate so the replicas really diverge; then one shardrec_mesh_sync. Test
// failures are reported through gtest (the returned weights are then incomplete).
SyncedWeights TrainApartThenSync(int32_t world, int32_t dtype);

}  // namespace shardrec::testing
