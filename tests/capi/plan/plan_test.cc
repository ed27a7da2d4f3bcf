// plan.h / config.h through the public C API: creation, queries, JSON, stats, hash, errors.
#include "shardrec/plan.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "shardrec/config.h"

namespace {

// Three features, two tables ("user": 1000 x 16 read by f0, f1; "item": 3 x 8 read by f2).
struct Model {
  std::vector<shardrec_feature_config_t> features;
  std::vector<shardrec_table_config_t> tables;
  std::vector<int32_t> user_features{0, 1};
  std::vector<int32_t> item_features{2};
  shardrec_topology_t topology = SHARDREC_TOPOLOGY_INIT;

  explicit Model(int32_t world, int32_t ranks_per_node = 0) {
    for (const char* name : {"f0", "f1", "f2"}) {
      shardrec_feature_config_t f;
      EXPECT_EQ(shardrec_feature_config_init(&f, SHARDREC_FEATURE_CONFIG_VERSION), SHARDREC_OK);
      f.name = name;
      features.push_back(f);
    }
    shardrec_table_config_t t = SHARDREC_TABLE_CONFIG_INIT;
    t.name = "user";
    t.rows = 1000;
    t.dim = 16;
    t.features = user_features.data();
    t.num_features = user_features.size();
    tables.push_back(t);
    t.name = "item";
    t.rows = 3;
    t.dim = 8;
    t.pooling = SHARDREC_POOLING_MEAN;
    t.features = item_features.data();
    t.num_features = item_features.size();
    tables.push_back(t);
    EXPECT_EQ(shardrec_topology_init(&topology, SHARDREC_TOPOLOGY_VERSION), SHARDREC_OK);
    topology.world_size = world;
    topology.ranks_per_node = ranks_per_node;
  }

  shardrec_status_t Create(shardrec_plan_t** out,
                           const std::vector<shardrec_table_constraints_t>& cs = {}) const {
    return shardrec_plan_create(out, tables.data(), tables.size(), features.data(), features.size(),
                                &topology, cs.empty() ? nullptr : cs.data(), cs.size());
  }
};

std::string Json(const shardrec_plan_t* plan) {
  char* text = nullptr;
  size_t len = 0;
  EXPECT_EQ(shardrec_plan_to_json(plan, &text, &len), SHARDREC_OK);
  std::string s(text, len);
  EXPECT_EQ(s.size(), std::strlen(text));
  shardrec_free(text);
  return s;
}

void ExpectError(shardrec_status_t got, shardrec_status_t want, const std::string& fragment) {
  EXPECT_EQ(got, want) << shardrec_last_error();
  EXPECT_NE(std::string(shardrec_last_error()).find(fragment), std::string::npos)
      << shardrec_last_error();
}

TEST(CapiPlan, CreateAndQuery) {
  Model m(4, 2);
  shardrec_plan_t* plan = nullptr;
  ASSERT_EQ(m.Create(&plan), SHARDREC_OK) << shardrec_last_error();
  int32_t world = 0, rpn = 0;
  size_t tables = 0, features = 0;
  ASSERT_EQ(shardrec_plan_world_size(plan, &world), SHARDREC_OK);
  ASSERT_EQ(shardrec_plan_ranks_per_node(plan, &rpn), SHARDREC_OK);
  ASSERT_EQ(shardrec_plan_num_tables(plan, &tables), SHARDREC_OK);
  ASSERT_EQ(shardrec_plan_num_features(plan, &features), SHARDREC_OK);
  EXPECT_EQ(world, 4);
  EXPECT_EQ(rpn, 2);
  EXPECT_EQ(tables, 2u);
  EXPECT_EQ(features, 3u);
  const char* name = nullptr;
  ASSERT_EQ(shardrec_plan_table_name(plan, 1, &name), SHARDREC_OK);
  EXPECT_STREQ(name, "item");
  ASSERT_EQ(shardrec_plan_feature_name(plan, 2, &name), SHARDREC_OK);
  EXPECT_STREQ(name, "f2");
  size_t index = 9;
  ASSERT_EQ(shardrec_plan_find_table(plan, "user", &index), SHARDREC_OK);
  EXPECT_EQ(index, 0u);
  EXPECT_EQ(shardrec_plan_find_table(plan, "nope", &index), SHARDREC_ENOTFOUND);
  int64_t rows = 0;
  int32_t dim = 0;
  ASSERT_EQ(shardrec_plan_table_rows(plan, 0, &rows), SHARDREC_OK);
  ASSERT_EQ(shardrec_plan_table_dim(plan, 0, &dim), SHARDREC_OK);
  EXPECT_EQ(rows, 1000);
  EXPECT_EQ(dim, 16);
  // Every table's shards cover it exactly (or once per rank for data-parallel).
  for (size_t t = 0; t < tables; ++t) {
    int32_t type = -1;
    size_t n = 0;
    ASSERT_EQ(shardrec_plan_table_sharding(plan, t, &type, &n), SHARDREC_OK);
    EXPECT_GE(type, 0);
    EXPECT_LT(type, SHARDREC_SHARDING_COUNT);
    int64_t trows = 0;
    int32_t tdim = 0;
    ASSERT_EQ(shardrec_plan_table_rows(plan, t, &trows), SHARDREC_OK);
    ASSERT_EQ(shardrec_plan_table_dim(plan, t, &tdim), SHARDREC_OK);
    int64_t area = 0;
    for (size_t k = 0; k < n; ++k) {
      shardrec_shard_t s;
      ASSERT_EQ(shardrec_plan_shard(plan, t, k, &s), SHARDREC_OK);
      EXPECT_GE(s.rank, 0);
      EXPECT_LT(s.rank, 4);
      area += s.rows * s.cols;
    }
    EXPECT_EQ(area, trows * tdim * (type == SHARDREC_SHARDING_DATA_PARALLEL ? 4 : 1));
  }
  shardrec_shard_t s;
  ExpectError(shardrec_plan_shard(plan, 0, 1000, &s), SHARDREC_EINVAL, "shard index 1000");
  ExpectError(shardrec_plan_table_dim(plan, 5, &dim), SHARDREC_EINVAL, "table index 5");
  shardrec_plan_destroy(plan);
  shardrec_plan_destroy(nullptr);
}

TEST(CapiPlan, EveryTypeCanBeForcedWithConstraints) {
  for (int32_t world : {1, 2, 4}) {
    for (int32_t type = 0; type < SHARDREC_SHARDING_COUNT; ++type) {
      Model m(world, world == 1 ? 1 : 2);
      std::vector<shardrec_table_constraints_t> cs(2);
      for (size_t i = 0; i < 2; ++i) {
        ASSERT_EQ(shardrec_table_constraints_init(&cs[i], SHARDREC_TABLE_CONSTRAINTS_VERSION),
                  SHARDREC_OK);
        cs[i].table = m.tables[i].name;
        cs[i].sharding_types = 1u << type;
        cs[i].min_partition = 4;
      }
      shardrec_plan_t* plan = nullptr;
      ASSERT_EQ(m.Create(&plan, cs), SHARDREC_OK)
          << "world " << world << " type " << type << ": " << shardrec_last_error();
      for (size_t t = 0; t < 2; ++t) {
        int32_t got = -1;
        size_t n = 0;
        ASSERT_EQ(shardrec_plan_table_sharding(plan, t, &got, &n), SHARDREC_OK);
        EXPECT_EQ(got, type);
        EXPECT_GE(n, 1u);
      }
      shardrec_plan_destroy(plan);
    }
  }
}

// A column-wise table whose dim has no block of min_partition columns stays one shard (as in
// TorchRec); the stats say so instead of letting it pass for table-wise.
TEST(CapiPlan, StatsExplainAColumnWiseTableThatWasNotSplit) {
  Model m(2);
  std::vector<shardrec_table_constraints_t> cs(1);
  ASSERT_EQ(shardrec_table_constraints_init(&cs[0], SHARDREC_TABLE_CONSTRAINTS_VERSION),
            SHARDREC_OK);
  cs[0].table = "user";
  cs[0].sharding_types = 1u << SHARDREC_SHARDING_COLUMN_WISE;
  shardrec_plan_t* plan = nullptr;
  ASSERT_EQ(m.Create(&plan, cs), SHARDREC_OK) << shardrec_last_error();
  size_t shards = 0;
  int32_t type = -1;
  ASSERT_EQ(shardrec_plan_table_sharding(plan, 0, &type, &shards), SHARDREC_OK);
  EXPECT_EQ(type, SHARDREC_SHARDING_COLUMN_WISE);
  EXPECT_EQ(shards, 1u);
  char* stats = nullptr;
  ASSERT_EQ(shardrec_plan_stats(plan, &stats, nullptr), SHARDREC_OK);
  EXPECT_NE(std::string(stats).find("column-wise table 'user' was not split: its dim 16"),
            std::string::npos)
      << stats;
  shardrec_free(stats);
  shardrec_plan_destroy(plan);
  // With a small enough min_partition it is split, and the note is gone.
  cs[0].min_partition = 8;
  ASSERT_EQ(m.Create(&plan, cs), SHARDREC_OK) << shardrec_last_error();
  ASSERT_EQ(shardrec_plan_table_sharding(plan, 0, &type, &shards), SHARDREC_OK);
  EXPECT_EQ(shards, 2u);
  ASSERT_EQ(shardrec_plan_stats(plan, &stats, nullptr), SHARDREC_OK);
  EXPECT_EQ(std::string(stats).find("was not split"), std::string::npos) << stats;
  shardrec_free(stats);
  shardrec_plan_destroy(plan);
}

TEST(CapiPlan, PinnedRanksGiveAManualPlan) {
  Model m(4, 2);
  const int32_t ranks[] = {3};
  shardrec_table_constraints_t c = SHARDREC_TABLE_CONSTRAINTS_INIT;
  c.table = "user";
  c.sharding_types = 1u << SHARDREC_SHARDING_TABLE_WISE;
  c.ranks = ranks;
  c.num_ranks = 1;
  shardrec_plan_t* plan = nullptr;
  ASSERT_EQ(m.Create(&plan, {c}), SHARDREC_OK) << shardrec_last_error();
  shardrec_shard_t s;
  ASSERT_EQ(shardrec_plan_shard(plan, 0, 0, &s), SHARDREC_OK);
  EXPECT_EQ(s.rank, 3);
  EXPECT_EQ(s.rows, 1000);
  EXPECT_EQ(s.cols, 16);
  shardrec_plan_destroy(plan);
}

TEST(CapiPlan, RowWiseWithFewerRowsThanRanks) {
  Model m(4);
  shardrec_table_constraints_t c = SHARDREC_TABLE_CONSTRAINTS_INIT;
  c.table = "item";  // 3 rows on 4 ranks: 1, 1, 1, 0
  c.sharding_types = 1u << SHARDREC_SHARDING_ROW_WISE;
  shardrec_plan_t* plan = nullptr;
  ASSERT_EQ(m.Create(&plan, {c}), SHARDREC_OK) << shardrec_last_error();
  size_t n = 0;
  ASSERT_EQ(shardrec_plan_table_sharding(plan, 1, nullptr, &n), SHARDREC_OK);
  ASSERT_EQ(n, 4u);
  const int64_t expect[] = {1, 1, 1, 0};
  for (size_t k = 0; k < 4; ++k) {
    shardrec_shard_t s;
    ASSERT_EQ(shardrec_plan_shard(plan, 1, k, &s), SHARDREC_OK);
    EXPECT_EQ(s.rows, expect[k]);
    EXPECT_EQ(s.rank, static_cast<int32_t>(k));
  }
  shardrec_plan_destroy(plan);
}

TEST(CapiPlan, JsonRoundTripIsByteIdenticalAndKeepsTheHash) {
  Model m(4, 2);
  shardrec_plan_t* plan = nullptr;
  ASSERT_EQ(m.Create(&plan), SHARDREC_OK) << shardrec_last_error();
  const std::string text = Json(plan);
  shardrec_plan_t* back = nullptr;
  ASSERT_EQ(shardrec_plan_from_json(&back, text.data(), text.size()), SHARDREC_OK)
      << shardrec_last_error();
  EXPECT_EQ(Json(back), text);
  uint64_t h1 = 0, h2 = 0;
  ASSERT_EQ(shardrec_plan_hash(plan, &h1), SHARDREC_OK);
  ASSERT_EQ(shardrec_plan_hash(back, &h2), SHARDREC_OK);
  EXPECT_EQ(h1, h2);
  char* stats = nullptr;
  size_t len = 0;
  ASSERT_EQ(shardrec_plan_stats(back, &stats, &len), SHARDREC_OK);
  EXPECT_NE(std::string(stats, len).find("plan read from text"), std::string::npos);
  shardrec_free(stats);
  shardrec_plan_destroy(back);
  shardrec_plan_destroy(plan);
}

TEST(CapiPlan, JsonRoundTripKeepsTheSignOfZero) {
  // A constant init of -0.0 was written as "-0", read back as the integer 0, and the hash
  // changed (found by fuzz_create).
  Model m(2);
  m.tables[0].init_kind = SHARDREC_INIT_CONSTANT;
  m.tables[0].init_low = -0.0f;
  shardrec_plan_t* plan = nullptr;
  ASSERT_EQ(m.Create(&plan), SHARDREC_OK) << shardrec_last_error();
  const std::string text = Json(plan);
  EXPECT_NE(text.find("-0.0"), std::string::npos) << text;
  shardrec_plan_t* back = nullptr;
  ASSERT_EQ(shardrec_plan_from_json(&back, text.data(), text.size()), SHARDREC_OK)
      << shardrec_last_error();
  uint64_t h1 = 0, h2 = 0;
  ASSERT_EQ(shardrec_plan_hash(plan, &h1), SHARDREC_OK);
  ASSERT_EQ(shardrec_plan_hash(back, &h2), SHARDREC_OK);
  EXPECT_EQ(h1, h2);
  EXPECT_EQ(Json(back), text);
  shardrec_plan_destroy(back);
  shardrec_plan_destroy(plan);
}

TEST(CapiPlan, JsonErrorsAreCorruptOrInvalid) {
  shardrec_plan_t* plan = nullptr;
  const char bad[] = "{\"format\": \"shardrec.plan\", ";
  ExpectError(shardrec_plan_from_json(&plan, bad, sizeof(bad) - 1), SHARDREC_ECORRUPT, "byte");
  EXPECT_EQ(plan, nullptr);
  Model m(2);
  ASSERT_EQ(m.Create(&plan), SHARDREC_OK);
  std::string text = Json(plan);
  shardrec_plan_destroy(plan);
  plan = nullptr;
  const std::string key = "\"rows\": 1000";
  text.replace(text.find(key), key.size(), "\"rows\": 0");
  ExpectError(shardrec_plan_from_json(&plan, text.data(), text.size()), SHARDREC_EINVAL,
              "table 'user'");
  EXPECT_EQ(plan, nullptr);
  // A text plan is held to the same largest group as the planner.
  Model m2(2);
  ASSERT_EQ(m2.Create(&plan), SHARDREC_OK);
  text = Json(plan);
  shardrec_plan_destroy(plan);
  plan = nullptr;
  const std::string world = "\"world_size\": 2";
  ASSERT_NE(text.find(world), std::string::npos) << text;
  text.replace(text.find(world), world.size(), "\"world_size\": 70000");
  ExpectError(shardrec_plan_from_json(&plan, text.data(), text.size()), SHARDREC_EINVAL,
              "world_size 70000");
  EXPECT_EQ(plan, nullptr);
  ExpectError(shardrec_plan_from_json(&plan, nullptr, 5), SHARDREC_EINVAL, "text");
}

TEST(CapiPlan, StatsAndHashAreDeterministicAcrossThreads) {
  const Model m(4, 2);
  shardrec_plan_t* ref = nullptr;
  ASSERT_EQ(m.Create(&ref), SHARDREC_OK);
  const std::string text = Json(ref);
  uint64_t ref_hash = 0;
  ASSERT_EQ(shardrec_plan_hash(ref, &ref_hash), SHARDREC_OK);
  std::vector<std::string> texts(4);
  std::vector<uint64_t> hashes(4);
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&, i] {
      shardrec_plan_t* p = nullptr;
      if (m.Create(&p) != SHARDREC_OK) return;
      texts[i] = Json(p);
      shardrec_plan_hash(p, &hashes[i]);
      // Concurrent reads of the shared reference plan are allowed.
      shardrec_shard_t s;
      shardrec_plan_shard(ref, 0, 0, &s);
      shardrec_plan_destroy(p);
    });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(texts[i], text);
    EXPECT_EQ(hashes[i], ref_hash);
  }
  char* stats = nullptr;
  ASSERT_EQ(shardrec_plan_stats(ref, &stats, nullptr), SHARDREC_OK);
  EXPECT_NE(std::string(stats).find("--- shardrec planner statistics ---"), std::string::npos);
  shardrec_free(stats);
  shardrec_plan_destroy(ref);
}

TEST(CapiPlan, InvalidArgumentsAreRejectedWithAMessage) {
  shardrec_plan_t* plan = nullptr;
  {
    Model m(2);
    ExpectError(shardrec_plan_create(nullptr, m.tables.data(), 2, m.features.data(), 3, &m.topology,
                                     nullptr, 0),
                SHARDREC_EINVAL, "out must not be NULL");
    ExpectError(
        shardrec_plan_create(&plan, m.tables.data(), 2, m.features.data(), 3, nullptr, nullptr, 0),
        SHARDREC_EINVAL, "topology must not be NULL");
    ExpectError(
        shardrec_plan_create(&plan, nullptr, 2, m.features.data(), 3, &m.topology, nullptr, 0),
        SHARDREC_EINVAL, "tables is NULL");
  }
  {
    Model m(2);
    m.tables[1].version = 0;
    ExpectError(m.Create(&plan), SHARDREC_EINVAL, "tables[1]: unsupported struct version 0");
  }
  {
    Model m(2);
    m.topology.version = 99;
    ExpectError(m.Create(&plan), SHARDREC_EINVAL, "topology: unsupported struct version 99");
  }
  {
    Model m(2);
    m.tables[0].rows = 0;
    ExpectError(m.Create(&plan), SHARDREC_EINVAL, "table 'user': rows 0 must be > 0");
  }
  {
    Model m(2);
    m.tables[1].name = "user";
    ExpectError(m.Create(&plan), SHARDREC_EINVAL, "duplicate table name 'user'");
  }
  {
    Model m(2);
    m.item_features[0] = 7;
    ExpectError(m.Create(&plan), SHARDREC_EINVAL, "table 'item': unknown feature index 7");
  }
  {
    Model m(2);
    shardrec_table_constraints_t c = SHARDREC_TABLE_CONSTRAINTS_INIT;
    c.table = "ghost";
    ExpectError(m.Create(&plan, {c}), SHARDREC_EINVAL, "unknown table 'ghost'");
  }
  {
    Model m(2);
    m.topology.world_size = 0;
    ExpectError(m.Create(&plan), SHARDREC_EINVAL, "world_size 0");
  }
  {
    // An absurd group is refused before the planner builds per-rank state (2^27 ranks took
    // 20 GB and the OOM killer, found by fuzz_create).
    Model m(2);
    m.topology.world_size = 1 << 27;
    ExpectError(m.Create(&plan), SHARDREC_EINVAL, "must be in [1, 65536]");
  }
  {
    // Sizes whose byte counts would overflow int64 (INT64_MAX rows overflowed the row-block
    // arithmetic; found by fuzz_create under UBSan).
    Model m(2);
    m.tables[0].rows = INT64_MAX;
    ExpectError(m.Create(&plan), SHARDREC_EINVAL, "exceed the limit of 2^56");
    m.tables[0].rows = (int64_t{1} << 56) / m.tables[0].dim + 1;
    ExpectError(m.Create(&plan), SHARDREC_EINVAL, "exceed the limit of 2^56");
  }
  EXPECT_EQ(plan, nullptr);
  EXPECT_EQ(shardrec_table_config_init(nullptr, SHARDREC_TABLE_CONFIG_VERSION), SHARDREC_EINVAL);
  shardrec_topology_t t;
  ExpectError(shardrec_topology_init(&t, 4), SHARDREC_EINVAL, "unsupported struct version 4");
  uint64_t h;
  ExpectError(shardrec_plan_hash(nullptr, &h), SHARDREC_EINVAL, "plan must not be NULL");
}

TEST(CapiPlan, AVersionOneTopologyNeverReadsTheFieldsOfVersionTwo) {
  Model m(2);
  // A caller built against the version 1 header has no collective_latency / per_id_cost: what
  // lies there (here: invalid values) must be neither written by init nor read by create.
  m.topology.collective_latency = -7.0;
  m.topology.per_id_cost = -7.0;
  ASSERT_EQ(shardrec_topology_init(&m.topology, 1), SHARDREC_OK);
  EXPECT_EQ(m.topology.collective_latency, -7.0);
  m.topology.world_size = 2;
  shardrec_plan_t* plan = nullptr;
  ASSERT_EQ(m.Create(&plan), SHARDREC_OK) << shardrec_last_error();
  shardrec_plan_destroy(plan);
}

TEST(CapiPlan, DoesNotFitIsENOMEMNamingTheTable) {
  Model m(2);
  m.tables[0].rows = 10'000'000;  // 640 MB of weights
  m.topology.memory_bytes = 100'000'000;
  shardrec_plan_t* plan = nullptr;
  ExpectError(m.Create(&plan), SHARDREC_ENOMEM,
              "table 'user' (10000000 x 16, float32) does not fit");
  EXPECT_NE(std::string(shardrec_last_error()).find("largest free capacity"), std::string::npos);
  EXPECT_EQ(plan, nullptr);
}

}  // namespace
