// Evaluation mode and SCORE eviction through the C API (docs/dynamic-tables.md, "Evaluation"
// and "Scores"): an evaluation forward reads known rows and zeros for unknown or not-admitted
// ids, changes no stat and no later result, and its backward is refused; ranks in different
// modes fail alike; SCORE eviction equals the reference at world 1, is identical across runs and
// thread counts, and its scores survive a checkpoint.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/capi/dynamic/test_util.h"
#include "tests/support/spawn_ranks.h"

namespace shardrec::testing {
namespace {

void ExpectOutputs(const std::vector<std::vector<std::vector<float>>>& got,
                   const std::vector<std::vector<std::vector<float>>>& want,
                   const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t step = 0; step < got.size(); ++step)
    for (size_t r = 0; r < got[step].size(); ++r) {
      std::string first;
      EXPECT_EQ(CountMismatches(got[step][r], want[step][r], 1e-5f, 1e-6f, &first), 0u)
          << what << ": rank " << r << " forward " << step << ": " << first;
    }
}

// Zero rows of an evaluation output: a bag whose ids are all unknown reads zeros, so some must.
size_t ZeroFloats(const std::vector<std::vector<std::vector<float>>>& outs) {
  size_t n = 0;
  for (const auto& step : outs)
    for (const auto& rank : step)
      for (float x : rank) n += x == 0.0f;
  return n;
}

// Before every training forward, an evaluation forward of the same batch equals the reference's
// lookup without insertion; the training run, evaluated in between, still equals the reference
// that never evaluated (so evaluation inserted, touched and admitted nothing). Worlds 1-2,
// table-, row- and column-wise; admission 2 and LRU eviction at capacity at world 1; pipelined.
TEST(DynamicEval, EvalForwardReadsWithoutInserting) {
  for (int32_t world : {1, 2})
    for (int32_t sharding : {SHARDREC_SHARDING_TABLE_WISE, SHARDREC_SHARDING_ROW_WISE,
                             SHARDREC_SHARDING_COLUMN_WISE, SHARDREC_SHARDING_DATA_PARALLEL})
      for (bool pipelined : {false, true}) {
        SCOPED_TRACE("world " + std::to_string(world) + " sharding " + std::to_string(sharding) +
                     (pipelined ? " pipelined" : ""));
        // World 1 fills the tables (capacity 10 of 24 ids) so a touch would change evictions.
        DynScenario s = MakeDynScenario(world, sharding, 2, world == 1 ? 10 : 96, 24);
        s.eval = true;
        s.pipelined = pipelined;
        s.base.steps = 5;
        for (auto& d : s.dynamic) {
          d.admission_threshold = 2;
          d.eviction = world == 1 ? SHARDREC_EVICTION_LRU : SHARDREC_EVICTION_NONE;
        }
        const auto batches = MakeDynBatches(s);
        const auto grads = MakeGrads(s.base, batches, DynOutputDim(s));
        const RefRun want = RunReference(s, batches, grads);
        const DynRun got = RunDynamic(s, batches, grads);
        ExpectOutputs(got.out, want.out, "training forwards");
        ExpectOutputs(got.eval_out, want.eval_out, "evaluation forwards");
        EXPECT_GT(ZeroFloats(got.eval_out), 0u);
        int64_t evicted = 0, size = 0;
        for (const auto& per_rank : got.stats)
          for (const auto& st : per_rank) {
            evicted += st.total_evicted;
            size += st.size;
          }
        EXPECT_GT(size, 0);
        if (world == 1) {
          EXPECT_GT(evicted, 0);
        }
      }
}

// One collection per rank of a plan; `body(rank, coll)`.
template <typename F>
void OnRanks(const DynScenario& s, const PlanPtr& plan, F body) {
  SpawnRanks(s.base.world, [&](int r) {
    CollPtr coll = CreateDynCollection(s, plan.get(), s.base.world, r);
    ASSERT_NE(coll, nullptr);
    body(r, coll.get());
  });
}

// Ranks in different modes: a collection with a dynamic table fails the forward on every rank
// (SHARDREC_EUSAGE, naming the mode) and changes nothing; the next forward in one mode works.
TEST(DynamicEval, MixedModesFailTheForwardOnEveryRank) {
  for (bool pipelined : {false, true}) {
    DynScenario s = MakeDynScenario(2, SHARDREC_SHARDING_ROW_WISE, 1, 96, 24);
    const auto batches = MakeDynBatches(s);
    const auto grads = MakeGrads(s.base, batches, DynOutputDim(s));
    PlanPtr plan = MakeDynPlan(s);
    ASSERT_NE(plan, nullptr);
    OnRanks(s, plan, [&](int r, shardrec_embedding_t* c) {
      KjtHolder kjt(batches[0][r], s.base.num_features, false);
      std::vector<float> out(static_cast<size_t>(batches[0][r].batch_size * DynOutputDim(s)));
      ASSERT_EQ(shardrec_embedding_set_training(c, r == 0 ? 0 : 1), SHARDREC_OK);
      if (pipelined) {
        ASSERT_EQ(shardrec_embedding_input_dist_start(c, kjt.view(), nullptr), SHARDREC_OK);
        ASSERT_EQ(shardrec_embedding_input_dist_wait(c, nullptr), SHARDREC_OK);
        EXPECT_EQ(shardrec_embedding_forward_distributed(c, out.data(), out.size(), nullptr),
                  SHARDREC_EUSAGE)
            << "rank " << r;
      } else {
        EXPECT_EQ(shardrec_embedding_forward(c, kjt.view(), out.data(), out.size(), nullptr),
                  SHARDREC_EUSAGE)
            << "rank " << r;
      }
      EXPECT_NE(std::string(shardrec_last_error()).find("training mode"), std::string::npos)
          << shardrec_last_error();
      EXPECT_EQ(shardrec_embedding_backward(c, grads[0][r].data(), grads[0][r].size(), nullptr),
                SHARDREC_EUSAGE)
          << "no forward went through";
      for (const char* t : {"t0", "t1"}) {
        shardrec_dynamic_table_stats_t st;
        shardrec_dynamic_table_stats_init(&st, SHARDREC_DYNAMIC_TABLE_STATS_VERSION);
        ASSERT_EQ(shardrec_embedding_dynamic_stats(c, t, &st), SHARDREC_OK);
        EXPECT_EQ(st.size, 0);
        EXPECT_EQ(st.total_inserted, 0);
      }
      ASSERT_EQ(shardrec_embedding_set_training(c, 1), SHARDREC_OK);
      ASSERT_EQ(shardrec_embedding_forward(c, kjt.view(), out.data(), out.size(), nullptr),
                SHARDREC_OK)
          << shardrec_last_error();
      ASSERT_EQ(shardrec_embedding_backward(c, grads[0][r].data(), grads[0][r].size(), nullptr),
                SHARDREC_OK)
          << shardrec_last_error();
    });
  }
}

// Fixed tables: an evaluation forward reads what a training forward reads and its backward is
// refused on every rank; with the ranks in different modes the forward works (it changes nothing
// either way) and the backward fails on every rank, the evaluating one with SHARDREC_EUSAGE.
TEST(DynamicEval, FixedTablesRefuseTheBackwardOfAnEvaluation) {
  DynScenario s = MakeDynScenario(2, SHARDREC_SHARDING_ROW_WISE, 1, 96, 24);
  s.fixed = true;
  for (auto& pool : s.pools)
    for (size_t i = 0; i < pool.size(); ++i) pool[i] = static_cast<int64_t>(i * 3);
  const auto batches = MakeDynBatches(s);
  const auto grads = MakeGrads(s.base, batches, DynOutputDim(s));
  PlanPtr plan = MakeDynPlan(s);
  ASSERT_NE(plan, nullptr);
  OnRanks(s, plan, [&](int r, shardrec_embedding_t* c) {
    KjtHolder kjt(batches[0][r], s.base.num_features, false);
    const size_t n = static_cast<size_t>(batches[0][r].batch_size * DynOutputDim(s));
    std::vector<float> trained(n), evaluated(n);
    ASSERT_EQ(shardrec_embedding_forward(c, kjt.view(), trained.data(), n, nullptr), SHARDREC_OK);
    ASSERT_EQ(shardrec_embedding_set_training(c, 0), SHARDREC_OK);
    int32_t mode = -1;
    ASSERT_EQ(shardrec_embedding_is_training(c, &mode), SHARDREC_OK);
    EXPECT_EQ(mode, 0);
    ASSERT_EQ(shardrec_embedding_forward(c, kjt.view(), evaluated.data(), n, nullptr), SHARDREC_OK);
    EXPECT_EQ(evaluated, trained);
    EXPECT_EQ(shardrec_embedding_backward(c, grads[0][r].data(), grads[0][r].size(), nullptr),
              SHARDREC_EUSAGE);
    EXPECT_NE(std::string(shardrec_last_error()).find("evaluation forward"), std::string::npos)
        << shardrec_last_error();
    int64_t steps = -1;
    ASSERT_EQ(shardrec_embedding_num_steps(c, &steps), SHARDREC_OK);
    EXPECT_EQ(steps, 0);
    // Mixed: rank 0 evaluates, rank 1 trains.
    ASSERT_EQ(shardrec_embedding_set_training(c, r == 0 ? 0 : 1), SHARDREC_OK);
    ASSERT_EQ(shardrec_embedding_forward(c, kjt.view(), evaluated.data(), n, nullptr), SHARDREC_OK);
    EXPECT_EQ(evaluated, trained);
    EXPECT_EQ(shardrec_embedding_backward(c, grads[0][r].data(), grads[0][r].size(), nullptr),
              r == 0 ? SHARDREC_EUSAGE : SHARDREC_EINVAL)
        << "rank " << r << ": " << shardrec_last_error();
    ASSERT_EQ(shardrec_embedding_num_steps(c, &steps), SHARDREC_OK);
    EXPECT_EQ(steps, 0);
    // Training again trains.
    ASSERT_EQ(shardrec_embedding_set_training(c, 1), SHARDREC_OK);
    ASSERT_EQ(shardrec_embedding_forward(c, kjt.view(), trained.data(), n, nullptr), SHARDREC_OK);
    ASSERT_EQ(shardrec_embedding_backward(c, grads[0][r].data(), grads[0][r].size(), nullptr),
              SHARDREC_OK)
        << shardrec_last_error();
    // Arguments.
    EXPECT_EQ(shardrec_embedding_set_training(c, 2), SHARDREC_EINVAL);
    EXPECT_EQ(shardrec_embedding_set_training(nullptr, 0), SHARDREC_EINVAL);
    EXPECT_EQ(shardrec_embedding_is_training(c, nullptr), SHARDREC_EINVAL);
    ASSERT_EQ(shardrec_embedding_is_training(c, &mode), SHARDREC_OK);
    EXPECT_EQ(mode, 1);
  });
}

}  // namespace
}  // namespace shardrec::testing
