// Delta export of dynamic tables through the C API: two deltas replayed (upsert rows, erase
// tombstones) onto an empty id -> row map give the table (every row, probed by a forward of one
// id per bag, and its size), under every sharding at worlds 1, 2 and 4 with eviction; every rank
// gets the same delta; a row updated then evicted appears only as a tombstone, an evicted id that
// returns only as a row; too small buffers and a missing mark fail on every rank.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "shardrec/checkpoint.h"
#include "tests/capi/dynamic/stream.h"
#include "tests/capi/dynamic/test_util.h"
#include "tests/support/spawn_ranks.h"
#include "tests/support/temp_dirs.h"

namespace shardrec::testing {
namespace {

struct DeltaOut {
  std::vector<int64_t> ids;
  std::vector<float> rows;
  std::vector<int64_t> tombstones;
};

// Both calls of the size-then-fill pattern: the first, with no buffers, fails with the sizes.
DeltaOut GetDelta(shardrec_embedding_t* c, const char* table, int64_t dim) {
  DeltaOut d;
  size_t n = 0, nt = 0;
  const shardrec_status_t first =
      shardrec_embedding_dynamic_delta(c, table, nullptr, nullptr, 0, nullptr, 0, &n, &nt);
  EXPECT_EQ(first, n + nt == 0 ? SHARDREC_OK : SHARDREC_EINVAL) << shardrec_last_error();
  d.ids.resize(n);
  d.rows.resize(n * static_cast<size_t>(dim));
  d.tombstones.resize(nt);
  size_t n2 = 0, nt2 = 0;
  EXPECT_EQ(shardrec_embedding_dynamic_delta(c, table, d.ids.data(), d.rows.data(), n,
                                             d.tombstones.data(), nt, &n2, &nt2),
            SHARDREC_OK)
      << shardrec_last_error();
  EXPECT_EQ(n2, n);
  EXPECT_EQ(nt2, nt);
  return d;
}

using Table = std::map<int64_t, std::vector<float>>;

void Replay(const DeltaOut& d, int64_t dim, Table* t) {
  for (size_t i = 0; i < d.ids.size(); ++i)
    (*t)[d.ids[i]].assign(d.rows.begin() + static_cast<int64_t>(i) * dim,
                          d.rows.begin() + static_cast<int64_t>(i + 1) * dim);
  for (int64_t x : d.tombstones) {
    EXPECT_EQ(std::count(d.ids.begin(), d.ids.end(), x), 0) << "id " << x << " is both";
    t->erase(x);
  }
}

struct Side {
  int32_t world;
  int32_t sharding;
  int32_t ranks_per_node = 0;  // 0: the world
};

// Marks at creation, trains 3 steps, takes delta 1, marks, trains 3 more, takes delta 2, then
// probes every pool id. The replay of both deltas must be the table.
TEST(DynamicDelta, ReplayedDeltasEqualTheTable) {
  constexpr int32_t kSteps = 6;
  for (const Side side :
       {Side{1, SHARDREC_SHARDING_TABLE_WISE}, Side{2, SHARDREC_SHARDING_ROW_WISE},
        Side{2, SHARDREC_SHARDING_COLUMN_WISE}, Side{4, SHARDREC_SHARDING_ROW_WISE},
        Side{2, SHARDREC_SHARDING_DATA_PARALLEL}, Side{4, SHARDREC_SHARDING_GRID, 2},
        Side{4, SHARDREC_SHARDING_TABLE_ROW_WISE, 2}}) {
    SCOPED_TRACE("world " + std::to_string(side.world) + " sharding " +
                 std::to_string(side.sharding));
    DynScenario s = MakeDynScenario(side.world, side.sharding, SHARDREC_OPTIMIZER_ADAGRAD, 16, 24);
    if (side.ranks_per_node > 0) s.base.ranks_per_node = side.ranks_per_node;
    for (auto& d : s.dynamic) d.eviction = SHARDREC_EVICTION_LRU;  // 24 ids, 16 slots: evictions
    s.base.tables[0].dtype = SHARDREC_DTYPE_BFLOAT16;              // widened to fp32 in the delta
    const int64_t dim = DynOutputDim(s);
    const Stream st = MakeStream(s, dim, kSteps);
    PlanPtr plan = MakeDynPlan(s);
    ASSERT_NE(plan, nullptr);
    std::mutex mu;
    std::vector<std::vector<DeltaOut>> deltas(static_cast<size_t>(side.world));  // [rank][2 x 2]
    std::vector<float> probe(static_cast<size_t>(st.probe.batch_size * dim));
    int64_t sizes[2] = {0, 0}, evicted = 0;
    SpawnRanks(side.world, [&](int r) {
      CollPtr coll;
      MakeStreamCollection(s, plan.get(), side.world, r, &coll);
      shardrec_embedding_t* c = coll.get();
      if (c == nullptr) return;
      auto train = [&](int32_t step) {
        ForwardSlice(c, st.batches[step], side.world, r, dim, nullptr);
        BackwardSlice(c, st.grads[step], side.world, r, dim);
      };
      std::vector<DeltaOut> mine;
      for (const char* t : {"t0", "t1"})
        ASSERT_EQ(shardrec_embedding_dynamic_mark(c, t), SHARDREC_OK) << shardrec_last_error();
      for (int32_t step = 0; step < 3; ++step) train(step);
      for (int t = 0; t < 2; ++t) {
        const char* name = t == 0 ? "t0" : "t1";
        mine.push_back(GetDelta(c, name, s.base.tables[static_cast<size_t>(t)].dim));
        ASSERT_EQ(shardrec_embedding_dynamic_mark(c, name), SHARDREC_OK);
      }
      for (int32_t step = 3; step < kSteps; ++step) train(step);
      for (int t = 0; t < 2; ++t)
        mine.push_back(
            GetDelta(c, t == 0 ? "t0" : "t1", s.base.tables[static_cast<size_t>(t)].dim));
      int64_t my_sizes[2] = {0, 0}, my_evicted = 0;
      for (int t = 0; t < 2; ++t) {
        shardrec_dynamic_table_stats_t stats;
        shardrec_dynamic_table_stats_init(&stats, SHARDREC_DYNAMIC_TABLE_STATS_VERSION);
        ASSERT_EQ(shardrec_embedding_dynamic_stats(c, t == 0 ? "t0" : "t1", &stats), SHARDREC_OK);
        my_sizes[t] = stats.size;
        my_evicted += stats.total_evicted;
      }
      ForwardSlice(c, st.probe, side.world, r, dim, probe.data());
      std::lock_guard<std::mutex> lock(mu);
      deltas[static_cast<size_t>(r)] = std::move(mine);
      sizes[0] += my_sizes[0];
      sizes[1] += my_sizes[1];
      evicted += my_evicted;
    });
    const std::string what =
        "world " + std::to_string(side.world) + " sharding " + std::to_string(side.sharding);
    EXPECT_GT(evicted, 0) << what;
    size_t tombstones = 0;
    for (const DeltaOut& d : deltas[0]) tombstones += d.tombstones.size();
    EXPECT_GT(tombstones, 0u) << what;  // the replay erases rows too
    for (int r = 1; r < side.world; ++r) {
      for (size_t k = 0; k < 4; ++k) {
        EXPECT_EQ(deltas[r][k].ids, deltas[0][k].ids) << what << " rank " << r;
        EXPECT_EQ(std::memcmp(deltas[r][k].rows.data(), deltas[0][k].rows.data(),
                              deltas[0][k].rows.size() * sizeof(float)),
                  0)
            << what << " rank " << r;
        EXPECT_EQ(deltas[r][k].tombstones, deltas[0][k].tombstones) << what << " rank " << r;
      }
    }
    for (int t = 0; t < 2; ++t) {
      const int64_t tdim = s.base.tables[static_cast<size_t>(t)].dim, col = t == 0 ? 0 : 8;
      Table table;
      Replay(deltas[0][static_cast<size_t>(t)], tdim, &table);
      Replay(deltas[0][static_cast<size_t>(2 + t)], tdim, &table);
      EXPECT_EQ(static_cast<int64_t>(table.size()), sizes[t]) << what << " table " << t;
      const auto& pool = s.pools[static_cast<size_t>(t)];
      for (const auto& [id, row] : table) {
        const auto at = std::find(pool.begin(), pool.end(), id);
        ASSERT_NE(at, pool.end()) << what << ": id " << id << " was never trained";
        const int64_t i = at - pool.begin();
        EXPECT_EQ(std::memcmp(row.data(), probe.data() + i * dim + col, row.size() * sizeof(float)),
                  0)
            << what << " table " << t << " id " << id;
      }
    }
  }
}

// Capacity 2, LRU, world 1: A is inserted, marked, updated, then evicted by B and C: the delta has
// B and C as rows and A only as a tombstone. A then returns and evicts B (the LRU tie goes to the
// smaller id): A is a changed row and B a tombstone.
TEST(DynamicDelta, UpdatedThenEvictedIsOnlyATombstone) {
  DynScenario s = MakeDynScenario(1, SHARDREC_SHARDING_TABLE_WISE, SHARDREC_OPTIMIZER_SGD, 2, 8);
  for (auto& d : s.dynamic) d.eviction = SHARDREC_EVICTION_LRU;
  PlanPtr plan = MakeDynPlan(s);
  ASSERT_NE(plan, nullptr);
  const shardrec_optimizer_config_t opt = ToCOptimizer(s.base.optimizer);
  const int64_t dim = DynOutputDim(s);
  constexpr int64_t A = 5, B = 7, C = 9;
  shardrec_embedding_options_t o;
  shardrec_embedding_options_init(&o, SHARDREC_EMBEDDING_OPTIONS_VERSION);
  shardrec_embedding_t* c = nullptr;
  ASSERT_EQ(shardrec_embedding_create(&c, plan.get(), GroupComm(1, 0), &opt, &o), SHARDREC_OK)
      << shardrec_last_error();
  CollPtr coll(c);
  size_t n = 0, nt = 0;
  // No mark yet: refused.
  EXPECT_EQ(shardrec_embedding_dynamic_delta(c, "t0", nullptr, nullptr, 0, nullptr, 0, &n, &nt),
            SHARDREC_EUSAGE);
  auto step = [&](std::vector<int64_t> ids) {
    RefBatch b;
    b.batch_size = 1;
    b.lengths = {static_cast<int32_t>(ids.size()), 0, 0};
    b.ids = ids;
    KjtHolder kjt(b, 3, false);
    std::vector<float> out(static_cast<size_t>(dim)), grad(static_cast<size_t>(dim), 1.0f);
    ASSERT_EQ(shardrec_embedding_forward(c, kjt.view(), out.data(), out.size(), nullptr),
              SHARDREC_OK)
        << shardrec_last_error();
    ASSERT_EQ(shardrec_embedding_backward(c, grad.data(), grad.size(), nullptr), SHARDREC_OK)
        << shardrec_last_error();
  };
  step({A});
  ASSERT_EQ(shardrec_embedding_dynamic_mark(c, "t0"), SHARDREC_OK) << shardrec_last_error();
  DeltaOut d = GetDelta(c, "t0", 8);
  EXPECT_TRUE(d.ids.empty() && d.tombstones.empty());
  step({A});
  d = GetDelta(c, "t0", 8);
  EXPECT_EQ(d.ids, std::vector<int64_t>{A});
  step({B, C});
  d = GetDelta(c, "t0", 8);
  EXPECT_EQ(d.ids, (std::vector<int64_t>{B, C}));
  EXPECT_EQ(d.tombstones, std::vector<int64_t>{A});
  // A buffer too small: nothing written, the sizes reported.
  int64_t one_id = -1;
  std::vector<float> one_row(8, -1.0f);
  EXPECT_EQ(
      shardrec_embedding_dynamic_delta(c, "t0", &one_id, one_row.data(), 1, nullptr, 0, &n, &nt),
      SHARDREC_EINVAL);
  EXPECT_EQ(n, 2u);
  EXPECT_EQ(nt, 1u);
  EXPECT_EQ(one_id, -1);
  step({A});
  d = GetDelta(c, "t0", 8);
  EXPECT_EQ(d.ids, (std::vector<int64_t>{A, C}));
  EXPECT_EQ(d.tombstones, std::vector<int64_t>{B});
}

// A dynamic table's export (world 2, row-wise, after training) holds every row by id: "ids"
// ascending and "weights" equal to the rows a forward returns, as many as the table holds.
TEST(DynamicDelta, TableExportHoldsEveryRowById) {
  DynScenario s =
      MakeDynScenario(2, SHARDREC_SHARDING_ROW_WISE, SHARDREC_OPTIMIZER_ADAGRAD, 64, 24);
  const int64_t dim = DynOutputDim(s);
  const Stream st = MakeStream(s, dim, 3);
  PlanPtr plan = MakeDynPlan(s);
  ASSERT_NE(plan, nullptr);
  const std::string path = FreshDir("dyn_export") + "/t.safetensors";
  std::vector<float> probe(static_cast<size_t>(st.probe.batch_size * dim));
  std::vector<int64_t> sizes(2, 0);
  SpawnRanks(2, [&](int r) {
    CollPtr coll;
    MakeStreamCollection(s, plan.get(), 2, r, &coll);
    shardrec_embedding_t* c = coll.get();
    if (c == nullptr) return;
    for (int32_t step = 0; step < 3; ++step) {
      ForwardSlice(c, st.batches[step], 2, r, dim, nullptr);
      BackwardSlice(c, st.grads[step], 2, r, dim);
    }
    ASSERT_EQ(shardrec_checkpoint_export_table(c, "t0", path.c_str(), 0), SHARDREC_OK)
        << shardrec_last_error();
    shardrec_dynamic_table_stats_t stats;
    shardrec_dynamic_table_stats_init(&stats, SHARDREC_DYNAMIC_TABLE_STATS_VERSION);
    ASSERT_EQ(shardrec_embedding_dynamic_stats(c, "t0", &stats), SHARDREC_OK);
    sizes[static_cast<size_t>(r)] = stats.size;
    ForwardSlice(c, st.probe, 2, r, dim, probe.data());
  });
  // The safetensors layout read by hand: 8-byte header length, JSON header, data.
  std::ifstream in(path, std::ios::binary);
  ASSERT_TRUE(in.good());
  uint64_t hlen = 0;
  in.read(reinterpret_cast<char*>(&hlen), 8);
  std::string header(hlen, '\0');
  in.read(header.data(), static_cast<std::streamsize>(hlen));
  const std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const nlohmann::json h = nlohmann::json::parse(header);
  EXPECT_EQ(h["__metadata__"]["format"], "shardrec-dynamic-table");
  EXPECT_EQ(h["ids"]["dtype"], "I64");
  EXPECT_EQ(h["weights"]["dtype"], "F32");
  const int64_t n = h["ids"]["shape"][0].get<int64_t>();
  EXPECT_EQ(n, sizes[0] + sizes[1]);
  EXPECT_GT(n, 0);
  EXPECT_EQ(h["weights"]["shape"], nlohmann::json::array({n, 8}));
  std::vector<int64_t> ids(static_cast<size_t>(n));
  std::vector<float> rows(static_cast<size_t>(n * 8));
  const size_t ib = h["ids"]["data_offsets"][0].get<size_t>();
  const size_t wb = h["weights"]["data_offsets"][0].get<size_t>();
  ASSERT_GE(data.size(), wb + rows.size() * sizeof(float));
  std::memcpy(ids.data(), data.data() + ib, ids.size() * sizeof(int64_t));
  std::memcpy(rows.data(), data.data() + wb, rows.size() * sizeof(float));
  EXPECT_TRUE(std::is_sorted(ids.begin(), ids.end()));
  const auto& pool = s.pools[0];
  for (int64_t k = 0; k < n; ++k) {
    const auto at = std::find(pool.begin(), pool.end(), ids[static_cast<size_t>(k)]);
    ASSERT_NE(at, pool.end()) << "id " << ids[static_cast<size_t>(k)];
    EXPECT_EQ(std::memcmp(rows.data() + k * 8, probe.data() + (at - pool.begin()) * dim,
                          8 * sizeof(float)),
              0)
        << "id " << ids[static_cast<size_t>(k)];
  }
}

// A two-rank row-wise SGD collection of dynamic tables "t0" (16 slots, dim 8) and "t1" (dim 12)
// on each rank thread, passed to fn(rank, collection).
void OnTwoRowWiseRanks(const std::function<void(int, shardrec_embedding_t*)>& fn) {
  DynScenario s = MakeDynScenario(2, SHARDREC_SHARDING_ROW_WISE, SHARDREC_OPTIMIZER_SGD, 16, 8);
  PlanPtr plan = MakeDynPlan(s);
  ASSERT_NE(plan, nullptr);
  const shardrec_optimizer_config_t opt = ToCOptimizer(s.base.optimizer);
  SpawnRanks(2, [&](int r) {
    shardrec_embedding_options_t o;
    shardrec_embedding_options_init(&o, SHARDREC_EMBEDDING_OPTIONS_VERSION);
    shardrec_embedding_t* c = nullptr;
    ASSERT_EQ(shardrec_embedding_create(&c, plan.get(), GroupComm(2, r), &opt, &o), SHARDREC_OK)
        << shardrec_last_error();
    CollPtr coll(c);
    fn(r, c);
  });
}

// A rank that did not mark makes every rank's delta fail (no rank waits in the exchange).
TEST(DynamicDelta, MissingMarkOnOneRankFailsEveryRank) {
  OnTwoRowWiseRanks([&](int r, shardrec_embedding_t* c) {
    if (r == 0) {
      ASSERT_EQ(shardrec_embedding_dynamic_mark(c, "t0"), SHARDREC_OK);
    }
    size_t n = 0, nt = 0;
    EXPECT_EQ(shardrec_embedding_dynamic_delta(c, "t0", nullptr, nullptr, 0, nullptr, 0, &n, &nt),
              SHARDREC_EUSAGE)
        << "rank " << r;
    ASSERT_EQ(shardrec_embedding_dynamic_mark(c, "t0"), SHARDREC_OK);
    EXPECT_EQ(shardrec_embedding_dynamic_delta(c, "t0", nullptr, nullptr, 0, nullptr, 0, &n, &nt),
              SHARDREC_OK)
        << "rank " << r << ": " << shardrec_last_error();
    EXPECT_EQ(n + nt, 0u);
  });
}

// A rank refusing its own arguments to the delta (an unknown table, a NULL out-parameter, NULL
// buffers with a capacity) failed alone while the others waited in the gather until their
// timeout. The arguments are agreed first now: every rank fails at once, the others naming it,
// and the next delta works.
TEST(DynamicDelta, ARankRefusingItsArgumentsFailsEveryRankAtOnce) {
  OnTwoRowWiseRanks([&](int r, shardrec_embedding_t* c) {
    ASSERT_EQ(shardrec_embedding_dynamic_mark(c, "t0"), SHARDREC_OK);
    const bool refuses = r == 1;
    size_t n = 0, nt = 0;
    uint32_t flags = 0;
    int64_t ids[4];
    const auto t0 = std::chrono::steady_clock::now();
    auto expect_refused = [&](shardrec_status_t st, const char* own) {
      // The refusing rank gets its own code (ENOTFOUND for an unknown table), the others EINVAL.
      if (refuses) {
        EXPECT_NE(st, SHARDREC_OK) << "rank " << r;
      } else {
        EXPECT_EQ(st, SHARDREC_EINVAL) << "rank " << r;
      }
      const std::string msg = shardrec_last_error();
      EXPECT_NE(msg.find(refuses ? own : "rank 1 refused its arguments"), std::string::npos)
          << "rank " << r << ": " << msg;
    };
    expect_refused(shardrec_embedding_dynamic_delta(c, refuses ? "nope" : "t0", nullptr, nullptr, 0,
                                                    nullptr, 0, &n, &nt),
                   "nope");
    expect_refused(shardrec_embedding_dynamic_delta(c, "t0", nullptr, nullptr, 0, nullptr, 0,
                                                    refuses ? nullptr : &n, &nt),
                   "num_rows");
    expect_refused(shardrec_embedding_dynamic_delta(c, "t0", refuses ? nullptr : ids, nullptr,
                                                    refuses ? 4 : 0, nullptr, 0, &n, &nt),
                   "ids");
    expect_refused(shardrec_embedding_dynamic_delta_ext(c, "t0", nullptr, nullptr, 0, nullptr, 0,
                                                        &n, &nt, refuses ? nullptr : &flags),
                   "flags");
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 10.0)
        << "rank " << r << " waited for the refusing rank";
    EXPECT_EQ(shardrec_embedding_dynamic_delta_ext(c, "t0", nullptr, nullptr, 0, nullptr, 0, &n,
                                                   &nt, &flags),
              SHARDREC_OK)
        << "rank " << r << ": " << shardrec_last_error();
    EXPECT_EQ(n + nt, 0u);
  });
}

// Ranks naming different dynamic tables (each valid on its own rank) gathered one table's rows
// into the other's delta, or, with rows of different widths, overran the delta's buffer and
// ended the process. Every rank now gets EINVAL from the agreement before the gather, and the
// next delta, naming the same table, works.
TEST(DynamicDelta, RanksNamingDifferentTablesFailEveryRank) {
  OnTwoRowWiseRanks([&](int r, shardrec_embedding_t* c) {
    for (const char* t : {"t0", "t1"})
      ASSERT_EQ(shardrec_embedding_dynamic_mark(c, t), SHARDREC_OK);
    size_t n = 0, nt = 0;
    EXPECT_EQ(shardrec_embedding_dynamic_delta(c, r == 0 ? "t0" : "t1", nullptr, nullptr, 0,
                                               nullptr, 0, &n, &nt),
              SHARDREC_EINVAL)
        << "rank " << r;
    const std::string msg = shardrec_last_error();
    EXPECT_NE(msg.find("named different tables"), std::string::npos) << "rank " << r << ": " << msg;
    EXPECT_EQ(shardrec_embedding_dynamic_delta(c, "t1", nullptr, nullptr, 0, nullptr, 0, &n, &nt),
              SHARDREC_OK)
        << "rank " << r << ": " << shardrec_last_error();
  });
}

}  // namespace
}  // namespace shardrec::testing
