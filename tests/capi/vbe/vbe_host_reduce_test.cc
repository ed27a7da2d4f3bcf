// VBE batches (docs/variable-batch.md) through the host-reduced return exchange
// (docs/multihost.md, host_reduce.h): table-row-wise and grid tables whose shards share a host
// reduce their partial sums there before they cross to the samples' host, and the reduction reads
// the id message's per-feature length slots. Plans put ranks_per_node ranks on a host and
// SHARDREC_HOST_REDUCE=1 forces the reduction whatever the planner priced; the VBE collection is
// compared with one fed the expanded batches over the same exchange (outputs bit for bit, weights
// and states bit for bit where no bag is read twice, else within the documented bound) and with
// the reference model.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "tests/capi/vbe/vbe_test_util.h"

namespace shardrec::testing {
namespace {

// Sets SHARDREC_HOST_REDUCE for the collections created while it lives (read at creation).
class ForceHostReduce {
 public:
  ForceHostReduce() { setenv("SHARDREC_HOST_REDUCE", "1", 1); }
  ~ForceHostReduce() { unsetenv("SHARDREC_HOST_REDUCE"); }
};

void RunHostReduced(int32_t world, int32_t ranks_per_node, int32_t sharding, int32_t pooling,
                    VbeMode mode, bool weighted) {
  SCOPED_TRACE("world " + std::to_string(world) + " ranks per node " +
               std::to_string(ranks_per_node) + " sharding " + std::to_string(sharding) +
               " pooling " + std::to_string(pooling) + " " + VbeModeName(mode) +
               (weighted ? " weighted" : ""));
  Scenario s = StandardScenario(world, sharding, pooling);
  s.ranks_per_node = ranks_per_node;
  s.optimizer.type = 2;  // row-wise Adagrad: row statistics travel beside grid's reduced rows
  s.optimizer.lr = 0.05f;
  s.max_bag = 4;
  s.weighted = weighted;
  s.data_seed = 23;
  PlanPtr plan = MakePlan(s);
  ASSERT_NE(plan, nullptr);
  ForceHostReduce reduce;
  VbeRunOptions o;
  o.mode = mode;
  RunVbeEquivalence(s, plan.get(), o);
}

TEST(VbeHostReduce, TableRowWiseTwoHosts) {
  for (int32_t pooling : {SHARDREC_POOLING_SUM, SHARDREC_POOLING_MEAN})
    for (VbeMode mode : {VbeMode::kNoInverse, VbeMode::kInverse, VbeMode::kOnce})
      RunHostReduced(4, 2, SHARDREC_SHARDING_TABLE_ROW_WISE, pooling, mode, false);
}

TEST(VbeHostReduce, GridTwoHosts) {
  for (VbeMode mode : {VbeMode::kNoInverse, VbeMode::kInverse, VbeMode::kOnce})
    RunHostReduced(4, 2, SHARDREC_SHARDING_GRID, SHARDREC_POOLING_SUM, mode, false);
}

TEST(VbeHostReduce, TableRowWiseWeightedThreeHosts) {
  for (VbeMode mode : {VbeMode::kNoInverse, VbeMode::kInverse})
    RunHostReduced(6, 2, SHARDREC_SHARDING_TABLE_ROW_WISE, SHARDREC_POOLING_MEAN, mode, true);
}

TEST(VbeHostReduce, ThreeShardsPerHost) {
  for (VbeMode mode : {VbeMode::kNoInverse, VbeMode::kOnce})
    RunHostReduced(6, 3, SHARDREC_SHARDING_TABLE_ROW_WISE, SHARDREC_POOLING_SUM, mode, false);
}

}  // namespace
}  // namespace shardrec::testing
