// What tiered tables refuse (docs/disk-tier.md, Limits) and what a tier's directory holds between
// runs: bad tiers fail creation naming the table, a batch larger than its cache fails the forward
// and leaves the collection usable, a table import refuses, and an earlier run's stores are
// scratch.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "shardrec/checkpoint.h"
#include "shardrec/shardrec.hpp"
#include "tests/support/spawn_ranks.h"
#include "tiered_test_util.h"

namespace shardrec::testing {
namespace {

shardrec_table_tier_t Tier(const char* table, const char* dir, int64_t bytes) {
  shardrec_table_tier_t t;
  EXPECT_EQ(shardrec_table_tier_init(&t, SHARDREC_TABLE_TIER_VERSION), SHARDREC_OK);
  t.table = table;
  t.dir = dir;
  t.cache_bytes = bytes;
  return t;
}

// World 1 creation of `s`'s plan with `tiers`; the status, and the collection when OK.
shardrec_status_t Create(const Scenario& s, const shardrec_plan_t* plan,
                         const std::vector<shardrec_table_tier_t>& tiers, CollPtr* out) {
  const shardrec_optimizer_config_t opt = ToCOptimizer(s.optimizer);
  shardrec_embedding_options_t o;
  shardrec_embedding_options_init(&o, SHARDREC_EMBEDDING_OPTIONS_VERSION);
  o.seed = s.seed;
  o.tiers = tiers.data();
  o.num_tiers = tiers.size();
  shardrec_embedding_t* c = nullptr;
  const shardrec_status_t rc = shardrec_embedding_create(&c, plan, GroupComm(1, 0), &opt, &o);
  out->reset(c);
  return rc;
}

// Version 5 of the options adds the tiers: init and the initialiser give none, a version-4 init
// leaves them alone (the caller's struct ends before them), and a tier's init gives no table.
TEST(TieredRefusal, OptionsVersion5InitialisesNoTiers) {
  shardrec_embedding_options_t o;
  std::memset(&o, 0x5a, sizeof(o));
  ASSERT_EQ(shardrec_embedding_options_init(&o, SHARDREC_EMBEDDING_OPTIONS_VERSION), SHARDREC_OK);
  EXPECT_EQ(o.version, 5u);
  EXPECT_EQ(o.tiers, nullptr);
  EXPECT_EQ(o.num_tiers, 0u);
  const shardrec_embedding_options_t m = SHARDREC_EMBEDDING_OPTIONS_INIT;
  EXPECT_EQ(m.tiers, nullptr);
  EXPECT_EQ(m.num_tiers, 0u);
  std::memset(&o, 0x5a, sizeof(o));
  ASSERT_EQ(shardrec_embedding_options_init(&o, 4), SHARDREC_OK);
  EXPECT_EQ(o.max_ids_per_batch, 0);
  EXPECT_EQ(o.num_tiers, static_cast<size_t>(0x5a5a5a5a5a5a5a5aull));
  shardrec_table_tier_t t;
  std::memset(&t, 0x5a, sizeof(t));
  ASSERT_EQ(shardrec_table_tier_init(&t, SHARDREC_TABLE_TIER_VERSION), SHARDREC_OK);
  EXPECT_EQ(t.table, nullptr);
  EXPECT_EQ(t.dir, nullptr);
  EXPECT_EQ(t.cache_bytes, 0);
  EXPECT_EQ(shardrec_table_tier_init(&t, 2), SHARDREC_EINVAL);
  EXPECT_EQ(shardrec_table_tier_init(nullptr, 1), SHARDREC_EINVAL);
}

TEST(TieredRefusal, BadTiersFailCreationNamingThem) {
  Scenario s = TieredScenario(1, SHARDREC_SHARDING_TABLE_WISE, 1, 0, SHARDREC_POOLING_SUM, false);
  s.sharding[2] = SHARDREC_SHARDING_DATA_PARALLEL;
  PlanPtr plan = MakePlan(s);
  ASSERT_NE(plan, nullptr);
  const std::string dir = FreshDir("refusals");
  CollPtr c;
  EXPECT_EQ(Create(s, plan.get(), {Tier("nope", dir.c_str(), 1 << 20)}, &c), SHARDREC_EINVAL);
  EXPECT_NE(std::string(shardrec_last_error()).find("no table 'nope'"), std::string::npos)
      << shardrec_last_error();
  EXPECT_EQ(Create(s, plan.get(), {Tier("t2", dir.c_str(), 1 << 20)}, &c), SHARDREC_EUNSUPPORTED);
  EXPECT_NE(std::string(shardrec_last_error()).find("data-parallel"), std::string::npos)
      << shardrec_last_error();
  EXPECT_EQ(Create(s, plan.get(), {Tier("t0", dir.c_str(), 16)}, &c), SHARDREC_EINVAL);
  EXPECT_NE(std::string(shardrec_last_error()).find("holds no row"), std::string::npos)
      << shardrec_last_error();
  EXPECT_EQ(Create(s, plan.get(), {Tier("t0", dir.c_str(), 0)}, &c), SHARDREC_EINVAL);
  EXPECT_EQ(Create(s, plan.get(), {Tier("t0", nullptr, 1 << 20)}, &c), SHARDREC_EINVAL);
  EXPECT_EQ(Create(s, plan.get(), {Tier("t0", "", 1 << 20)}, &c), SHARDREC_EINVAL);
  EXPECT_EQ(Create(s, plan.get(),
                   {Tier("t0", dir.c_str(), 1 << 20), Tier("t0", dir.c_str(), 1 << 20)}, &c),
            SHARDREC_EINVAL);
  shardrec_table_tier_t unset = Tier("t0", dir.c_str(), 1 << 20);
  unset.version = 0;
  EXPECT_EQ(Create(s, plan.get(), {unset}, &c), SHARDREC_EINVAL);
  // A good tier on the same plan works, and stats refuse a table that is not tiered.
  ASSERT_EQ(Create(s, plan.get(), {Tier("t0", dir.c_str(), 1 << 20)}, &c), SHARDREC_OK)
      << shardrec_last_error();
  shardrec_tier_stats_t st;
  ASSERT_EQ(shardrec_tier_stats_init(&st, SHARDREC_TIER_STATS_VERSION), SHARDREC_OK);
  EXPECT_EQ(shardrec_embedding_tier_stats(c.get(), "t1", &st), SHARDREC_EINVAL);
  ASSERT_EQ(shardrec_embedding_tier_stats(c.get(), "t0", &st), SHARDREC_OK);
  EXPECT_EQ(st.cache_slots, 200);  // 1 MiB holds more than the table's 200 rows
  EXPECT_EQ(st.cache_rows, 0);
  // The C++ wrapper of the same call.
  const shardrec::EmbeddingCollection cpp(c.release());
  EXPECT_EQ(cpp.tier_stats("t0").cache_slots, 200);
  EXPECT_THROW(cpp.tier_stats("t1"), shardrec::Error);
}

TEST(TieredRefusal, BatchLargerThanCacheFailsAndLeavesTheCollectionUsable) {
  const Scenario s =
      TieredScenario(1, SHARDREC_SHARDING_TABLE_WISE, 0, 0, SHARDREC_POOLING_SUM, false);
  PlanPtr plan = MakePlan(s);
  ASSERT_NE(plan, nullptr);
  const std::string dir = FreshDir("too_small");
  CollPtr c;
  // 4 slots of t0 (8 fp32 + 32 bytes each); a batch of 6 distinct rows does not fit.
  ASSERT_EQ(Create(s, plan.get(), {Tier("t0", dir.c_str(), 4 * (32 + 32))}, &c), SHARDREC_OK)
      << shardrec_last_error();
  RefBatch big{1, {6, 0, 0, 0}, {0, 1, 2, 3, 4, 5}, {}};
  KjtHolder kjt(big, 4, false);
  int64_t dim = 0;
  shardrec_embedding_output_dim(c.get(), &dim);
  std::vector<float> out(static_cast<size_t>(dim));
  // Four rows fit: a first step caches rows 0-3 (4 misses, 1 step); after its backward they are
  // no longer pinned, so the next forward finds them as hits.
  RefBatch fits{1, {4, 0, 0, 0}, {0, 1, 2, 3}, {}};
  KjtHolder small(fits, 4, false);
  ASSERT_EQ(shardrec_embedding_forward(c.get(), small.view(), out.data(), out.size(), nullptr),
            SHARDREC_OK)
      << shardrec_last_error();
  ASSERT_EQ(shardrec_embedding_backward(c.get(), out.data(), out.size(), nullptr), SHARDREC_OK)
      << shardrec_last_error();
  shardrec_tier_stats_t before = SHARDREC_TIER_STATS_INIT, after = SHARDREC_TIER_STATS_INIT;
  ASSERT_EQ(shardrec_embedding_tier_stats(c.get(), "t0", &before), SHARDREC_OK);
  EXPECT_EQ(before.steps, 1);
  EXPECT_EQ(before.misses, 4);
  EXPECT_EQ(before.hits, 0);
  EXPECT_EQ(shardrec_embedding_forward(c.get(), kjt.view(), out.data(), out.size(), nullptr),
            SHARDREC_EINVAL);
  EXPECT_NE(std::string(shardrec_last_error()).find("cache holds 4 rows"), std::string::npos)
      << shardrec_last_error();
  // The refused forward counts in no statistic: not its cached rows 0-3 as hits, nor a step.
  ASSERT_EQ(shardrec_embedding_tier_stats(c.get(), "t0", &after), SHARDREC_OK);
  EXPECT_EQ(after.steps, before.steps);
  EXPECT_EQ(after.hits, before.hits);
  EXPECT_EQ(after.misses, before.misses);
  EXPECT_EQ(after.write_backs, before.write_backs);
  // The rows fit again; the forward reads the table's initial rows (the weights accessor's).
  ASSERT_EQ(shardrec_embedding_forward(c.get(), small.view(), out.data(), out.size(), nullptr),
            SHARDREC_OK)
      << shardrec_last_error();
  std::vector<float> w(200 * 8);
  ASSERT_EQ(shardrec_embedding_get_weights(c.get(), "t0", w.data(), w.size()), SHARDREC_OK);
  for (int c0 = 0; c0 < 8; ++c0)
    EXPECT_EQ(out[c0], w[0 * 8 + c0] + w[1 * 8 + c0] + w[2 * 8 + c0] + w[3 * 8 + c0]);
}

// Checkpoints take tiered tables (tiered_checkpoint_test.cc); a table import does not yet, and
// its refusal changes nothing.
TEST(TieredRefusal, TableImportRefusesTieredTables) {
  const Scenario s =
      TieredScenario(1, SHARDREC_SHARDING_TABLE_WISE, 1, 0, SHARDREC_POOLING_SUM, false);
  PlanPtr plan = MakePlan(s);
  ASSERT_NE(plan, nullptr);
  const std::string dir = FreshDir("checkpoint");
  CollPtr c;
  ASSERT_EQ(Create(s, plan.get(), {Tier("t1", dir.c_str(), 1 << 16)}, &c), SHARDREC_OK)
      << shardrec_last_error();
  const std::string file = dir + "/t1.safetensors";
  ASSERT_EQ(shardrec_checkpoint_export_table(c.get(), "t1", file.c_str(), 0), SHARDREC_OK)
      << shardrec_last_error();
  // Rows other than the file's, so an import that wrote any would show.
  std::vector<float> w(300 * 12, 0.25f);
  ASSERT_EQ(shardrec_embedding_set_weights(c.get(), "t1", w.data(), w.size()), SHARDREC_OK)
      << shardrec_last_error();
  EXPECT_EQ(shardrec_checkpoint_import_table(c.get(), "t1", file.c_str(), 0),
            SHARDREC_EUNSUPPORTED);
  EXPECT_NE(std::string(shardrec_last_error()).find("table 't1'"), std::string::npos)
      << shardrec_last_error();
  std::vector<float> after(w.size(), 0.0f);
  ASSERT_EQ(shardrec_embedding_get_weights(c.get(), "t1", after.data(), after.size()), SHARDREC_OK);
  EXPECT_EQ(after, w) << "the refused import changed table t1";
}

// The stores are scratch: a second collection over the directory a first one trained in starts
// from the initial rows, exactly as a table in memory does.
TEST(TieredRefusal, AnEarlierRunsStoresAreNotRead) {
  const Scenario s =
      TieredScenario(1, SHARDREC_SHARDING_ROW_WISE, 3, 0, SHARDREC_POOLING_SUM, true);
  PlanPtr plan = MakePlan(s);
  ASSERT_NE(plan, nullptr);
  const std::string dir = FreshDir("scratch");
  std::vector<shardrec_table_tier_t> tiers;
  for (size_t t = 0; t < s.tables.size(); ++t)
    tiers.push_back(Tier(s.tables[t].name.c_str(), dir.c_str(), CacheBytesFor(s, t, 100)));
  const std::vector<TieredRun> memory = RunTiered(s, plan.get(), {}, false);
  for (int run = 0; run < 2; ++run) {
    const std::vector<TieredRun> tiered = RunTiered(s, plan.get(), tiers, false);
    ASSERT_FALSE(::testing::Test::HasFailure());
    for (size_t f = 0; f < memory[0].out.size(); ++f)
      EXPECT_EQ(FirstBitDifference(tiered[0].out[f], memory[0].out[f]), "")
          << "run " << run << " forward " << f;
    int64_t disk_reads = 0;
    for (const auto& st : tiered[0].stats) disk_reads += st.disk_reads + st.queue_reads;
    EXPECT_GT(disk_reads, 0) << "run " << run << " never read a written-back row";
  }
}

// A column-wise table whose optimizer keeps row statistics exchanges them in slot order, so its
// ranks must give it the same cache (docs/disk-tier.md, Limits): ranks that differ, or tier it on
// one rank only, fail creation on every rank instead of training something else than the table in
// memory. Without row statistics (SGD) the ranks' caches may differ.
std::string ColumnWisePlan(const char* optimizer) {
  return std::string(R"({"format": "shardrec.plan", "version": 1, "world_size": 2,
    "ranks_per_node": 2, "features": [{"name": "f", "pooling_factor": 1}],
    "tables": [{"name": "cw", "rows": 40, "dim": 8, "pooling": "sum", "dtype": "float32",
      "features": [0], "init": {"kind": "default", "low": 0, "high": 0},
      "optimizer": {"type": ")") +
         optimizer + R"(", "learning_rate": 0.1, "eps": 1e-8, "beta1": 0.9,
        "beta2": 0.999, "weight_decay": 0, "weight_decay_mode": 0, "stochastic_rounding": 0},
      "sharding": "column_wise",
      "shards": [{"row_offset": 0, "rows": 40, "col_offset": 0, "cols": 4, "rank": 0},
                 {"row_offset": 0, "rows": 40, "col_offset": 4, "cols": 4, "rank": 1}]}]})";
}

// Creates the plan's collection on two rank threads, rank r tiering "cw" with bytes[r] (0: not
// tiered); the two statuses.
std::vector<shardrec_status_t> CreateTwo(const std::string& json, const int64_t bytes[2],
                                         const std::string& dir) {
  shardrec_plan_t* plan = nullptr;
  EXPECT_EQ(shardrec_plan_from_json(&plan, json.c_str(), json.size()), SHARDREC_OK)
      << shardrec_last_error();
  PlanPtr owned(plan);
  std::vector<shardrec_status_t> rc(2, SHARDREC_OK);
  SpawnRanks(2, [&](int r) {
    const std::string mine = dir + "/r" + std::to_string(r);
    std::vector<shardrec_table_tier_t> tiers;
    if (bytes[r] > 0) tiers.push_back(Tier("cw", mine.c_str(), bytes[r]));
    shardrec_embedding_options_t o;
    shardrec_embedding_options_init(&o, SHARDREC_EMBEDDING_OPTIONS_VERSION);
    o.tiers = tiers.data();
    o.num_tiers = tiers.size();
    shardrec_embedding_t* c = nullptr;
    rc[r] = shardrec_embedding_create(&c, plan, GroupComm(2, r), nullptr, &o);
    if (rc[r] != SHARDREC_OK && r == 1)
      EXPECT_NE(std::string(shardrec_last_error()).find("cache_bytes"), std::string::npos)
          << shardrec_last_error();
    shardrec_embedding_destroy(c);
  });
  return rc;
}

TEST(TieredRefusal, ColumnShardsWithRowStatisticsNeedTheSameCacheOnEveryRank) {
  const std::string dir = FreshDir("rowstats");
  const int64_t slot = 4 * 8 + 4 + 32;  // a row, its row-wise Adagrad state, the metadata
  const int64_t same[2] = {slot * 5, slot * 5}, differ[2] = {slot * 5, slot * 9},
                one_rank[2] = {slot * 5, 0};
  for (const char* opt : {"rowwise_adagrad", "partial_rowwise_adam", "lamb"}) {
    const std::string json = ColumnWisePlan(opt);
    EXPECT_EQ(CreateTwo(json, same, dir), std::vector<shardrec_status_t>(2, SHARDREC_OK)) << opt;
    EXPECT_EQ(CreateTwo(json, differ, dir), std::vector<shardrec_status_t>(2, SHARDREC_EINVAL))
        << opt;
    EXPECT_EQ(CreateTwo(json, one_rank, dir), std::vector<shardrec_status_t>(2, SHARDREC_EINVAL))
        << opt;
  }
  const std::string sgd = ColumnWisePlan("sgd");
  EXPECT_EQ(CreateTwo(sgd, differ, dir), std::vector<shardrec_status_t>(2, SHARDREC_OK));
  EXPECT_EQ(CreateTwo(sgd, one_rank, dir), std::vector<shardrec_status_t>(2, SHARDREC_OK));
}

}  // namespace
}  // namespace shardrec::testing
