// Checkpoints, table exports and deltas of tiered dynamic tables (docs/disk-tier.md, "Tiered
// dynamic tables") through the C API: a run trains a stream with caches small enough to evict
// every step, marks its tables, saves a checkpoint, exports each table with its optimizer state
// and takes each table's delta; the checkpoint loads into a tiered or an in-memory collection of
// another world size, which exports again and trains on. Every combination (saved tiered or in
// memory, loaded tiered or in memory; worlds 1 -> 1, 1 -> 2, 2 -> 1) gives the same export
// files byte for byte, the same deltas, and the same outputs after the load, bit for bit.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <tuple>
#include <vector>

#include "shardrec/checkpoint.h"
#include "shardrec/tier.h"
#include "tests/capi/dynamic/stream.h"
#include "tests/capi/dynamic/test_util.h"
#include "tests/capi/tiered/tiered_test_util.h"
#include "tests/support/spawn_ranks.h"

namespace shardrec::testing {
namespace {

constexpr int32_t kSteps = 9;
constexpr int32_t kSaveAt = 6;

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

struct Result {
  std::vector<std::string> exports;             // per table, the export's bytes
  std::vector<std::vector<int64_t>> delta_ids;  // per table (saving runs), rank 0's delta
  std::vector<std::vector<float>> delta_rows;   //   and its rows
  std::vector<std::vector<float>> out;          // per trained step, the global output
};

// One run at `world`: tiered (caches of `slots` per shard) or in memory; loads `load` first
// (when not empty) and trains [kSaveAt, kSteps), else trains [0, kSaveAt) with marks, takes
// the deltas and saves to `save`. Either way it exports each table with its state.
Result RunSide(DynScenario s, int32_t world, int32_t sharding, bool tiered, const std::string& load,
               const std::string& save, const std::string& tag) {
  s.base.world = world;
  s.base.ranks_per_node = world;
  s.base.sharding = {sharding, sharding};
  // Loads get twice the capacity: a full table's ids need not split evenly into new row blocks.
  if (!load.empty())
    for (RefTable& t : s.base.tables) t.rows *= 2;
  s.tiers.clear();
  if (tiered)
    for (size_t t = 0; t < 2; ++t)
      s.tiers.push_back({s.base.tables[t].name, FreshDir(tag + "_" + s.base.tables[t].name),
                         CacheBytesFor(s.base, t, t == 0 ? 22 : 40)});
  const int64_t dim = DynOutputDim(s);
  const Stream st = MakeStream(s, dim, kSteps);
  PlanPtr plan = MakeDynPlan(s);
  Result res;
  if (plan == nullptr) return res;
  const int32_t from = load.empty() ? 0 : kSaveAt, to = load.empty() ? kSaveAt : kSteps;
  res.out.assign(static_cast<size_t>(to - from),
                 std::vector<float>(static_cast<size_t>(kGlobalBatch * dim)));
  const std::string exports = FreshDir(tag + "_exports");
  std::filesystem::create_directories(exports);
  res.delta_ids.resize(2);
  res.delta_rows.resize(2);
  SpawnRanks(world, [&](int r) {
    CollPtr coll;
    MakeStreamCollection(s, plan.get(), world, r, &coll);
    shardrec_embedding_t* c = coll.get();
    if (c == nullptr) return;
    if (!load.empty()) {
      ASSERT_EQ(shardrec_checkpoint_load(c, load.c_str(), nullptr), SHARDREC_OK)
          << "rank " << r << ": " << shardrec_last_error();
    } else {
      for (const char* table : {"t0", "t1"})
        ASSERT_EQ(shardrec_embedding_dynamic_mark(c, table), SHARDREC_OK) << shardrec_last_error();
    }
    for (int32_t step = from; step < to; ++step) {
      ForwardSlice(c, st.batches[step], world, r, dim,
                   res.out[static_cast<size_t>(step - from)].data());
      BackwardSlice(c, st.grads[step], world, r, dim, static_cast<float>(world));
    }
    if (load.empty()) {
      for (int t = 0; t < 2; ++t) {
        const char* table = t == 0 ? "t0" : "t1";
        const size_t cols = static_cast<size_t>(s.base.tables[t].dim);
        std::vector<int64_t> ids(200), tombs(400);
        std::vector<float> rows(200 * cols);
        size_t nr = 0, nt = 0;
        ASSERT_EQ(shardrec_embedding_dynamic_delta(c, table, ids.data(), rows.data(), 200,
                                                   tombs.data(), tombs.size(), &nr, &nt),
                  SHARDREC_OK)
            << shardrec_last_error();
        ASSERT_GT(nr, 0u);
        if (r == 0) {
          res.delta_ids[t].assign(ids.begin(), ids.begin() + static_cast<int64_t>(nr));
          res.delta_ids[t].insert(res.delta_ids[t].end(), tombs.begin(),
                                  tombs.begin() + static_cast<int64_t>(nt));
          res.delta_rows[t].assign(rows.begin(), rows.begin() + static_cast<int64_t>(nr * cols));
        }
      }
      ASSERT_EQ(shardrec_checkpoint_save(c, save.c_str(), nullptr), SHARDREC_OK)
          << "rank " << r << ": " << shardrec_last_error();
    }
    if (tiered && load.empty()) {
      // The saving run's caches did lose rows: more misses than slots.
      for (const char* table : {"t0", "t1"}) {
        shardrec_tier_stats_t ts;
        shardrec_tier_stats_init(&ts, SHARDREC_TIER_STATS_VERSION);
        // A rank that holds no shard of the table has no stats of it.
        if (shardrec_embedding_tier_stats(c, table, &ts) != SHARDREC_OK) continue;
        EXPECT_GT(ts.misses, ts.cache_slots) << "rank " << r << " table " << table;
      }
    }
    for (const char* table : {"t0", "t1"}) {
      const std::string path = exports + "/" + table + ".safetensors";
      ASSERT_EQ(shardrec_checkpoint_export_table(c, table, path.c_str(), 1), SHARDREC_OK)
          << "rank " << r << ": " << shardrec_last_error();
    }
  });
  for (const char* table : {"t0", "t1"})
    res.exports.push_back(ReadBytes(exports + "/" + table + ".safetensors"));
  return res;
}

TEST(TieredDynamicCheckpoint, SavesAndLoadsLikeTheTableInMemoryAcrossWorlds) {
  struct Case {
    int32_t save_world, load_world, sharding, optimizer;
  };
  for (const Case& k :
       {Case{1, 1, SHARDREC_SHARDING_TABLE_WISE, 3}, Case{1, 2, SHARDREC_SHARDING_ROW_WISE, 2},
        Case{2, 1, SHARDREC_SHARDING_COLUMN_WISE, 1}}) {
    SCOPED_TRACE("worlds " + std::to_string(k.save_world) + " -> " + std::to_string(k.load_world) +
                 ", sharding " + std::to_string(k.sharding) + ", optimizer " +
                 std::to_string(k.optimizer));
    DynScenario s = MakeDynScenario(1, k.sharding, k.optimizer, 80, 200);
    for (auto& d : s.dynamic) d.eviction = SHARDREC_EVICTION_LFU;
    if (k.optimizer == 2)
      for (RefTable& t : s.base.tables) t.dtype = SHARDREC_DTYPE_FLOAT16;
    const std::string mem_ckpt = FreshDir("ck_mem"), tier_ckpt = FreshDir("ck_tier");
    const Result saved_mem = RunSide(s, k.save_world, k.sharding, false, "", mem_ckpt, "save_mem");
    const Result saved_tier =
        RunSide(s, k.save_world, k.sharding, true, "", tier_ckpt, "save_tier");
    ASSERT_FALSE(::testing::Test::HasFailure());
    for (size_t t = 0; t < 2; ++t) {
      EXPECT_FALSE(saved_mem.exports[t].empty());
      EXPECT_TRUE(saved_tier.exports[t] == saved_mem.exports[t]) << "export of table " << t;
      EXPECT_EQ(saved_tier.delta_ids[t], saved_mem.delta_ids[t]) << "delta ids of table " << t;
      EXPECT_EQ(FirstBitDifference(saved_tier.delta_rows[t], saved_mem.delta_rows[t]), "")
          << "delta rows of table " << t;
    }
    for (size_t i = 0; i < saved_mem.out.size(); ++i)
      EXPECT_EQ(FirstBitDifference(saved_tier.out[i], saved_mem.out[i]), "") << "step " << i;
    const Result want = RunSide(s, k.load_world, k.sharding, false, mem_ckpt, "", "load_mm");
    for (const auto& [ckpt, tiered, tag] :
         {std::tuple{mem_ckpt, true, "load_mt"}, std::tuple{tier_ckpt, false, "load_tm"},
          std::tuple{tier_ckpt, true, "load_tt"}}) {
      const Result got = RunSide(s, k.load_world, k.sharding, tiered, ckpt, "", tag);
      ASSERT_FALSE(::testing::Test::HasFailure()) << tag;
      for (size_t t = 0; t < 2; ++t)
        EXPECT_TRUE(got.exports[t] == want.exports[t]) << tag << ": export of table " << t;
      for (size_t i = 0; i < want.out.size(); ++i)
        EXPECT_EQ(FirstBitDifference(got.out[i], want.out[i]), "") << tag << ": step " << i;
    }
  }
}

}  // namespace
}  // namespace shardrec::testing
