// Tiered dynamic tables through the C API (docs/disk-tier.md, "Tiered dynamic tables"): a dynamic
// table whose rows and optimizer state live on disk under a cache smaller than a forward's
// worth of rows twice over, so rows leave the cache every step while the table admits, inserts
// and evicts ids, against the same dynamic table in memory, bit for bit: every optimizer and
// eviction policy, 16-bit storage, table-, row- and column-wise sharding at worlds 1 and 2,
// plain and pipelined forwards with evaluation forwards between them, caller's scores; and a
// training batch whose ids the cache cannot hold refused on every rank with nothing changed.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "shardrec/tier.h"
#include "tests/capi/dynamic/test_util.h"
#include "tests/capi/tiered/tiered_test_util.h"
#include "tests/support/spawn_ranks.h"

namespace shardrec::testing {
namespace {

// Both tables tiered with a cache of `slots` slots per shard.
void Tier(DynScenario* s, const std::string& name, int64_t slots) {
  s->tiers.clear();
  for (size_t t = 0; t < s->base.tables.size(); ++t)
    s->tiers.push_back({s->base.tables[t].name, FreshDir(name + "_" + s->base.tables[t].name),
                        CacheBytesFor(s->base, t, slots)});
}

// A scenario of capacity 80 over 400 ids (so the tables evict), bags of at most 2 ids, so a
// forward's distinct ids per shard stay below 32 (at world 2 a table-wise shard gets both ranks').
DynScenario Evicting(int32_t world, int32_t sharding, int32_t optimizer) {
  DynScenario s = MakeDynScenario(world, sharding, optimizer, 80, 400);
  s.base.max_bag = 2;
  s.base.steps = 12;
  return s;
}

// Runs `s` in memory and tiered (cache `slots` per shard) and compares everything the runs
// return bit for bit: outputs, evaluation outputs and the dynamic tables' counts.
void Compare(DynScenario s, int64_t slots, const std::string& what) {
  SCOPED_TRACE(what);
  const auto batches = MakeDynBatches(s);
  const auto grads = MakeGrads(s.base, batches, DynOutputDim(s));
  s.tiers.clear();
  const DynRun memory = RunDynamic(s, batches, grads);
  Tier(&s, "dyn", slots);
  const DynRun tiered = RunDynamic(s, batches, grads);
  if (::testing::Test::HasFailure()) return;
  for (size_t step = 0; step < memory.out.size(); ++step)
    for (size_t r = 0; r < memory.out[step].size(); ++r)
      EXPECT_EQ(FirstBitDifference(tiered.out[step][r], memory.out[step][r]), "")
          << "forward " << step << " rank " << r;
  for (size_t step = 0; step < memory.eval_out.size(); ++step)
    for (size_t r = 0; r < memory.eval_out[step].size(); ++r)
      EXPECT_EQ(FirstBitDifference(tiered.eval_out[step][r], memory.eval_out[step][r]), "")
          << "evaluation forward " << step << " rank " << r;
  for (size_t r = 0; r < memory.stats.size(); ++r)
    for (size_t t = 0; t < memory.stats[r].size(); ++t) {
      const auto& a = memory.stats[r][t];
      const auto& b = tiered.stats[r][t];
      EXPECT_EQ(a.size, b.size) << "rank " << r << " table " << t;
      EXPECT_EQ(a.capacity, b.capacity);
      EXPECT_EQ(a.total_inserted, b.total_inserted);
      EXPECT_EQ(a.total_evicted, b.total_evicted);
      EXPECT_EQ(a.total_rejected_admission, b.total_rejected_admission);
      EXPECT_EQ(a.total_rejected_full, b.total_rejected_full);
    }
}

// Tier stats of a tiered run of `s` (every rank's, summed per table) after its steps.
std::vector<shardrec_tier_stats_t> TierStats(DynScenario s, int64_t slots) {
  Tier(&s, "stats", slots);
  const auto batches = MakeDynBatches(s);
  const auto grads = MakeGrads(s.base, batches, DynOutputDim(s));
  PlanPtr plan = MakeDynPlan(s);
  std::vector<shardrec_tier_stats_t> out(s.base.tables.size());
  std::vector<std::vector<shardrec_tier_stats_t>> per(
      static_cast<size_t>(s.base.world), std::vector<shardrec_tier_stats_t>(out.size()));
  SpawnRanks(s.base.world, [&](int r) {
    CollPtr c = CreateDynCollection(s, plan.get(), s.base.world, r);
    if (c == nullptr) return;
    const int64_t dim = DynOutputDim(s);
    for (int32_t step = 0; step < s.base.steps; ++step) {
      KjtHolder kjt(batches[step][r], s.base.num_features, s.base.int32_ids);
      std::vector<float> o(static_cast<size_t>(batches[step][r].batch_size * dim));
      ASSERT_EQ(shardrec_embedding_forward(c.get(), kjt.view(), o.data(), o.size(), nullptr),
                SHARDREC_OK)
          << shardrec_last_error();
      ASSERT_EQ(shardrec_embedding_backward(c.get(), grads[step][r].data(), grads[step][r].size(),
                                            nullptr),
                SHARDREC_OK)
          << shardrec_last_error();
    }
    for (size_t t = 0; t < out.size(); ++t) {
      shardrec_tier_stats_init(&per[r][t], SHARDREC_TIER_STATS_VERSION);
      EXPECT_EQ(shardrec_embedding_tier_stats(c.get(), s.base.tables[t].name.c_str(), &per[r][t]),
                SHARDREC_OK)
          << shardrec_last_error();
    }
  });
  for (size_t t = 0; t < out.size(); ++t)
    for (const auto& pr : per) {
      out[t].cache_slots += pr[t].cache_slots;
      out[t].misses += pr[t].misses;
      out[t].write_backs += pr[t].write_backs;
    }
  return out;
}

TEST(TieredDynamic, EveryOptimizerAndPolicyWorld1) {
  for (int32_t policy : {SHARDREC_EVICTION_NONE, SHARDREC_EVICTION_LRU, SHARDREC_EVICTION_LFU,
                         SHARDREC_EVICTION_TTL})
    for (int32_t sharding : {SHARDREC_SHARDING_TABLE_WISE, SHARDREC_SHARDING_COLUMN_WISE})
      for (int32_t opt = 0; opt <= 5; ++opt) {
        const int32_t dtype = (opt + policy) % 3;  // fp32, fp16 and bf16 in turn
        DynScenario s = Evicting(1, sharding, opt);
        for (RefTable& t : s.base.tables) t.dtype = dtype;
        for (auto& d : s.dynamic) {
          d.eviction = policy;
          d.ttl_steps = 1;
          d.admission_threshold = policy == SHARDREC_EVICTION_LFU ? 2 : 0;
        }
        Compare(s, 20,
                "policy " + std::to_string(policy) + " sharding " + std::to_string(sharding) +
                    " optimizer " + std::to_string(opt) + " dtype " + std::to_string(dtype));
      }
}

TEST(TieredDynamic, World2PlainPipelinedAndEvaluation) {
  for (int32_t sharding :
       {SHARDREC_SHARDING_TABLE_WISE, SHARDREC_SHARDING_ROW_WISE, SHARDREC_SHARDING_COLUMN_WISE})
    for (int32_t opt : {1, 2, 3}) {
      for (int mode = 0; mode < 2; ++mode) {
        DynScenario s = Evicting(2, sharding, opt);
        s.pipelined = mode == 1;
        s.eval = mode == 1;
        s.base.weighted = mode == 0;
        for (auto& d : s.dynamic)
          d.eviction = opt == 2 ? SHARDREC_EVICTION_LFU : SHARDREC_EVICTION_LRU;
        Compare(s, 34,
                "sharding " + std::to_string(sharding) + " optimizer " + std::to_string(opt) +
                    (mode == 1 ? " pipelined with evaluation" : " plain weighted"));
      }
    }
}

double ScoreOf(int64_t id, int32_t step) {
  return static_cast<double>((static_cast<uint64_t>(id) * 2654435761u + step * 97u) % 1000);
}

TEST(TieredDynamic, CallerScoresAndStochasticRounding) {
  for (int32_t world : {1, 2}) {
    DynScenario s = Evicting(world, SHARDREC_SHARDING_ROW_WISE, 3);
    for (auto& d : s.dynamic) d.eviction = SHARDREC_EVICTION_SCORE;
    s.score = ScoreOf;
    Compare(s, 34, "SCORE at world " + std::to_string(world));
  }
  // Stochastic rounding keys its bits by the id a row holds, whatever cache slot it sits in.
  DynScenario s = Evicting(2, SHARDREC_SHARDING_TABLE_WISE, 1);
  for (RefTable& t : s.base.tables) t.dtype = SHARDREC_DTYPE_BFLOAT16;
  s.base.optimizer.stochastic_rounding = true;
  for (auto& d : s.dynamic) d.eviction = SHARDREC_EVICTION_LRU;
  Compare(s, 34, "stochastic rounding bf16");
}

// The scenarios above do evict from the caches and the tables.
TEST(TieredDynamic, CachesAndTablesEvict) {
  DynScenario s = Evicting(2, SHARDREC_SHARDING_ROW_WISE, 1);
  for (auto& d : s.dynamic) d.eviction = SHARDREC_EVICTION_LRU;
  const std::vector<shardrec_tier_stats_t> st = TierStats(s, 34);
  for (size_t t = 0; t < st.size(); ++t) {
    EXPECT_GT(st[t].misses, st[t].cache_slots) << "table " << t;
    EXPECT_GT(st[t].write_backs, 0) << "table " << t;
  }
  const auto batches = MakeDynBatches(s);
  const auto grads = MakeGrads(s.base, batches, DynOutputDim(s));
  const DynRun memory = RunDynamic(s, batches, grads);
  int64_t evicted = 0;
  for (const auto& pr : memory.stats)
    for (const auto& x : pr) evicted += x.total_evicted;
  EXPECT_GT(evicted, 0);
}

// A training forward whose ids the cache of the rank holding the table cannot hold fails on every
// rank at once, naming the table and that rank, and changes no table: the same forward then
// succeeds on a collection whose caches hold it, with the results of a run that never met the
// failure.
TEST(TieredDynamic, BatchBeyondTheCacheIsRefusedOnEveryRankChangingNothing) {
  DynScenario s = Evicting(2, SHARDREC_SHARDING_TABLE_WISE, 1);
  for (auto& d : s.dynamic) d.eviction = SHARDREC_EVICTION_LRU;
  Tier(&s, "refuse", 34);
  const auto batches = MakeDynBatches(s);
  const auto grads = MakeGrads(s.base, batches, DynOutputDim(s));
  PlanPtr plan = MakeDynPlan(s);
  const int64_t dim = DynOutputDim(s);
  // A batch of 40 distinct ids for t0 from rank 0 (the cache of t0's holder holds 34 rows).
  RefBatch big;
  big.batch_size = 4;
  for (int32_t f = 0; f < s.base.num_features; ++f)
    for (int i = 0; i < 4; ++i) big.lengths.push_back(f == 0 ? 10 : 0);
  for (int i = 0; i < 40; ++i) big.ids.push_back(s.pools[0][static_cast<size_t>(i)]);
  std::vector<std::string> errors(2);
  std::vector<std::vector<shardrec_dynamic_table_stats_t>> before(2), after(2);
  std::vector<std::vector<std::vector<float>>> outs(2);
  std::vector<int> holds(2, 0);
  SpawnRanks(2, [&](int r) {
    CollPtr c = CreateDynCollection(s, plan.get(), 2, r);
    if (c == nullptr) return;
    shardrec_tier_stats_t ts;
    shardrec_tier_stats_init(&ts, SHARDREC_TIER_STATS_VERSION);
    holds[r] =
        shardrec_embedding_tier_stats(c.get(), "t0", &ts) == SHARDREC_OK && ts.cache_slots > 0;
    auto stats = [&](std::vector<shardrec_dynamic_table_stats_t>* v) {
      for (const RefTable& t : s.base.tables) {
        shardrec_dynamic_table_stats_t st;
        shardrec_dynamic_table_stats_init(&st, SHARDREC_DYNAMIC_TABLE_STATS_VERSION);
        ASSERT_EQ(shardrec_embedding_dynamic_stats(c.get(), t.name.c_str(), &st), SHARDREC_OK);
        v->push_back(st);
      }
    };
    for (int32_t step = 0; step < s.base.steps; ++step) {
      if (step == 3) {
        stats(&before[r]);
        const RefBatch& b = r == 0 ? big : batches[step][r];
        KjtHolder kjt(b, s.base.num_features, s.base.int32_ids);
        std::vector<float> o(static_cast<size_t>(b.batch_size * dim));
        EXPECT_EQ(shardrec_embedding_forward(c.get(), kjt.view(), o.data(), o.size(), nullptr),
                  SHARDREC_EINVAL);
        errors[r] = shardrec_last_error();
        stats(&after[r]);
      }
      KjtHolder kjt(batches[step][r], s.base.num_features, s.base.int32_ids);
      std::vector<float> o(static_cast<size_t>(batches[step][r].batch_size * dim));
      ASSERT_EQ(shardrec_embedding_forward(c.get(), kjt.view(), o.data(), o.size(), nullptr),
                SHARDREC_OK)
          << shardrec_last_error();
      ASSERT_EQ(shardrec_embedding_backward(c.get(), grads[step][r].data(), grads[step][r].size(),
                                            nullptr),
                SHARDREC_OK)
          << shardrec_last_error();
      outs[r].push_back(o);
    }
  });
  ASSERT_FALSE(::testing::Test::HasFailure());
  ASSERT_EQ(holds[0] + holds[1], 1) << "table-wise: one rank holds t0";
  const std::string holder = "rank " + std::to_string(holds[0] != 0 ? 0 : 1) + ": ";
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(errors[r].rfind(holder, 0), 0u) << errors[r];
    EXPECT_NE(errors[r].find("'t0'"), std::string::npos) << errors[r];
    for (size_t t = 0; t < before[r].size(); ++t) {
      EXPECT_EQ(before[r][t].size, after[r][t].size);
      EXPECT_EQ(before[r][t].total_inserted, after[r][t].total_inserted);
      EXPECT_EQ(before[r][t].total_rejected_admission, after[r][t].total_rejected_admission);
    }
  }
  s.tiers.clear();
  const DynRun memory = RunDynamic(s, batches, grads);
  for (int32_t step = 0; step < s.base.steps; ++step)
    for (int r = 0; r < 2; ++r)
      EXPECT_EQ(FirstBitDifference(outs[r][step], memory.out[step][r]), "")
          << "forward " << step << " rank " << r;
}

// A store that fails a read on one rank fails the forward on every rank at once, each naming the
// failing rank with its code (here kCorrupt: the test overwrites the store's written segment
// pages on the rank that holds the table), long before the communicator's timeout.
TEST(TieredVerdict, StoreReadFailureOnOneRankFailsEveryRank) {
  DynScenario s = MakeDynScenario(2, SHARDREC_SHARDING_TABLE_WISE, 1, 3000, 3000);
  s.fixed = true;
  s.base.tables[0].dim = 64;
  for (size_t i = 0; i < s.pools[0].size(); ++i) s.pools[0][i] = static_cast<int64_t>(i);
  for (size_t i = 0; i < s.pools[1].size(); ++i) s.pools[1][i] = static_cast<int64_t>(i);
  const std::string dir = FreshDir("verdict");
  s.tiers = {{"t0", dir, CacheBytesFor(s.base, 0, 80)}};
  PlanPtr plan = MakeDynPlan(s);
  ASSERT_NE(plan, nullptr);
  const int64_t dim = DynOutputDim(s);
  // Step k reads rows [64k, 64k + 64) of t0 on each rank (16 per sample), t1 nothing: every
  // trained row leaves the 80-slot cache a step later and is written back.
  auto batch = [&](int32_t step, int r) {
    RefBatch b;
    b.batch_size = 4;
    for (int32_t f = 0; f < 3; ++f)
      for (int i = 0; i < 4; ++i) b.lengths.push_back(f == 0 ? 16 : 0);
    for (int i = 0; i < 64; ++i) b.ids.push_back((step * 64 + i + r * 7) % 3000);
    return b;
  };
  constexpr int32_t kSteps = 40;
  std::vector<CollPtr> colls(2);
  std::vector<std::string> errors(2);
  std::vector<shardrec_status_t> codes(2, SHARDREC_OK);
  std::vector<double> seconds(2, 0);
  std::vector<int> holds(2, 0);
  SpawnRanks(2, [&](int r) {
    colls[r] = CreateDynCollection(s, plan.get(), 2, r);
    if (colls[r] == nullptr) return;
    shardrec_embedding_t* c = colls[r].get();
    std::vector<float> out(static_cast<size_t>(4 * dim)), grad(out.size(), 0.5f);
    for (int32_t step = 0; step < kSteps; ++step) {
      const RefBatch b = batch(step, r);
      KjtHolder kjt(b, 3, false);
      ASSERT_EQ(shardrec_embedding_forward(c, kjt.view(), out.data(), out.size(), nullptr),
                SHARDREC_OK)
          << shardrec_last_error();
      ASSERT_EQ(shardrec_embedding_backward(c, grad.data(), grad.size(), nullptr), SHARDREC_OK)
          << shardrec_last_error();
    }
    // A checkpoint drains the write-back queue into the stores.
    ASSERT_EQ(shardrec_checkpoint_save(c, (dir + "/ckpt").c_str(), nullptr), SHARDREC_OK)
        << shardrec_last_error();
    shardrec_tier_stats_t st;
    shardrec_tier_stats_init(&st, SHARDREC_TIER_STATS_VERSION);
    holds[r] = shardrec_embedding_tier_stats(c, "t0", &st) == SHARDREC_OK && st.cache_slots > 0;
  });
  ASSERT_FALSE(::testing::Test::HasFailure());
  ASSERT_EQ(holds[0] + holds[1], 1) << "table-wise: one rank holds t0";
  const int holder = holds[0] != 0 ? 0 : 1;
  // Every written page of the holder's segments (past each file's header page) overwritten.
  int corrupted = 0;
  for (const auto& e :
       std::filesystem::recursive_directory_iterator(dir + "/r" + std::to_string(holder))) {
    const std::string name = e.path().filename().string();
    if (name.rfind("seg-", 0) != 0) continue;
    const auto size = std::filesystem::file_size(e.path());
    if (size <= 4096) continue;
    std::fstream f(e.path(), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(4096);
    const std::string junk(static_cast<size_t>(size - 4096), '\x5a');
    f.write(junk.data(), static_cast<std::streamsize>(junk.size()));
    ++corrupted;
  }
  ASSERT_GT(corrupted, 0) << "no segment was written";
  SpawnRanks(2, [&](int r) {
    shardrec_embedding_t* c = colls[r].get();
    std::vector<float> out(static_cast<size_t>(4 * dim));
    const RefBatch b = batch(0, r);  // rows long written back
    KjtHolder kjt(b, 3, false);
    const auto t0 = std::chrono::steady_clock::now();
    codes[r] = shardrec_embedding_forward(c, kjt.view(), out.data(), out.size(), nullptr);
    errors[r] = shardrec_last_error();
    seconds[r] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(codes[r], SHARDREC_ECORRUPT) << "rank " << r << ": " << errors[r];
    EXPECT_NE(errors[r].find("rank " + std::to_string(holder) + ": "), std::string::npos)
        << errors[r];
    EXPECT_NE(errors[r].find("'t0'"), std::string::npos) << errors[r];
    EXPECT_LT(seconds[r], 5.0) << "rank " << r << " waited for a timeout";
  }
  colls.clear();
}

}  // namespace
}  // namespace shardrec::testing
