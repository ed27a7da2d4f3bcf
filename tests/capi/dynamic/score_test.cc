// SCORE eviction through the C API (docs/dynamic-tables.md, "Scores"): equal to the reference at
// world 1 (table- and column-wise), identical across runs and thread counts, the scores kept by
// a checkpoint, and shardrec_embedding_dynamic_set_scores's refusals.
#include <gtest/gtest.h>

#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include "shardrec/checkpoint.h"
#include "tests/capi/dynamic/test_util.h"
#include "tests/support/spawn_ranks.h"
#include "tests/support/temp_dirs.h"

namespace shardrec::testing {
namespace {

// A score per (id, step) from few values, so ties (broken by id) happen.
double Score(int64_t id, int32_t step) {
  const uint64_t h =
      (static_cast<uint64_t>(id) ^ (static_cast<uint64_t>(step) << 32)) * 0x9E3779B97F4A7C15ull;
  return static_cast<double>(h >> 61) - 2.5;
}

DynScenario ScoreScenario(int32_t sharding) {
  DynScenario s = MakeDynScenario(1, sharding, 2, 10, 24);
  s.base.steps = 6;
  for (auto& d : s.dynamic) d.eviction = SHARDREC_EVICTION_SCORE;
  s.score = Score;
  return s;
}

TEST(DynamicScore, EqualsTheReferenceAtWorld1) {
  for (int32_t sharding : {SHARDREC_SHARDING_TABLE_WISE, SHARDREC_SHARDING_COLUMN_WISE}) {
    SCOPED_TRACE("sharding " + std::to_string(sharding));
    const DynScenario s = ScoreScenario(sharding);
    const auto batches = MakeDynBatches(s);
    const auto grads = MakeGrads(s.base, batches, DynOutputDim(s));
    const RefRun want = RunReference(s, batches, grads);
    const DynRun got = RunDynamic(s, batches, grads);
    ASSERT_EQ(got.out.size(), want.out.size());
    for (size_t step = 0; step < got.out.size(); ++step) {
      std::string first;
      EXPECT_EQ(CountMismatches(got.out[step][0], want.out[step][0], 1e-5f, 1e-6f, &first), 0u)
          << "forward " << step << ": " << first;
    }
    for (size_t t = 0; t < want.counts.size(); ++t) {
      EXPECT_EQ(got.stats[0][t].size, want.counts[t].size) << "table " << t;
      EXPECT_EQ(got.stats[0][t].total_inserted, want.counts[t].inserted) << "table " << t;
      EXPECT_EQ(got.stats[0][t].total_evicted, want.counts[t].evicted) << "table " << t;
      EXPECT_GT(want.counts[t].evicted, 0) << "table " << t << ": the scenario must evict";
    }
    // The scores decide: the reference with every score 0 (LRU-free: ties by id) differs.
    DynScenario unscored = s;
    unscored.score = nullptr;
    const RefRun other = RunReference(unscored, batches, grads);
    bool differs = false;
    for (size_t step = 0; step < other.out.size(); ++step)
      differs = differs || other.out[step][0] != want.out[step][0];
    EXPECT_TRUE(differs) << "the scores changed no eviction";
  }
}

// A data-parallel table holds the whole capacity on every rank and the ranks agree on its inserts,
// so with every rank setting the same scores it equals the reference at world 2 as well.
TEST(DynamicScore, DataParallelEqualsTheReferenceAtWorld2) {
  DynScenario s = ScoreScenario(SHARDREC_SHARDING_DATA_PARALLEL);
  s.base.world = s.base.ranks_per_node = 2;
  const auto batches = MakeDynBatches(s);
  const auto grads = MakeGrads(s.base, batches, DynOutputDim(s));
  const RefRun want = RunReference(s, batches, grads);
  const DynRun got = RunDynamic(s, batches, grads);
  ASSERT_EQ(got.out.size(), want.out.size());
  for (size_t step = 0; step < got.out.size(); ++step)
    for (size_t r = 0; r < 2; ++r) {
      std::string first;
      EXPECT_EQ(CountMismatches(got.out[step][r], want.out[step][r], 1e-5f, 1e-6f, &first), 0u)
          << "forward " << step << " rank " << r << ": " << first;
    }
  for (size_t t = 0; t < want.counts.size(); ++t) {
    // Counted once, on rank 0 (docs/dynamic-tables.md, "Data-parallel tables").
    EXPECT_EQ(got.stats[0][t].total_evicted, want.counts[t].evicted) << "table " << t;
    EXPECT_EQ(got.stats[1][t].total_evicted, 0) << "table " << t;
    EXPECT_EQ(got.stats[1][t].capacity, 0) << "table " << t;
    EXPECT_GT(got.stats[1][t].metadata_bytes, 0u) << "table " << t;
    EXPECT_GT(want.counts[t].evicted, 0) << "table " << t << ": the scenario must evict";
  }
}

// Rank r's score of an id: from few values (ties happen), and given only for some ids (NaN: not
// given), so the ranks' lists differ in both ids and values and overlap.
double RankScore(int64_t id, int32_t step, int32_t rank) {
  const uint64_t h = (static_cast<uint64_t>(id) ^ (static_cast<uint64_t>(step) << 32) ^
                      (static_cast<uint64_t>(rank + 1) << 48)) *
                     0x9E3779B97F4A7C15ull;
  if ((h >> 40) % 3 == 0) return std::numeric_limits<double>::quiet_NaN();
  return static_cast<double>(h >> 61) - 2.5;
}
// The same lists as if only rank 0 had set scores: the rule must matter.
double RankZeroScore(int64_t id, int32_t step, int32_t /*rank*/) { return RankScore(id, step, 0); }

// A data-parallel table's scores may be set on any ranks with any lists: each rank's entries
// wait for the next training forward, whose agreement applies every rank's on every copy in rank
// order (a later rank's wins). The copies stay identical (a lookup of every pool id answers alike
// on every rank, bit for bit), equal the reference applying that rule, and num_set counts the
// entries naming a row of the rank's copy.
TEST(DynamicScore, DataParallelScoresFromDifferentListsAgree) {
  for (int32_t world : {2, 3}) {
    SCOPED_TRACE("world " + std::to_string(world));
    // More slots and ids than ScoreScenario's: the larger global batch still leaves rows unseen,
    // so the scores choose among them.
    DynScenario s = MakeDynScenario(world, SHARDREC_SHARDING_DATA_PARALLEL, 2, 20, 48);
    s.base.steps = 6;
    s.base.ranks_per_node = world;
    for (auto& d : s.dynamic) d.eviction = SHARDREC_EVICTION_SCORE;
    s.rank_score = RankScore;
    s.probe = true;
    const auto batches = MakeDynBatches(s);
    const auto grads = MakeGrads(s.base, batches, DynOutputDim(s));
    const RefRun want = RunReference(s, batches, grads);
    const DynRun got = RunDynamic(s, batches, grads);
    ASSERT_EQ(got.out.size(), want.out.size());
    for (size_t step = 0; step < got.out.size(); ++step)
      for (size_t r = 0; r < static_cast<size_t>(world); ++r) {
        std::string first;
        EXPECT_EQ(CountMismatches(got.out[step][r], want.out[step][r], 1e-5f, 1e-6f, &first), 0u)
            << "forward " << step << " rank " << r << ": " << first;
      }
    for (size_t step = 0; step < want.scores_named.size(); ++step)
      for (size_t r = 0; r < static_cast<size_t>(world); ++r)
        EXPECT_EQ(got.scores_set[step][r], want.scores_named[step][r])
            << "step " << step << " rank " << r;
    ASSERT_FALSE(got.probe[0].empty());
    for (size_t r = 1; r < static_cast<size_t>(world); ++r)
      EXPECT_EQ(got.probe[r], got.probe[0]) << "rank " << r << "'s copy differs from rank 0's";
    for (size_t t = 0; t < want.counts.size(); ++t) {
      EXPECT_EQ(got.stats[0][t].total_evicted, want.counts[t].evicted) << "table " << t;
      EXPECT_GT(want.counts[t].evicted, 0) << "table " << t << ": the scenario must evict";
    }
    // Rank 0's lists alone decide other evictions: the later ranks' scores were applied.
    DynScenario rank0 = s;
    rank0.rank_score = RankZeroScore;
    const RefRun other = RunReference(rank0, batches, grads);
    bool differs = false;
    for (size_t step = 0; step < other.out.size(); ++step)
      for (size_t r = 0; r < static_cast<size_t>(world); ++r)
        differs = differs || other.out[step][r] != want.out[step][r];
    EXPECT_TRUE(differs) << "the later ranks' scores changed no eviction";
  }
}

TEST(DynamicScore, IdenticalAcrossRunsAndThreads) {
  DynScenario s = ScoreScenario(SHARDREC_SHARDING_TABLE_WISE);
  const auto batches = MakeDynBatches(s);
  const auto grads = MakeGrads(s.base, batches, DynOutputDim(s));
  const DynRun a = RunDynamic(s, batches, grads);
  const DynRun b = RunDynamic(s, batches, grads);
  s.base.num_threads = 3;
  const DynRun c = RunDynamic(s, batches, grads);
  for (size_t step = 0; step < a.out.size(); ++step) {
    EXPECT_EQ(a.out[step][0], b.out[step][0]) << "run 2, step " << step;
    EXPECT_EQ(a.out[step][0], c.out[step][0]) << "3 threads, step " << step;
  }
  for (size_t t = 0; t < a.stats[0].size(); ++t) {
    EXPECT_GT(a.stats[0][t].total_evicted, 0);
    EXPECT_EQ(a.stats[0][t].total_evicted, b.stats[0][t].total_evicted);
    EXPECT_EQ(a.stats[0][t].total_evicted, c.stats[0][t].total_evicted);
  }
}

// Trains steps [from, to) of s at world 1 on a fresh collection, loading `load` first and saving
// to `save` after step `save_after` when given; scores score(id, step) are set after each step
// while `scored(step)`. Returns each step's output.
std::vector<std::vector<float>> Train(const DynScenario& s,
                                      const std::vector<std::vector<RefBatch>>& batches,
                                      const std::vector<std::vector<std::vector<float>>>& grads,
                                      int32_t from, int32_t to, const std::string& load,
                                      const std::string& save, int32_t save_after,
                                      double (*score)(int64_t, int32_t)) {
  std::vector<std::vector<float>> outs;
  PlanPtr plan = MakeDynPlan(s);
  if (plan == nullptr) return outs;
  SpawnRanks(1, [&](int r) {
    CollPtr coll = CreateDynCollection(s, plan.get(), 1, r);
    ASSERT_NE(coll, nullptr);
    shardrec_embedding_t* c = coll.get();
    if (!load.empty()) {
      ASSERT_EQ(shardrec_checkpoint_load(c, load.c_str(), nullptr), SHARDREC_OK)
          << shardrec_last_error();
    }
    for (int32_t step = from; step < to; ++step) {
      KjtHolder kjt(batches[step][0], s.base.num_features, false);
      std::vector<float> out(static_cast<size_t>(batches[step][0].batch_size * DynOutputDim(s)));
      ASSERT_EQ(shardrec_embedding_forward(c, kjt.view(), out.data(), out.size(), nullptr),
                SHARDREC_OK)
          << shardrec_last_error();
      ASSERT_EQ(
          shardrec_embedding_backward(c, grads[step][0].data(), grads[step][0].size(), nullptr),
          SHARDREC_OK)
          << shardrec_last_error();
      outs.push_back(std::move(out));
      if (score != nullptr && step <= save_after) {
        for (size_t t = 0; t < s.pools.size(); ++t) {
          std::vector<double> scores;
          for (int64_t id : s.pools[t]) scores.push_back(score(id, step));
          ASSERT_EQ(shardrec_embedding_dynamic_set_scores(c, s.base.tables[t].name.c_str(),
                                                          s.pools[t].data(), scores.data(),
                                                          scores.size(), nullptr),
                    SHARDREC_OK);
        }
      }
      if (!save.empty() && step == save_after) {
        ASSERT_EQ(shardrec_checkpoint_save(c, save.c_str(), nullptr), SHARDREC_OK)
            << shardrec_last_error();
      }
    }
  });
  return outs;
}

double Negated(int64_t id, int32_t step) { return -Score(id, step); }

// Scores set before a save decide the evictions after a load as they would have without it.
TEST(DynamicScore, ScoresSurviveACheckpoint) {
  const DynScenario s = ScoreScenario(SHARDREC_SHARDING_TABLE_WISE);
  const auto batches = MakeDynBatches(s);
  const auto grads = MakeGrads(s.base, batches, DynOutputDim(s));
  const std::string dir = FreshDir("dyn_score_ckpt");
  constexpr int32_t kSaveAfter = 2;
  const int32_t steps = s.base.steps;
  // Scores are set after steps 0..kSaveAfter only, so what decides later is what was saved.
  const auto orig = Train(s, batches, grads, 0, steps, "", dir, kSaveAfter, Score);
  const auto loaded = Train(s, batches, grads, kSaveAfter + 1, steps, dir, "", -1, nullptr);
  ASSERT_EQ(orig.size(), static_cast<size_t>(steps));
  ASSERT_EQ(loaded.size(), static_cast<size_t>(steps - kSaveAfter - 1));
  for (int32_t step = kSaveAfter + 1; step < steps; ++step)
    EXPECT_EQ(loaded[static_cast<size_t>(step - kSaveAfter - 1)], orig[static_cast<size_t>(step)])
        << "step " << step;
  // Other scores give other results after the save point, so the comparison above saw them.
  const auto other = Train(s, batches, grads, 0, steps, "", "", kSaveAfter, Negated);
  bool differs = false;
  for (int32_t step = kSaveAfter + 1; step < steps; ++step)
    differs = differs || other[static_cast<size_t>(step)] != orig[static_cast<size_t>(step)];
  EXPECT_TRUE(differs);
  std::filesystem::remove_all(dir);
}

TEST(DynamicScore, SetScoresRefusals) {
  DynScenario s = ScoreScenario(SHARDREC_SHARDING_COLUMN_WISE);
  s.dynamic[1].eviction = SHARDREC_EVICTION_LRU;  // t1 does not evict by score
  const auto batches = MakeDynBatches(s);
  const auto grads = MakeGrads(s.base, batches, DynOutputDim(s));
  PlanPtr plan = MakeDynPlan(s);
  ASSERT_NE(plan, nullptr);
  const shardrec_optimizer_config_t opt = ToCOptimizer(s.base.optimizer);
  SpawnRanks(1, [&](int r) {
    shardrec_embedding_options_t o;
    shardrec_embedding_options_init(&o, SHARDREC_EMBEDDING_OPTIONS_VERSION);
    shardrec_embedding_t* c = nullptr;
    ASSERT_EQ(shardrec_embedding_create(&c, plan.get(), GroupComm(1, r), &opt, &o), SHARDREC_OK);
    CollPtr coll(c);
    KjtHolder kjt(batches[0][0], s.base.num_features, false);
    std::vector<float> out(static_cast<size_t>(batches[0][0].batch_size * DynOutputDim(s)));
    ASSERT_EQ(shardrec_embedding_forward(c, kjt.view(), out.data(), out.size(), nullptr),
              SHARDREC_OK);
    shardrec_dynamic_table_stats_t st;
    shardrec_dynamic_table_stats_init(&st, SHARDREC_DYNAMIC_TABLE_STATS_VERSION);
    ASSERT_EQ(shardrec_embedding_dynamic_stats(c, "t0", &st), SHARDREC_OK);
    // Every pool id, known or not (and one twice): only those with a row count.
    std::vector<int64_t> ids = s.pools[0];
    ids.push_back(ids[0]);
    std::vector<double> scores(ids.size(), 1.5);
    size_t set = 0;
    ASSERT_EQ(
        shardrec_embedding_dynamic_set_scores(c, "t0", ids.data(), scores.data(), ids.size(), &set),
        SHARDREC_OK)
        << shardrec_last_error();
    EXPECT_GE(set, static_cast<size_t>(st.size));
    EXPECT_LE(set, static_cast<size_t>(st.size) + 1);
    EXPECT_EQ(shardrec_embedding_dynamic_set_scores(c, "t0", nullptr, nullptr, 0, &set),
              SHARDREC_OK);
    EXPECT_EQ(set, 0u);
    EXPECT_EQ(shardrec_embedding_dynamic_set_scores(c, "t0", nullptr, scores.data(), 1, nullptr),
              SHARDREC_EINVAL);
    EXPECT_EQ(shardrec_embedding_dynamic_set_scores(c, "t0", ids.data(), nullptr, 1, nullptr),
              SHARDREC_EINVAL);
    EXPECT_EQ(
        shardrec_embedding_dynamic_set_scores(c, nullptr, ids.data(), scores.data(), 1, nullptr),
        SHARDREC_EINVAL);
    EXPECT_EQ(
        shardrec_embedding_dynamic_set_scores(c, "nope", ids.data(), scores.data(), 1, nullptr),
        SHARDREC_ENOTFOUND);
    EXPECT_EQ(shardrec_embedding_dynamic_set_scores(c, "t1", ids.data(), scores.data(), 1, nullptr),
              SHARDREC_EINVAL);
    EXPECT_NE(std::string(shardrec_last_error()).find("SCORE"), std::string::npos);
    scores[1] = std::numeric_limits<double>::quiet_NaN();
    set = 7;
    EXPECT_EQ(shardrec_embedding_dynamic_set_scores(c, "t0", ids.data(), scores.data(), 2, &set),
              SHARDREC_EINVAL);
    EXPECT_EQ(set, 7u) << "a refused call writes nothing";
    scores[1] = std::numeric_limits<double>::infinity();
    EXPECT_EQ(shardrec_embedding_dynamic_set_scores(c, "t0", ids.data(), scores.data(), 2, &set),
              SHARDREC_EINVAL);
  });
}

}  // namespace
}  // namespace shardrec::testing
