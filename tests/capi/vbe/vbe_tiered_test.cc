// VBE batches (docs/variable-batch.md) on tiered tables (docs/disk-tier.md): rows on disk behind
// a cache smaller than the table, so the steps evict changed rows to the write-back queue and
// read them back. The VBE collection and the one fed the expanded batches are both tiered (each
// its own directories): outputs bit for bit every step, weights and states through the accessors
// at the end (bit for bit where no bag is read twice, else within the documented bound), and the
// reference model fed the expanded batches.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <string>
#include <vector>

#include "tests/capi/tiered/tiered_test_util.h"
#include "tests/capi/vbe/vbe_test_util.h"

namespace shardrec::testing {
namespace {

void RunTieredVbe(int32_t world, int32_t sharding, int32_t optimizer, int32_t pooling, VbeMode mode,
                  bool weighted, bool pipelined) {
  const std::string name = "vbe_w" + std::to_string(world) + "_s" + std::to_string(sharding) +
                           "_o" + std::to_string(optimizer) + "_p" + std::to_string(pooling) + "_" +
                           VbeModeName(mode) + (weighted ? "_weighted" : "") +
                           (pipelined ? "_pipelined" : "");
  SCOPED_TRACE(name);
  Scenario s = TieredScenario(world, sharding, optimizer, 0, pooling, weighted);
  PlanPtr plan = MakePlan(s);
  ASSERT_NE(plan, nullptr);
  const std::string dir = FreshDir(name);
  // Room for any step's distinct rows of a shard here (the batches are fixed by their seeds), far
  // less than the rows the steps touch: the steps evict.
  const int64_t per_rank = sharding == SHARDREC_SHARDING_ROW_WISE ? 1 : (world + 1) / 2;
  const int64_t slots[] = {16 * per_rank, 32 * per_rank, 16 * per_rank};
  std::vector<shardrec_table_tier_t> tiers(s.tables.size());
  for (size_t t = 0; t < tiers.size(); ++t) {
    shardrec_table_tier_init(&tiers[t], SHARDREC_TABLE_TIER_VERSION);
    tiers[t].table = s.tables[t].name.c_str();
    tiers[t].cache_bytes = CacheBytesFor(s, t, slots[t]);
  }
  VbeRunOptions o;
  o.mode = mode;
  o.steps = 6;
  // Few ids per rank: rows come back after their eviction.
  o.id_range = {30 * world, 40 * world, 40 * world, 30 * world};
  o.pipelined = pipelined;
  const shardrec_optimizer_config_t opt = ToCOptimizer(s.optimizer);
  o.create = [&](int r, int which, shardrec_embedding_t** out) {
    const std::string d = dir + (which == 0 ? "/vbe" : "/expanded") + std::to_string(r);
    std::vector<shardrec_table_tier_t> mine = tiers;
    for (auto& t : mine) t.dir = d.c_str();
    shardrec_embedding_options_t eo;
    shardrec_embedding_options_init(&eo, SHARDREC_EMBEDDING_OPTIONS_VERSION);
    eo.seed = s.seed;
    eo.tiers = mine.data();
    eo.num_tiers = mine.size();
    ASSERT_EQ(shardrec_embedding_create(out, plan.get(), GroupComm(world, r), &opt, &eo),
              SHARDREC_OK)
        << "rank " << r << ": " << shardrec_last_error();
  };
  std::atomic<int64_t> write_backs{0};
  o.finish = [&](int, shardrec_embedding_t* cv, shardrec_embedding_t*) {
    for (const RefTable& t : s.tables) {
      shardrec_tier_stats_t st;
      ASSERT_EQ(shardrec_tier_stats_init(&st, SHARDREC_TIER_STATS_VERSION), SHARDREC_OK);
      if (shardrec_embedding_tier_stats(cv, t.name.c_str(), &st) == SHARDREC_OK)
        write_backs += st.write_backs;
    }
  };
  RunVbeEquivalence(s, plan.get(), o);
  // The caches were too small for the steps: changed rows went to disk.
  EXPECT_GT(write_backs.load(), 0) << "nothing was evicted";
  std::filesystem::remove_all(dir);
}

TEST(VbeTiered, MatchesTheExpandedBatch) {
  for (int32_t world : {1, 2, 4})
    for (int32_t sharding : {SHARDREC_SHARDING_TABLE_WISE, SHARDREC_SHARDING_ROW_WISE})
      for (VbeMode mode : {VbeMode::kNoInverse, VbeMode::kInverse, VbeMode::kOnce})
        RunTieredVbe(world, sharding, 2, SHARDREC_POOLING_SUM, mode, false, false);
}

TEST(VbeTiered, OptimizersMeanWeightedPipelined) {
  for (VbeMode mode : {VbeMode::kNoInverse, VbeMode::kOnce, VbeMode::kInverse}) {
    RunTieredVbe(2, SHARDREC_SHARDING_COLUMN_WISE, 3, SHARDREC_POOLING_MEAN, mode, true, false);
    RunTieredVbe(2, SHARDREC_SHARDING_ROW_WISE, 0, SHARDREC_POOLING_SUM, mode, false, true);
    RunTieredVbe(4, SHARDREC_SHARDING_TABLE_WISE, 1, SHARDREC_POOLING_MEAN, mode, false, true);
  }
}

}  // namespace
}  // namespace shardrec::testing
