// Shared helpers of the tiered-table tests: a scenario of tables larger than a cache that one
// batch fits, its tiers, and the training run of a collection (tiered or in memory) through the
// C API that the tests compare bit for bit.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "shardrec/checkpoint.h"
#include "shardrec/embedding.h"
#include "shardrec/tier.h"
#include "tests/capi/embedding/embedding_test_util.h"

namespace shardrec::testing {

// Three tables of 200, 300 and 120 rows (dims 8, 12, 16; t1 read by two features), `sharding`
// for all, 6 samples per rank of up to 4 ids per bag, 6 steps.
Scenario TieredScenario(int32_t world, int32_t sharding, int32_t optimizer, int32_t dtype,
                        int32_t pooling, bool weighted);

// Cache bytes that give every shard of table `t` of `s` about `slots` slots, whatever the most
// shards of it one rank holds (column-wise: up to dim / 4).
int64_t CacheBytesFor(const Scenario& s, size_t t, int64_t slots);

// A fresh directory under the test temporary directory (removed first if it exists).
std::string FreshDir(const std::string& name);

// What one run leaves on each rank.
struct TieredRun {
  std::vector<std::vector<float>> out;       // per forward (steps + 1), the output
  std::vector<std::vector<float>> snap;      // every table's weights and states (Snapshot)
  std::vector<shardrec_tier_stats_t> stats;  // per table (tiered runs)
};

// Trains a collection of `s` (plan `plan`) for s.steps steps and one more forward, per rank;
// `tiers` (per rank the same array, its dir suffixed with the rank) make tables tiered, empty:
// in memory. `pipelined`: input_dist_start of batch i+1 before the backward of batch i.
// `snapshot` (default: s) names the tables whose weights and states the run snapshots.
// `load_dir` (when not null): the collection first loads that checkpoint (with `load_options`,
// null: defaults); `save_dir` (when not null): it saves one there after the snapshot.
std::vector<TieredRun> RunTiered(const Scenario& s, const shardrec_plan_t* plan,
                                 const std::vector<shardrec_table_tier_t>& tiers, bool pipelined,
                                 const Scenario* snapshot = nullptr, const char* load_dir = nullptr,
                                 const char* save_dir = nullptr,
                                 const shardrec_checkpoint_options_t* load_options = nullptr);

// The first difference between two float vectors, bit for bit ("" when identical).
std::string FirstBitDifference(const std::vector<float>& a, const std::vector<float>& b);

}  // namespace shardrec::testing
