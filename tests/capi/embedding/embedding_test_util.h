// Shared helpers of the embedding C API tests: scenarios (tables, sharding types, optimizer,
// batches), plans built through the planner's constraints, cached communicator groups, KJT
// views, and the sharded-vs-reference training run.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "shardrec/comm.h"
#include "shardrec/embedding.h"
#include "shardrec/plan.h"
#include "tests/support/reference_model.h"

namespace shardrec::testing {

struct PlanDeleter {
  void operator()(shardrec_plan_t* p) const { shardrec_plan_destroy(p); }
};
using PlanPtr = std::unique_ptr<shardrec_plan_t, PlanDeleter>;

struct CollDeleter {
  void operator()(shardrec_embedding_t* c) const { shardrec_embedding_destroy(c); }
};
using CollPtr = std::unique_ptr<shardrec_embedding_t, CollDeleter>;

struct Scenario {
  int32_t world = 2;
  int32_t ranks_per_node = 2;
  int32_t num_features = 0;
  std::vector<RefTable> tables;
  std::vector<int32_t> sharding;  // per table, a SHARDREC_SHARDING_* value
  int32_t min_partition = 4;
  RefOptimizer optimizer;
  bool weighted = false;
  bool int32_ids = false;
  std::vector<int64_t> batch_sizes;  // per rank; empty means 4 each
  int32_t max_bag = 4;
  int32_t steps = 3;
  uint64_t seed = 11;
  uint64_t data_seed = 5;
  int32_t num_threads = 1;  // per rank (shardrec_embedding_options_t.num_threads)
};

// Four features over three tables: t0 (10 rows, dim 8), t1 (23 rows, dim 12, read by two
// features), t2 (5 rows, dim 16: fewer rows than ranks per row block at world 4).
// Sequence scenarios use dim 8 everywhere.
Scenario StandardScenario(int32_t world, int32_t sharding_type, int32_t pooling);

// StandardScenario with every table stored as `dtype` and at most two ranks per node (the
// FP8 and 16-bit tests' set-up).
Scenario DTypeScenario(int32_t world, int32_t dtype, int32_t sharding_type, int32_t pooling);

// Test-name tags of the sharding types, indexed by SHARDREC_SHARDING_* value.
inline constexpr const char* kShardingTypeNames[] = {"DP",   "TW",   "RW",  "CW",
                                                     "TWRW", "TWCW", "GRID"};

// The plan of a scenario; every table restricted to its sharding type.
PlanPtr MakePlan(const Scenario& s);

// Communicators of an in-process group of `world` ranks, created once and reused.
shardrec_comm_t* GroupComm(int32_t world, int32_t rank);

// A world-1 SGD plan of `table` alone, read by one feature "f", the planner told any memory
// fits (tests of what creation refuses); null (with a test failure) when planning fails.
PlanPtr OneTablePlan(shardrec_table_config_t table);
// The same plan's status, for tests of what planning refuses (*out null unless OK).
shardrec_status_t PlanOneTable(shardrec_table_config_t table, PlanPtr* out);

// MemAvailable of /proc/meminfo in KiB, or 0 where it cannot be read (what the library checks
// arenas against before it writes them).
uint64_t MemAvailableKiB();

// batches[step][rank] and grads[step][rank] (uniform in [-1, 1], output-shaped).
std::vector<std::vector<RefBatch>> MakeBatches(const Scenario& s, const ReferenceModel& ref);
std::vector<std::vector<std::vector<float>>> MakeGrads(const Scenario& s,
                                                       const std::vector<std::vector<RefBatch>>& b,
                                                       int64_t output_dim);

// Owns int32 copies of ids when needed and exposes a KJT view of a RefBatch.
class KjtHolder {
 public:
  KjtHolder(const RefBatch& b, int32_t num_features, bool int32_ids);
  const shardrec_kjt_view_t* view() const { return &view_; }

 private:
  std::vector<int32_t> ids32_;
  shardrec_kjt_view_t view_;
};

shardrec_optimizer_config_t ToCOptimizer(const RefOptimizer& o);

// Rank r's collection of `plan` (s's optimizer and threads per rank, seeded `seed`); null, with
// a test failure, when creation fails.
CollPtr CreateRank(const Scenario& s, shardrec_plan_t* plan, int r, uint64_t seed);

// A table's weights read through the (collective) accessor; a test failure when it fails.
std::vector<float> GetWeights(shardrec_embedding_t* c, const RefTable& t);

// Number of elements where |a - b| > rtol * |b| + atol; `what` describes the first in `first`.
size_t CountMismatches(const std::vector<float>& a, const std::vector<float>& b, float rtol,
                       float atol, std::string* first);

// Number of values that are not exactly representable in `dtype` (RefTable::dtype), i.e.
// whose round trip through the storage type is not the identity; describes the first.
size_t CountNotRepresentable(const std::vector<float>& values, int32_t dtype, std::string* first);
// Number of rows (of `dim` values) that RoundRowToFp8 changes, i.e. that are no decoded FP8 row
// of `dtype` (7, 8); describes the first.
size_t CountRowsNotFp8(const std::vector<float>& values, int32_t dim, int32_t dtype,
                       std::string* first);

// Trains the sharded collection and the reference for s.steps steps and checks forward
// outputs every step, then all weights and optimizer states. Uses gtest assertions. Runs with
// fp16/bf16 tables compare at a relative 1e-2 and check that every weight read back is a
// value of its storage type. With `snapshots`, (*snapshots)[r] receives rank r's Snapshot after
// the last step.
void RunEquivalence(const Scenario& s,
                    std::vector<std::vector<std::vector<float>>>* snapshots = nullptr);

// Bit-exact snapshot of every table's weights and states, gathered through the accessors.
std::vector<std::vector<float>> Snapshot(shardrec_embedding_t* coll, const Scenario& s);

}  // namespace shardrec::testing
