// Stochastic rounding of 16-bit dynamic tables (config.h, docs/dynamic-tables.md): a dynamic row's
// rounding bits are keyed by the id it holds, not by its slot, so the same global batches export
// bit-identical tables at every world and plan, also when evictions hand the slots of the ids
// that leave to new ones (the slot numbers then differ between plans).
#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "shardrec/checkpoint.h"
#include "tests/capi/dynamic/stream.h"
#include "tests/capi/dynamic/test_util.h"
#include "tests/support/spawn_ranks.h"
#include "tests/support/temp_dirs.h"

namespace shardrec::testing {
namespace {

struct Side {
  int32_t world;
  int32_t sharding;
};

std::string Bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

// An fp16 t0 and a bf16 t1 of `capacity` slots under LRU eviction.
DynScenario RoundingScenario(int32_t optimizer, int64_t capacity) {
  DynScenario s = MakeDynScenario(1, SHARDREC_SHARDING_TABLE_WISE, optimizer, capacity, 24);
  s.base.tables[0].dtype = SHARDREC_DTYPE_FLOAT16;
  s.base.tables[1].dtype = SHARDREC_DTYPE_BFLOAT16;
  for (auto& d : s.dynamic) d.eviction = SHARDREC_EVICTION_LRU;
  return s;
}

// Trains every step of `st` on a collection of `side` and exports both tables with their
// optimizer state as dir/tag_<table>.safetensors; returns each table's stats, summed over the
// ranks (dynamic.h: the table's totals).
std::vector<shardrec_dynamic_table_stats_t> TrainAndExport(DynScenario s, const Side& side,
                                                           const Stream& st, const std::string& dir,
                                                           const std::string& tag) {
  s.base.world = s.base.ranks_per_node = side.world;
  s.base.sharding = {side.sharding, side.sharding};
  const int64_t dim = DynOutputDim(s);
  std::vector<shardrec_dynamic_table_stats_t> stats(2, SHARDREC_DYNAMIC_TABLE_STATS_INIT);
  std::vector<std::vector<shardrec_dynamic_table_stats_t>> per_rank(static_cast<size_t>(side.world),
                                                                    stats);
  PlanPtr plan = MakeDynPlan(s);
  if (plan == nullptr) return stats;
  SpawnRanks(side.world, [&](int r) {
    CollPtr coll;
    MakeStreamCollection(s, plan.get(), side.world, r, &coll);
    shardrec_embedding_t* c = coll.get();
    if (c == nullptr) return;
    // The collection averages gradients over the ranks: world x the sample's gradient makes
    // every world train on the same sums.
    for (size_t step = 0; step < st.batches.size(); ++step) {
      ForwardSlice(c, st.batches[step], side.world, r, dim, nullptr);
      BackwardSlice(c, st.grads[step], side.world, r, dim, static_cast<float>(side.world));
    }
    for (int t = 0; t < 2; ++t) {
      const std::string name = "t" + std::to_string(t);
      const std::string path = dir + "/" + tag + "_" + name + ".safetensors";
      ASSERT_EQ(shardrec_checkpoint_export_table(c, name.c_str(), path.c_str(), 1), SHARDREC_OK)
          << shardrec_last_error();
      ASSERT_EQ(shardrec_embedding_dynamic_stats(c, name.c_str(), &per_rank[r][t]), SHARDREC_OK)
          << shardrec_last_error();
    }
  });
  for (const auto& rank : per_rank)
    for (int t = 0; t < 2; ++t) {
      stats[t].size += rank[t].size;
      stats[t].total_evicted += rank[t].total_evicted;
    }
  return stats;
}

// Trains `st` at world 1 table-wise and on every side, rounding to nearest even and then
// stochastically; each side's exports must be the world-1 bytes of the same rounding. The
// nearest-even runs check that the sides' fp32 updates agree on this stream and optimizer (fp32
// sums of gradients from several ranks need not, in general), so a stochastic run can differ
// only through its bits. Returns the world-1 stats of the stochastic run.
std::vector<shardrec_dynamic_table_stats_t> ExpectSameExports(DynScenario s,
                                                              const std::vector<Side>& sides,
                                                              const Stream& st,
                                                              const std::string& dir) {
  std::vector<shardrec_dynamic_table_stats_t> stochastic_stats;
  for (const bool stochastic : {false, true}) {
    s.base.optimizer.stochastic_rounding = stochastic;
    SCOPED_TRACE(stochastic ? "stochastic rounding" : "nearest even");
    const std::string w1 = stochastic ? "sr_w1" : "ne_w1";
    const auto want = TrainAndExport(s, {1, SHARDREC_SHARDING_TABLE_WISE}, st, dir, w1);
    if (stochastic) stochastic_stats = want;
    for (size_t i = 0; i < sides.size(); ++i) {
      const std::string tag = (stochastic ? "sr_side" : "ne_side") + std::to_string(i);
      SCOPED_TRACE("world " + std::to_string(sides[i].world) + " sharding " +
                   std::to_string(sides[i].sharding));
      const auto got = TrainAndExport(s, sides[i], st, dir, tag);
      for (int t = 0; t < 2; ++t) {
        const std::string name = "_t" + std::to_string(t) + ".safetensors";
        const std::string a = Bytes(dir + "/" + w1 + name);
        EXPECT_GT(a.size(), 64u);
        EXPECT_TRUE(Bytes(dir + "/" + tag + name) == a) << "t" << t << " exports differ";
        EXPECT_EQ(got[t].size, want[t].size) << "t" << t;
        EXPECT_EQ(got[t].total_evicted, want[t].total_evicted) << "t" << t;
      }
    }
  }
  return stochastic_stats;
}

// Every id fits: the ids take other slots on every plan (row blocks number their own).
TEST(DynamicRounding, StochasticRoundingIsPlanIndependent) {
  const std::vector<Side> sides = {{2, SHARDREC_SHARDING_ROW_WISE},
                                   {4, SHARDREC_SHARDING_ROW_WISE},
                                   {2, SHARDREC_SHARDING_COLUMN_WISE},
                                   {2, SHARDREC_SHARDING_DATA_PARALLEL}};
  const DynScenario s = RoundingScenario(SHARDREC_OPTIMIZER_SGD, 64);
  ExpectSameExports(s, sides, MakeStream(s, DynOutputDim(s), 4), FreshDir("rounding_fits"));
}

// The row block of `id` among `blocks` (docs/dynamic-tables.md: splitmix64(id) mod B).
int32_t BlockOf(int64_t id, int32_t blocks) {
  uint64_t x = static_cast<uint64_t>(id) + 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return static_cast<int32_t>((x ^ (x >> 31)) % static_cast<uint64_t>(blocks));
}

// 8 slots per table; every step's batch holds 8 distinct ids of each table, 4 in each of the two
// row blocks of a world-2 row-wise plan: 2 seen every step and 2 new ones, which take the slots of
// the previous step's 2 (the only rows that step did not see). So every plan makes the same
// decisions (one block of 8, or two of 4), but a new id takes another slot number on each.
Stream EvictingStream(int64_t dim, int32_t steps) {
  std::vector<int64_t> next = {0, 0};  // per block: the next candidate id to try
  auto take = [&](int32_t block) {
    for (int64_t id = next[block];; ++id) {
      if (BlockOf(id * 7919 - 5000, 2) != block) continue;
      next[block] = id + 1;
      return id * 7919 - 5000;
    }
  };
  std::vector<std::vector<int64_t>> kept(2);  // per table
  for (int t = 0; t < 2; ++t)
    for (int32_t b : {0, 0, 1, 1}) kept[t].push_back(take(b));
  Stream st;
  std::mt19937_64 gen(91);
  for (int32_t step = 0; step < steps; ++step) {
    std::vector<std::vector<int64_t>> ids = kept;
    for (int t = 0; t < 2; ++t)
      for (int32_t b : {0, 0, 1, 1}) ids[t].push_back(take(b));
    // f0 (t0): sample i holds ids i and i + 3; f1 and f2 (t1): ids i and i + 5 of t1's eight.
    RefBatch batch;
    batch.batch_size = kGlobalBatch;
    const int table_of[3] = {0, 1, 1};
    const int shift[3] = {3, 0, 5};
    for (int f = 0; f < 3; ++f)
      for (int64_t i = 0; i < kGlobalBatch; ++i) {
        const std::vector<int64_t>& pool = ids[table_of[f]];
        const bool two = f == 0;
        batch.lengths.push_back(two ? 2 : 1);
        batch.ids.push_back(pool[static_cast<size_t>((i + shift[f]) % 8)]);
        if (two) batch.ids.push_back(pool[static_cast<size_t>(i)]);
      }
    st.batches.push_back(std::move(batch));
    std::vector<float> g(static_cast<size_t>(kGlobalBatch * dim));
    for (float& x : g) x = static_cast<float>(static_cast<int64_t>(gen() % 2001) - 1000) / 1000.0f;
    st.grads.push_back(std::move(g));
  }
  return st;
}

TEST(DynamicRounding, StochasticRoundingFollowsTheIdAcrossReusedSlots) {
  const std::vector<Side> sides = {{2, SHARDREC_SHARDING_ROW_WISE},
                                   {2, SHARDREC_SHARDING_COLUMN_WISE},
                                   {2, SHARDREC_SHARDING_DATA_PARALLEL}};
  constexpr int32_t kSteps = 5;
  const DynScenario s = RoundingScenario(SHARDREC_OPTIMIZER_ADAGRAD, 8);
  const auto stats = ExpectSameExports(s, sides, EvictingStream(DynOutputDim(s), kSteps),
                                       FreshDir("rounding_evicts"));
  for (int t = 0; t < 2; ++t) {
    EXPECT_EQ(stats[t].size, 8) << "t" << t;
    EXPECT_EQ(stats[t].total_evicted, 4 * (kSteps - 1)) << "t" << t << ": slots were reused";
  }
}

}  // namespace
}  // namespace shardrec::testing
