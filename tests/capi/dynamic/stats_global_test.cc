// shardrec_embedding_dynamic_stats_global: every rank gets the same table-wide statistics, the
// sums over ranks of shardrec_embedding_dynamic_stats (load factor from the sums), under row-,
// column-, table-wise, data-parallel and grid sharding with evictions; an older struct version
// gets its fields only; a rank refusing its arguments, or ranks naming different tables, fail
// every rank at once, and the next call works.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "tests/capi/dynamic/stream.h"
#include "tests/capi/dynamic/test_util.h"
#include "tests/support/spawn_ranks.h"

namespace shardrec::testing {
namespace {

struct Side {
  int32_t world;
  int32_t sharding;
  int32_t ranks_per_node = 0;  // 0: the world
};

shardrec_dynamic_table_stats_t GlobalOf(shardrec_embedding_t* c, const char* table) {
  shardrec_dynamic_table_stats_t s;
  shardrec_dynamic_table_stats_init(&s, SHARDREC_DYNAMIC_TABLE_STATS_VERSION);
  EXPECT_EQ(shardrec_embedding_dynamic_stats_global(c, table, &s), SHARDREC_OK)
      << shardrec_last_error();
  return s;
}

// The summed fields of a, b as one list (load_factor apart).
std::vector<int64_t> Counts(const shardrec_dynamic_table_stats_t& s) {
  return {s.size,
          s.capacity,
          s.last_inserted,
          s.last_evicted,
          s.last_rejected_admission,
          s.last_rejected_full,
          s.total_inserted,
          s.total_evicted,
          s.total_rejected_admission,
          s.total_rejected_full,
          static_cast<int64_t>(s.metadata_bytes),
          static_cast<int64_t>(s.capacity_bytes),
          s.last_admitted,
          s.total_admitted};
}

TEST(DynamicStatsGlobal, AreTheSumsOverRanksOnEveryRank) {
  constexpr int32_t kSteps = 4;
  for (const Side side :
       {Side{1, SHARDREC_SHARDING_TABLE_WISE}, Side{2, SHARDREC_SHARDING_ROW_WISE},
        Side{2, SHARDREC_SHARDING_COLUMN_WISE}, Side{2, SHARDREC_SHARDING_DATA_PARALLEL},
        Side{4, SHARDREC_SHARDING_TABLE_WISE}, Side{4, SHARDREC_SHARDING_GRID, 2}}) {
    const std::string what =
        "world " + std::to_string(side.world) + " sharding " + std::to_string(side.sharding);
    SCOPED_TRACE(what);
    DynScenario s = MakeDynScenario(side.world, side.sharding, SHARDREC_OPTIMIZER_ADAGRAD, 16, 24);
    if (side.ranks_per_node > 0) s.base.ranks_per_node = side.ranks_per_node;
    for (auto& d : s.dynamic) d.eviction = SHARDREC_EVICTION_LRU;  // 24 ids, 16 slots: evictions
    const int64_t dim = DynOutputDim(s);
    const Stream st = MakeStream(s, dim, kSteps);
    PlanPtr plan = MakeDynPlan(s);
    ASSERT_NE(plan, nullptr);
    std::mutex mu;
    // [rank][table]
    std::vector<std::vector<shardrec_dynamic_table_stats_t>> local(side.world), global(side.world);
    SpawnRanks(side.world, [&](int r) {
      CollPtr coll;
      MakeStreamCollection(s, plan.get(), side.world, r, &coll);
      shardrec_embedding_t* c = coll.get();
      if (c == nullptr) return;
      for (int32_t step = 0; step < kSteps; ++step) {
        ForwardSlice(c, st.batches[step], side.world, r, dim, nullptr);
        BackwardSlice(c, st.grads[step], side.world, r, dim);
      }
      std::vector<shardrec_dynamic_table_stats_t> mine, all;
      for (const char* t : {"t0", "t1"}) {
        mine.push_back(StatsOf(c, t));
        all.push_back(GlobalOf(c, t));
      }
      std::lock_guard<std::mutex> lock(mu);
      local[static_cast<size_t>(r)] = mine;
      global[static_cast<size_t>(r)] = all;
    });
    for (size_t t = 0; t < 2; ++t) {
      std::vector<int64_t> sum(14, 0);
      for (int r = 0; r < side.world; ++r) {
        ASSERT_EQ(local[r].size(), 2u);
        const std::vector<int64_t> c = Counts(local[r][t]);
        for (size_t i = 0; i < c.size(); ++i) sum[i] += c[i];
      }
      const shardrec_dynamic_table_stats_t& g0 = global[0][t];
      EXPECT_EQ(Counts(g0), sum) << "table " << t;
      EXPECT_GT(g0.size, 0) << "table " << t;
      EXPECT_GT(g0.total_evicted, 0) << "table " << t;  // something to sum beyond sizes
      EXPECT_EQ(g0.load_factor, static_cast<double>(g0.size) / static_cast<double>(g0.capacity))
          << "table " << t;
      for (int r = 1; r < side.world; ++r) {
        EXPECT_EQ(Counts(global[r][t]), Counts(g0)) << "rank " << r << " table " << t;
        EXPECT_EQ(global[r][t].load_factor, g0.load_factor) << "rank " << r << " table " << t;
      }
    }
  }
}

// Two ranks of a row-wise SGD collection of dynamic tables "t0" and "t1", trained one step,
// passed to fn(rank, collection).
void OnTwoTrainedRanks(const std::function<void(int, shardrec_embedding_t*)>& fn) {
  DynScenario s = MakeDynScenario(2, SHARDREC_SHARDING_ROW_WISE, SHARDREC_OPTIMIZER_SGD, 16, 8);
  const int64_t dim = DynOutputDim(s);
  const Stream st = MakeStream(s, dim, 1);
  PlanPtr plan = MakeDynPlan(s);
  ASSERT_NE(plan, nullptr);
  SpawnRanks(2, [&](int r) {
    CollPtr coll;
    MakeStreamCollection(s, plan.get(), 2, r, &coll);
    if (coll == nullptr) return;
    ForwardSlice(coll.get(), st.batches[0], 2, r, dim, nullptr);
    BackwardSlice(coll.get(), st.grads[0], 2, r, dim);
    fn(r, coll.get());
  });
}

// A caller built against version 1 of the struct has no capacity_bytes nor admitted counts:
// they are not written.
TEST(DynamicStatsGlobal, WritesTheFieldsOfTheCallersVersionOnly) {
  OnTwoTrainedRanks([](int r, shardrec_embedding_t* c) {
    const shardrec_dynamic_table_stats_t full = GlobalOf(c, "t0");
    shardrec_dynamic_table_stats_t v1;
    ASSERT_EQ(shardrec_dynamic_table_stats_init(&v1, 1), SHARDREC_OK);
    v1.capacity_bytes = 12345;
    v1.last_admitted = v1.total_admitted = -7;
    ASSERT_EQ(shardrec_embedding_dynamic_stats_global(c, "t0", &v1), SHARDREC_OK)
        << "rank " << r << ": " << shardrec_last_error();
    EXPECT_EQ(v1.version, 1u);
    EXPECT_EQ(v1.size, full.size);
    EXPECT_EQ(v1.metadata_bytes, full.metadata_bytes);
    EXPECT_GT(v1.size, 0);
    EXPECT_EQ(v1.capacity_bytes, 12345u);
    EXPECT_EQ(v1.last_admitted, -7);
    EXPECT_EQ(v1.total_admitted, -7);
  });
}

TEST(DynamicStatsGlobal, ARankRefusingItsArgumentsFailsEveryRankAtOnce) {
  OnTwoTrainedRanks([](int r, shardrec_embedding_t* c) {
    const bool refuses = r == 1;
    const auto t0 = std::chrono::steady_clock::now();
    auto expect_refused = [&](shardrec_status_t st, const char* own) {
      if (refuses) {
        EXPECT_NE(st, SHARDREC_OK) << "rank " << r;
      } else {
        EXPECT_EQ(st, SHARDREC_EINVAL) << "rank " << r;
      }
      const std::string msg = shardrec_last_error();
      EXPECT_NE(msg.find(refuses ? own : "rank 1 refused its arguments"), std::string::npos)
          << "rank " << r << ": " << msg;
    };
    shardrec_dynamic_table_stats_t s;
    shardrec_dynamic_table_stats_init(&s, SHARDREC_DYNAMIC_TABLE_STATS_VERSION);
    s.size = -5;
    expect_refused(shardrec_embedding_dynamic_stats_global(c, refuses ? "nope" : "t0", &s), "nope");
    expect_refused(shardrec_embedding_dynamic_stats_global(c, "t0", refuses ? nullptr : &s), "out");
    expect_refused(shardrec_embedding_dynamic_stats_global(c, refuses ? nullptr : "t0", &s),
                   "table");
    shardrec_dynamic_table_stats_t bad = s;
    bad.version = refuses ? 99u : SHARDREC_DYNAMIC_TABLE_STATS_VERSION;
    expect_refused(shardrec_embedding_dynamic_stats_global(c, "t0", &bad), "version 99");
    EXPECT_EQ(s.size, -5) << "rank " << r << ": a refused call wrote the stats";
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 10.0)
        << "rank " << r << " waited for the refusing rank";
    // Ranks naming different tables (each valid) would add one's counts to the other's.
    EXPECT_EQ(shardrec_embedding_dynamic_stats_global(c, r == 0 ? "t0" : "t1", &s), SHARDREC_EINVAL)
        << "rank " << r;
    const std::string msg = shardrec_last_error();
    EXPECT_NE(msg.find("named different tables"), std::string::npos) << "rank " << r << ": " << msg;
    EXPECT_EQ(s.size, -5) << "rank " << r;
    ASSERT_EQ(shardrec_embedding_dynamic_stats_global(c, "t1", &s), SHARDREC_OK)
        << "rank " << r << ": " << shardrec_last_error();
    EXPECT_GT(s.size, 0);
  });
}

}  // namespace
}  // namespace shardrec::testing
