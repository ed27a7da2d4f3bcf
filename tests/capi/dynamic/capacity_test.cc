// Capacity in bytes of dynamic tables through the C API (docs/dynamic-tables.md, "Capacity in
// bytes"): the plan's slots are the largest count whose rows, optimizer state and metadata fit,
// the stats report the capacity in rows and bytes, a table given in bytes trains bit-identically
// to the same table given its slot count, the plan JSON keeps the figure, and bad figures fail
// plan creation with a message naming the table.
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "shardrec/plan.h"
#include "tests/capi/dynamic/test_util.h"
#include "tests/support/spawn_ranks.h"

namespace shardrec::testing {
namespace {

int64_t PlanRows(const shardrec_plan_t* plan, size_t table) {
  int64_t rows = 0;
  EXPECT_EQ(shardrec_plan_table_rows(plan, table, &rows), SHARDREC_OK) << shardrec_last_error();
  return rows;
}

// This rank's stats of both tables of a world-1 collection of `plan`.
std::vector<shardrec_dynamic_table_stats_t> Stats(const DynScenario& s,
                                                  const shardrec_plan_t* plan) {
  std::vector<shardrec_dynamic_table_stats_t> out(2);
  const shardrec_optimizer_config_t opt = ToCOptimizer(s.base.optimizer);
  SpawnRanks(1, [&](int r) {
    shardrec_embedding_t* c = nullptr;
    ASSERT_EQ(shardrec_embedding_create(&c, plan, GroupComm(1, r), &opt, nullptr), SHARDREC_OK)
        << shardrec_last_error();
    CollPtr coll(c);
    for (int t = 0; t < 2; ++t) {
      shardrec_dynamic_table_stats_init(&out[t], SHARDREC_DYNAMIC_TABLE_STATS_VERSION);
      ASSERT_EQ(shardrec_embedding_dynamic_stats(c, t == 0 ? "t0" : "t1", &out[t]), SHARDREC_OK)
          << shardrec_last_error();
    }
  });
  return out;
}

// A caller built against version 1 of the stats struct (which ends with metadata_bytes) gets
// nothing written past it.
TEST(DynamicCapacity, VersionOneStatsGetNoCapacityBytes) {
  DynScenario s = MakeDynScenario(1, SHARDREC_SHARDING_TABLE_WISE, SHARDREC_OPTIMIZER_SGD, 16, 24);
  PlanPtr plan = MakeDynPlan(s);
  ASSERT_NE(plan, nullptr);
  const shardrec_optimizer_config_t opt = ToCOptimizer(s.base.optimizer);
  shardrec_embedding_t* c = nullptr;
  ASSERT_EQ(shardrec_embedding_create(&c, plan.get(), GroupComm(1, 0), &opt, nullptr), SHARDREC_OK)
      << shardrec_last_error();
  CollPtr coll(c);
  shardrec_dynamic_table_stats_t st;
  st.capacity_bytes = 12345;
  ASSERT_EQ(shardrec_dynamic_table_stats_init(&st, 1), SHARDREC_OK);
  EXPECT_EQ(st.capacity_bytes, 12345u);
  ASSERT_EQ(shardrec_embedding_dynamic_stats(c, "t0", &st), SHARDREC_OK) << shardrec_last_error();
  EXPECT_EQ(st.capacity, 16);
  EXPECT_GT(st.metadata_bytes, 0u);
  EXPECT_EQ(st.capacity_bytes, 12345u);
}

// A version-2 caller's struct ends at capacity_bytes: the admitted counts (version 3) are
// neither initialised nor written; a version-3 caller gets them.
TEST(DynamicCapacity, VersionTwoStatsGetNoAdmittedCounts) {
  DynScenario s = MakeDynScenario(1, SHARDREC_SHARDING_TABLE_WISE, SHARDREC_OPTIMIZER_SGD, 16, 24);
  PlanPtr plan = MakeDynPlan(s);
  ASSERT_NE(plan, nullptr);
  CollPtr coll = CreateDynCollection(s, plan.get(), 1, 0);
  ASSERT_NE(coll, nullptr);
  const auto batches = MakeDynBatches(s);
  KjtHolder kjt(batches[0][0], s.base.num_features, false);
  std::vector<float> out(static_cast<size_t>(batches[0][0].batch_size * DynOutputDim(s)));
  ASSERT_EQ(shardrec_embedding_forward(coll.get(), kjt.view(), out.data(), out.size(), nullptr),
            SHARDREC_OK)
      << shardrec_last_error();
  shardrec_dynamic_table_stats_t st;
  st.last_admitted = st.total_admitted = -7;
  ASSERT_EQ(shardrec_dynamic_table_stats_init(&st, 2), SHARDREC_OK);
  EXPECT_EQ(st.last_admitted, -7);
  ASSERT_EQ(shardrec_embedding_dynamic_stats(coll.get(), "t0", &st), SHARDREC_OK);
  EXPECT_GT(st.capacity_bytes, 0u);
  EXPECT_GT(st.last_inserted, 0);
  EXPECT_EQ(st.last_admitted, -7);
  EXPECT_EQ(st.total_admitted, -7);
  shardrec_dynamic_table_stats_init(&st, SHARDREC_DYNAMIC_TABLE_STATS_VERSION);
  ASSERT_EQ(shardrec_embedding_dynamic_stats(coll.get(), "t0", &st), SHARDREC_OK);
  EXPECT_EQ(st.last_admitted, st.last_inserted + st.last_rejected_full);
  EXPECT_EQ(st.total_admitted, st.last_admitted);
}

// Bytes of one slot's row and optimizer state (fp32 storage): Adagrad keeps one float per
// element, row-wise Adagrad one per row.
int64_t RowAndStateBytes(int32_t optimizer, int64_t dim) {
  return dim * 4 + (optimizer == SHARDREC_OPTIMIZER_ROWWISE_ADAGRAD ? 4 : dim * 4);
}

// The slots are the most whose rows, state and metadata (read back from the stats) fit in the
// bytes: the same table given one slot more (its metadata read from its own stats, since the
// index grows in whole buckets) would not fit; the stats' capacity_bytes is the allocation
// (every slot and the zero row, with state) plus the metadata.
TEST(DynamicCapacity, BytesBecomeTheSlotsThatFit) {
  for (int32_t optimizer : {SHARDREC_OPTIMIZER_ADAGRAD, SHARDREC_OPTIMIZER_ROWWISE_ADAGRAD}) {
    for (int32_t eviction : {SHARDREC_EVICTION_LRU, SHARDREC_EVICTION_SCORE}) {
      SCOPED_TRACE("optimizer " + std::to_string(optimizer) + " eviction " +
                   std::to_string(eviction));
      DynScenario s = MakeDynScenario(1, SHARDREC_SHARDING_TABLE_WISE, optimizer, 0, 24);
      const int64_t bytes[2] = {5000, 7777};
      for (int t = 0; t < 2; ++t) {
        s.dynamic[t].eviction = eviction;
        s.dynamic[t].capacity_bytes = bytes[t];
      }
      PlanPtr plan = MakeDynPlan(s);
      ASSERT_NE(plan, nullptr);
      const std::vector<shardrec_dynamic_table_stats_t> st = Stats(s, plan.get());
      DynScenario more = s;
      for (int t = 0; t < 2; ++t) {
        more.dynamic[t].capacity_bytes = 0;
        more.base.tables[t].rows = PlanRows(plan.get(), static_cast<size_t>(t)) + 1;
      }
      PlanPtr more_plan = MakeDynPlan(more);
      ASSERT_NE(more_plan, nullptr);
      const std::vector<shardrec_dynamic_table_stats_t> more_st = Stats(more, more_plan.get());
      for (int t = 0; t < 2; ++t) {
        const int64_t dim = s.base.tables[t].dim;
        const int64_t slots = PlanRows(plan.get(), static_cast<size_t>(t));
        ASSERT_GT(slots, 0);
        EXPECT_EQ(st[t].capacity, slots);
        ASSERT_EQ(more_st[t].capacity, slots + 1);
        const auto meta = static_cast<int64_t>(st[t].metadata_bytes);
        const auto more_meta = static_cast<int64_t>(more_st[t].metadata_bytes);
        EXPECT_GT(more_meta, meta) << "every slot has metadata";
        const int64_t row = RowAndStateBytes(optimizer, dim);
        EXPECT_LE(slots * row + meta, bytes[t]) << "table " << t;
        EXPECT_GT((slots + 1) * row + more_meta, bytes[t]) << "table " << t;
        EXPECT_EQ(st[t].capacity_bytes, static_cast<uint64_t>((slots + 1) * row + meta));
      }
    }
  }
}

// A table given in bytes is the table given its slot count: the same outputs, bit for bit, at
// capacity with eviction, row-wise at world 2; the plan JSON carries the figure and reads back to
// the same plan.
TEST(DynamicCapacity, BytesTrainAsTheirSlotCount) {
  DynScenario by_bytes =
      MakeDynScenario(2, SHARDREC_SHARDING_ROW_WISE, SHARDREC_OPTIMIZER_ADAM, 0, 40);
  for (auto& d : by_bytes.dynamic) {
    d.eviction = SHARDREC_EVICTION_LFU;
    d.admission_threshold = 2;  // with admission counters: the per-slot cost is not linear
    d.capacity_bytes = 3000;
  }
  PlanPtr plan = MakeDynPlan(by_bytes);
  ASSERT_NE(plan, nullptr);
  DynScenario by_rows = by_bytes;
  for (int t = 0; t < 2; ++t) {
    by_rows.dynamic[t].capacity_bytes = 0;
    by_rows.base.tables[t].rows = PlanRows(plan.get(), static_cast<size_t>(t));
    by_bytes.base.tables[t].rows = 0;
    EXPECT_LT(by_rows.base.tables[t].rows, 40) << "the case must evict";
  }
  const auto batches = MakeDynBatches(by_rows);
  const auto grads = MakeGrads(by_rows.base, batches, DynOutputDim(by_rows));
  const DynRun a = RunDynamic(by_bytes, batches, grads);
  const DynRun b = RunDynamic(by_rows, batches, grads);
  ASSERT_EQ(a.out.size(), b.out.size());
  for (size_t step = 0; step < a.out.size(); ++step)
    for (size_t r = 0; r < a.out[step].size(); ++r)
      EXPECT_EQ(a.out[step][r], b.out[step][r]) << "step " << step << " rank " << r;
  int64_t evicted = 0;
  for (const auto& rank : b.stats)
    for (const auto& t : rank) evicted += t.total_evicted;
  EXPECT_GT(evicted, 0);

  char* text = nullptr;
  size_t len = 0;
  ASSERT_EQ(shardrec_plan_to_json(plan.get(), &text, &len), SHARDREC_OK) << shardrec_last_error();
  const std::string json(text, len);
  shardrec_free(text);
  EXPECT_NE(json.find("\"capacity_bytes\": 3000"), std::string::npos) << json;
  shardrec_plan_t* back = nullptr;
  ASSERT_EQ(shardrec_plan_from_json(&back, json.data(), json.size()), SHARDREC_OK)
      << shardrec_last_error();
  PlanPtr back_ptr(back);
  uint64_t h1 = 0, h2 = 0;
  ASSERT_EQ(shardrec_plan_hash(plan.get(), &h1), SHARDREC_OK);
  ASSERT_EQ(shardrec_plan_hash(back, &h2), SHARDREC_OK);
  EXPECT_EQ(h1, h2);
  EXPECT_EQ(PlanRows(back, 0), PlanRows(plan.get(), 0));
  char* stats = nullptr;
  ASSERT_EQ(shardrec_plan_stats(plan.get(), &stats, &len), SHARDREC_OK);
  EXPECT_NE(std::string(stats, len).find("(dynamic, 3000 bytes)"), std::string::npos)
      << std::string(stats, len);
  shardrec_free(stats);
}

// Plan creation refuses: rows and bytes both given, neither, a negative figure, and a figure
// below one slot's cost (naming the table and the cost), or one giving fewer slots than the
// plan's shards. A version-1 dynamic config has no
// capacity_bytes and is read without it.
TEST(DynamicCapacity, BadFiguresFailPlanCreation) {
  struct Case {
    int64_t rows, bytes;
    const char* want;
  };
  for (const Case& c : {Case{16, 4096, "not both"}, Case{0, 0, "rows 0 must be > 0"},
                        Case{0, -8, "capacity_bytes -8 must be >= 0"},
                        Case{0, 40, "capacity_bytes 40 holds no slot"}}) {
    SCOPED_TRACE(c.want);
    DynScenario s =
        MakeDynScenario(1, SHARDREC_SHARDING_TABLE_WISE, SHARDREC_OPTIMIZER_ADAM, 64, 24);
    s.base.tables[1].rows = c.rows;
    s.dynamic[1].capacity_bytes = c.bytes;
    ::testing::TestPartResultArray failures;  // MakeDynPlan's own expectation of success
    {
      ::testing::ScopedFakeTestPartResultReporter reporter(
          ::testing::ScopedFakeTestPartResultReporter::INTERCEPT_ONLY_CURRENT_THREAD, &failures);
      PlanPtr plan = MakeDynPlan(s);
      EXPECT_EQ(plan, nullptr);
    }
    const std::string msg = shardrec_last_error();
    EXPECT_NE(msg.find("table 't1'"), std::string::npos) << msg;
    EXPECT_NE(msg.find(c.want), std::string::npos) << msg;
  }
  {
    // Two slots' worth, row-wise over 4 ranks: fewer slots than shards.
    DynScenario s = MakeDynScenario(4, SHARDREC_SHARDING_ROW_WISE, SHARDREC_OPTIMIZER_SGD, 0, 24);
    s.base.min_partition = 1;
    for (auto& d : s.dynamic) d.capacity_bytes = 2 * (12 * 4 + 28) + 10;
    ::testing::TestPartResultArray failures;
    {
      ::testing::ScopedFakeTestPartResultReporter reporter(
          ::testing::ScopedFakeTestPartResultReporter::INTERCEPT_ONLY_CURRENT_THREAD, &failures);
      PlanPtr plan = MakeDynPlan(s);
      EXPECT_EQ(plan, nullptr);
    }
    const std::string msg = shardrec_last_error();
    EXPECT_NE(msg.find("slots, fewer than its"), std::string::npos) << msg;
  }
  DynScenario s = MakeDynScenario(1, SHARDREC_SHARDING_TABLE_WISE, SHARDREC_OPTIMIZER_ADAM, 64, 24);
  for (auto& d : s.dynamic) {
    ASSERT_EQ(shardrec_dynamic_table_config_init(&d, 1), SHARDREC_OK);
    d.capacity_bytes = -1;  // past the end of a version-1 struct: never read
  }
  PlanPtr plan = MakeDynPlan(s);
  ASSERT_NE(plan, nullptr);
  EXPECT_EQ(PlanRows(plan.get(), 1), 64);
}

// A dynamic shard numbers its slots in 32 bits. A plan giving one shard 2^31 - 1 slots or more
// was made (and written to JSON) although no collection could ever be created from it: the
// planner now refuses it, naming the limit.
TEST(DynamicCapacity, AShardOfMoreSlotsThanItCanNumberIsRefusedByThePlanner) {
  shardrec_dynamic_table_config_t dyn;
  ASSERT_EQ(shardrec_dynamic_table_config_init(&dyn, SHARDREC_DYNAMIC_TABLE_CONFIG_VERSION),
            SHARDREC_OK);
  shardrec_feature_config_t feature = SHARDREC_FEATURE_CONFIG_INIT;
  feature.name = "f";
  shardrec_table_config_t table = SHARDREC_TABLE_CONFIG_INIT;
  table.name = "huge";
  table.dim = 1;
  table.dynamic = &dyn;
  for (const int64_t rows : {int64_t{INT32_MAX}, int64_t{3000000000}}) {
    table.rows = rows;
    PlanPtr refused;
    EXPECT_EQ(PlanOneTable(table, &refused), SHARDREC_EUNSUPPORTED) << rows;
    EXPECT_EQ(refused, nullptr);
    const std::string msg = shardrec_last_error();
    EXPECT_NE(msg.find("at most 2147483646 per shard"), std::string::npos) << msg;
  }
  table.rows = INT32_MAX - 1;  // the largest shard still plans
  PlanPtr plan = OneTablePlan(table);
  EXPECT_NE(plan, nullptr);
  // Two such tables over two ranks plan, each row-wise: table-wise, column-wise and
  // data-parallel would each give one rank every slot (the enumerator no longer offers them,
  // PlannerEnumerator.DynamicShardsOverTheSlotLimitAreNotOffered).
  shardrec_topology_t topo;
  ASSERT_EQ(shardrec_topology_init(&topo, SHARDREC_TOPOLOGY_VERSION), SHARDREC_OK);
  topo.world_size = 2;
  topo.optimizer = SHARDREC_OPTIMIZER_SGD;
  topo.memory_bytes = uint64_t{1} << 50;
  shardrec_table_config_t tables[2] = {table, table};
  tables[0].rows = tables[1].rows = 3000000000;
  tables[1].name = "huge2";
  const int32_t indices[2] = {0, 1};
  for (int t = 0; t < 2; ++t) {
    tables[t].features = &indices[t];
    tables[t].num_features = 1;
  }
  shardrec_feature_config_t features[2] = {feature, feature};
  features[1].name = "g";
  shardrec_plan_t* two = nullptr;
  ASSERT_EQ(shardrec_plan_create(&two, tables, 2, features, 2, &topo, nullptr, 0), SHARDREC_OK)
      << shardrec_last_error();
  for (size_t t = 0; t < 2; ++t) {
    int32_t type = -1;
    size_t shards = 0;
    ASSERT_EQ(shardrec_plan_table_sharding(two, t, &type, &shards), SHARDREC_OK);
    EXPECT_EQ(type, SHARDREC_SHARDING_ROW_WISE) << t;
    EXPECT_EQ(shards, 2u);
  }
  shardrec_plan_destroy(two);
}

// A dynamic table's metadata (index, per-slot records) is written at creation, beside weights
// that are written only as rows are created: a capacity whose metadata the host cannot hold was
// accepted and the process ended in the OOM killer. Creation now refuses it with ENOMEM before
// writing anything, naming the metadata, and the communicator stays usable.
TEST(DynamicCapacity, MetadataBeyondTheHostsMemoryIsRefusedBeforeAnyWrite) {
  const uint64_t kb = MemAvailableKiB();
  if (kb == 0) GTEST_SKIP() << "no MemAvailable in /proc/meminfo: the check does not apply here";
  // 24 bytes of metadata per slot (docs/dynamic-tables.md) for 1 GiB more than is available;
  // the weights (dim 4: 16 bytes per slot) alone would fit.
  const int64_t slots = static_cast<int64_t>((kb * 1024 + (uint64_t{1} << 30)) / 24) + 1;
  if (slots >= INT32_MAX - 1) GTEST_SKIP() << "a host this large needs more than one shard";
  shardrec_dynamic_table_config_t dyn;
  ASSERT_EQ(shardrec_dynamic_table_config_init(&dyn, SHARDREC_DYNAMIC_TABLE_CONFIG_VERSION),
            SHARDREC_OK);
  dyn.eviction = SHARDREC_EVICTION_LRU;
  shardrec_table_config_t table = SHARDREC_TABLE_CONFIG_INIT;
  table.name = "huge";
  table.rows = slots;
  table.dim = 4;
  table.dynamic = &dyn;
  PlanPtr plan = OneTablePlan(table);
  ASSERT_NE(plan, nullptr);
  shardrec_comm_t* comm = GroupComm(1, 0);
  shardrec_embedding_t* c = nullptr;
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(shardrec_embedding_create(&c, plan.get(), comm, nullptr, nullptr), SHARDREC_ENOMEM);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  const std::string error = shardrec_last_error();
  EXPECT_NE(error.find("dynamic tables' metadata"), std::string::npos) << error;
  EXPECT_NE(error.find("MemAvailable"), std::string::npos) << error;
  EXPECT_EQ(c, nullptr);
  EXPECT_EQ(shardrec_comm_barrier(comm), SHARDREC_OK) << shardrec_last_error();
}

}  // namespace
}  // namespace shardrec::testing
