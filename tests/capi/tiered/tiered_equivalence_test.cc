// A tiered table gives the bits of the same table in memory (docs/disk-tier.md): every optimizer,
// fp32/fp16/bf16 storage, SUM and MEAN, weighted ids, table-, row- and column-wise sharding at
// worlds 1 and 2, plain and pipelined forwards, with caches so small that every step evicts.
#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <vector>

#include "tiered_test_util.h"

namespace shardrec::testing {
namespace {

struct Param {
  int32_t world;
  int32_t sharding;
  int32_t optimizer;
  int32_t dtype;
  int32_t pooling;
  bool weighted;
  bool pipelined;
};

std::string Name(const ::testing::TestParamInfo<Param>& info) {
  const Param& p = info.param;
  static const char* kSharding[] = {"DP", "TW", "RW", "CW"};
  static const char* kOpt[] = {"Sgd", "Adagrad", "RowAdagrad", "Adam", "PartialAdam", "Lamb"};
  static const char* kDtype[] = {"F32", "F16", "Bf16"};
  return std::string("W") + std::to_string(p.world) + kSharding[p.sharding] + kOpt[p.optimizer] +
         kDtype[p.dtype] + (p.pooling == SHARDREC_POOLING_MEAN ? "Mean" : "Sum") +
         (p.weighted ? "Weighted" : "") + (p.pipelined ? "Pipelined" : "");
}

// Every optimizer x dtype x sharding x world; pooling, weights and pipelining vary with them so
// each appears with every optimizer and sharding.
std::vector<Param> AllParams() {
  std::vector<Param> out;
  int i = 0;
  for (int32_t opt = 0; opt <= 5; ++opt)
    for (int32_t dtype = 0; dtype <= 2; ++dtype)
      for (int32_t sharding : {SHARDREC_SHARDING_TABLE_WISE, SHARDREC_SHARDING_ROW_WISE,
                               SHARDREC_SHARDING_COLUMN_WISE})
        for (int32_t world : {1, 2}) {
          out.push_back({world, sharding, opt, dtype,
                         (i % 2) != 0 ? SHARDREC_POOLING_MEAN : SHARDREC_POOLING_SUM,
                         (i / 2) % 2 != 0, (i / 4) % 2 != 0 || (i % 3) == 0});
          ++i;
        }
  return out;
}

class TieredEquivalence : public ::testing::TestWithParam<Param> {};

TEST_P(TieredEquivalence, BitIdenticalToMemory) {
  const Param& p = GetParam();
  const Scenario s =
      TieredScenario(p.world, p.sharding, p.optimizer, p.dtype, p.pooling, p.weighted);
  PlanPtr plan = MakePlan(s);
  ASSERT_NE(plan, nullptr);
  const std::vector<TieredRun> memory = RunTiered(s, plan.get(), {}, p.pipelined);
  // Per shard at least one batch's distinct rows of the table (t1: two features of 6 samples x
  // up to 4 ids from each of 2 ranks), far fewer than its rows: the steps evict.
  const std::string dir = FreshDir(Name({p, 0}));
  const std::vector<shardrec_table_tier_t> tiers = SmallTiers(s, dir);
  const std::vector<TieredRun> tiered = RunTiered(s, plan.get(), tiers, p.pipelined);
  ASSERT_FALSE(::testing::Test::HasFailure());
  int64_t evicting_tables = 0, prefetched = 0, written_back = 0;
  for (int32_t r = 0; r < s.world; ++r) {
    for (size_t f = 0; f < memory[r].out.size(); ++f)
      EXPECT_EQ(FirstBitDifference(tiered[r].out[f], memory[r].out[f]), "")
          << "rank " << r << " forward " << f;
    ASSERT_EQ(tiered[r].snap.size(), memory[r].snap.size());
    for (size_t k = 0; k < memory[r].snap.size(); ++k)
      EXPECT_EQ(FirstBitDifference(tiered[r].snap[k], memory[r].snap[k]), "")
          << "rank " << r << " snapshot tensor " << k;
    for (const shardrec_tier_stats_t& st : tiered[r].stats) {
      if (st.cache_slots == 0) continue;  // no shard of the table on this rank
      EXPECT_EQ(st.hits + st.misses > 0, true);
      EXPECT_LE(st.cache_rows, st.cache_slots);
      EXPECT_EQ(st.steps, s.steps + 1);
      if (st.misses > st.cache_slots) ++evicting_tables;
      prefetched += st.prefetched;
      written_back += st.write_backs;
      // Every miss was read (queue or disk) or initialised, once.
      EXPECT_EQ(st.misses, st.queue_reads + st.disk_reads + st.initialised)
          << "rank " << r << ": misses " << st.misses << " queue " << st.queue_reads << " disk "
          << st.disk_reads << " initialised " << st.initialised;
    }
  }
  EXPECT_GT(evicting_tables, 0) << "the caches never evicted: the test proves nothing";
  EXPECT_GT(written_back, 0);
  if (p.pipelined) {
    EXPECT_GT(prefetched, 0) << "the pipelined run read no miss ahead";
  } else {
    EXPECT_EQ(prefetched, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(All, TieredEquivalence, ::testing::ValuesIn(AllParams()), Name);

// Stochastic rounding keys its bits by the row, not by the cache slot the row sits in.
TEST(TieredEquivalenceRounding, StochasticRoundingFollowsTheRow) {
  for (int32_t dtype : {1, 2}) {
    Scenario s =
        TieredScenario(2, SHARDREC_SHARDING_ROW_WISE, 3, dtype, SHARDREC_POOLING_SUM, true);
    s.optimizer.stochastic_rounding = true;
    PlanPtr plan = MakePlan(s);
    ASSERT_NE(plan, nullptr);
    const std::vector<TieredRun> memory = RunTiered(s, plan.get(), {}, false);
    const std::string dir = FreshDir("rounding" + std::to_string(dtype));
    const std::vector<shardrec_table_tier_t> tiers = SmallTiers(s, dir);  // 40, 80, 40 slots
    const std::vector<TieredRun> tiered = RunTiered(s, plan.get(), tiers, true);
    ASSERT_FALSE(::testing::Test::HasFailure());
    for (int32_t r = 0; r < s.world; ++r)
      for (size_t k = 0; k < memory[r].snap.size(); ++k)
        EXPECT_EQ(FirstBitDifference(tiered[r].snap[k], memory[r].snap[k]), "")
            << "dtype " << dtype << " rank " << r << " snapshot tensor " << k;
  }
}

// Reading weights and states between pipelined steps (an accessor waits out the prefetch job and
// drops its reads, leaving the rows it installed cached) changes neither the results nor the
// counters: the rows the job installed are still the next batch's prefetched misses, not hits.
TEST(TieredEquivalenceStats, AccessorsBetweenPipelinedStepsKeepTheCounters) {
  for (int32_t world : {1, 2}) {
    const Scenario s =
        TieredScenario(world, SHARDREC_SHARDING_ROW_WISE, 1, 0, SHARDREC_POOLING_SUM, false);
    PlanPtr plan = MakePlan(s);
    ASSERT_NE(plan, nullptr);
    const std::string quiet_dir = FreshDir("accessors_quiet");
    const std::string read_dir = FreshDir("accessors_read");
    const std::vector<TieredRun> quiet = RunTiered(s, plan.get(), SmallTiers(s, quiet_dir), true);
    std::atomic<int64_t> reads{0};  // the ranks are threads
    const std::vector<TieredRun> read =
        RunTiered(s, plan.get(), SmallTiers(s, read_dir), true, nullptr, nullptr, nullptr, nullptr,
                  [&](shardrec_embedding_t* c, int32_t) {
                    (void)Snapshot(c, s);  // every table's weights and states
                    ++reads;
                  });
    ASSERT_FALSE(::testing::Test::HasFailure());
    EXPECT_EQ(reads.load(), static_cast<int64_t>(s.steps) * world);
    for (int32_t r = 0; r < world; ++r) {
      for (size_t f = 0; f < quiet[r].out.size(); ++f)
        EXPECT_EQ(FirstBitDifference(read[r].out[f], quiet[r].out[f]), "")
            << "world " << world << " rank " << r << " forward " << f;
      ASSERT_EQ(read[r].stats.size(), quiet[r].stats.size());
      int64_t prefetched = 0;
      for (size_t t = 0; t < quiet[r].stats.size(); ++t) {
        const shardrec_tier_stats_t& a = read[r].stats[t];
        const shardrec_tier_stats_t& b = quiet[r].stats[t];
        const std::string where = "world " + std::to_string(world) + " rank " + std::to_string(r) +
                                  " table " + std::to_string(t);
        EXPECT_EQ(a.hits, b.hits) << where;
        EXPECT_EQ(a.misses, b.misses) << where;
        EXPECT_EQ(a.prefetched, b.prefetched) << where;
        EXPECT_EQ(a.queue_reads + a.disk_reads, b.queue_reads + b.disk_reads) << where;
        EXPECT_EQ(a.initialised, b.initialised) << where;
        EXPECT_EQ(a.misses, a.queue_reads + a.disk_reads + a.initialised) << where;
        prefetched += a.prefetched;
      }
      EXPECT_GT(prefetched, 0) << "world " << world << " rank " << r << ": nothing read ahead";
    }
  }
}

}  // namespace
}  // namespace shardrec::testing

namespace shardrec::testing {
namespace {

// A plan holding a dynamic table beside a tiered fixed one: the dynamic rows resolve first, then
// the tiered ones, and both give what they give in memory.
TEST(TieredEquivalenceMixed, BesideADynamicTable) {
  const Scenario s =
      TieredScenario(1, SHARDREC_SHARDING_ROW_WISE, 1, 0, SHARDREC_POOLING_SUM, true);
  std::vector<std::string> fnames;
  for (int32_t f = 0; f < s.num_features; ++f) fnames.push_back("f" + std::to_string(f));
  std::vector<shardrec_feature_config_t> features(s.num_features);
  for (int32_t f = 0; f < s.num_features; ++f) {
    shardrec_feature_config_init(&features[f], SHARDREC_FEATURE_CONFIG_VERSION);
    features[f].name = fnames[f].c_str();
  }
  shardrec_dynamic_table_config_t dyn;
  shardrec_dynamic_table_config_init(&dyn, SHARDREC_DYNAMIC_TABLE_CONFIG_VERSION);
  std::vector<shardrec_table_config_t> tables(s.tables.size());
  for (size_t t = 0; t < s.tables.size(); ++t) {
    const RefTable& rt = s.tables[t];
    shardrec_table_config_init(&tables[t], SHARDREC_TABLE_CONFIG_VERSION);
    tables[t].name = rt.name.c_str();
    tables[t].rows = rt.rows;
    tables[t].dim = rt.dim;
    tables[t].pooling = rt.pooling;
    tables[t].features = rt.features.data();
    tables[t].num_features = rt.features.size();
    tables[t].init_kind = rt.init_kind;
    tables[t].init_low = rt.init_low;
    tables[t].init_high = rt.init_high;
    tables[t].dynamic = t == 0 ? &dyn : nullptr;  // t0's 200 ids all fit its 200 rows
  }
  shardrec_topology_t topo;
  shardrec_topology_init(&topo, SHARDREC_TOPOLOGY_VERSION);
  topo.world_size = 1;
  topo.optimizer = s.optimizer.type;
  shardrec_plan_t* p = nullptr;
  ASSERT_EQ(shardrec_plan_create(&p, tables.data(), tables.size(), features.data(), features.size(),
                                 &topo, nullptr, 0),
            SHARDREC_OK)
      << shardrec_last_error();
  PlanPtr plan(p);
  Scenario fixed_only = s;  // the dynamic table has no full-table accessors
  fixed_only.tables.erase(fixed_only.tables.begin());
  const std::vector<TieredRun> memory = RunTiered(s, plan.get(), {}, true, &fixed_only);
  const std::string dir = FreshDir("mixed");
  std::vector<shardrec_table_tier_t> tiers(1);
  shardrec_table_tier_init(&tiers[0], SHARDREC_TABLE_TIER_VERSION);
  tiers[0].table = "t1";
  tiers[0].dir = dir.c_str();
  tiers[0].cache_bytes = CacheBytesFor(s, 1, 100);
  const std::vector<TieredRun> tiered = RunTiered(s, plan.get(), tiers, true, &fixed_only);
  ASSERT_FALSE(::testing::Test::HasFailure());
  for (size_t f = 0; f < memory[0].out.size(); ++f)
    EXPECT_EQ(FirstBitDifference(tiered[0].out[f], memory[0].out[f]), "") << "forward " << f;
  for (size_t k = 0; k < memory[0].snap.size(); ++k)
    EXPECT_EQ(FirstBitDifference(tiered[0].snap[k], memory[0].snap[k]), "") << "tensor " << k;
  EXPECT_GT(tiered[0].stats[0].misses, tiered[0].stats[0].cache_slots);
}

}  // namespace
}  // namespace shardrec::testing
