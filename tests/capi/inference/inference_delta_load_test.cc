// Deltas taken after a checkpoint load, through the C API: a load replaces the training table,
// and the rows it held that the checkpoint lacks must leave the serving copy too. The trainer of
// a one-table world-1 collection (3 slots, LRU) evicts ids 1 and 2, saves and loads that state:
// the delta (tombstones 1 and 2) applied to a copy opened at the mark serves what training reads,
// zeros for 1 and 2. At world 2 (row-wise), a load of a checkpoint older than the mark (a
// rollback) gives every rank the same delta, which turns a copy opened at the mark into what a
// fresh open of the older checkpoint serves.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "shardrec/checkpoint.h"
#include "shardrec/inference.h"
#include "tests/capi/dynamic/stream.h"
#include "tests/capi/inference/delta_load_util.h"
#include "tests/capi/inference/inference_test_util.h"
#include "tests/support/spawn_ranks.h"
#include "tests/support/temp_dirs.h"

namespace shardrec::testing {
namespace {

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

int64_t ServedRows(shardrec_inference_t* inf, size_t table) {
  int64_t rows = -1;
  EXPECT_EQ(shardrec_inference_table_info(inf, table, nullptr, &rows, nullptr, nullptr),
            SHARDREC_OK);
  return rows;
}

// The independent checker's scenario (docs/serving.md, "Deltas"): before the fix the load
// forgot the tombstones, the delta was 3 rows and no tombstone, and the copy kept 5 rows, ids 1
// and 2 reading the rows training had evicted.
TEST(InferenceDeltaLoad, LoadSinceTheMarkLeavesNoGhosts) {
  Tiny t = MakeTiny(3);
  ASSERT_NE(t.coll, nullptr);
  shardrec_embedding_t* c = t.coll.get();
  const std::string g0 = FreshDir("ghost0"), g1 = FreshDir("ghost1");
  TrainIds(c, {1, 2, 3});
  ASSERT_EQ(shardrec_checkpoint_save(c, g0.c_str(), nullptr), SHARDREC_OK) << shardrec_last_error();
  ASSERT_EQ(shardrec_embedding_dynamic_mark(c, "t"), SHARDREC_OK);
  InferencePtr serving = Open(g0, SHARDREC_SERVING_AS_TRAINED);
  ASSERT_NE(serving, nullptr);
  TrainIds(c, {4, 5});  // a full shard: 1 and 2, seen longest ago, leave
  ASSERT_EQ(shardrec_checkpoint_save(c, g1.c_str(), nullptr), SHARDREC_OK) << shardrec_last_error();
  ASSERT_EQ(shardrec_checkpoint_load(c, g1.c_str(), nullptr), SHARDREC_OK) << shardrec_last_error();

  const DeltaVectors d = TakeDelta(c, "t", kTinyDim);
  EXPECT_EQ(d.ids, (std::vector<int64_t>{3, 4, 5}));  // a load marks every loaded row changed
  EXPECT_EQ(d.tombstones, (std::vector<int64_t>{1, 2}));
  ASSERT_EQ(ApplyMerged(serving.get(), "t", d), SHARDREC_OK) << shardrec_last_error();

  const std::vector<int64_t> ids = {1, 2, 3, 4, 5};
  const std::vector<float> trained = EvalRows(c, ids);
  const std::vector<float> served = Lookup(serving.get(), SingleIdBags(ids), 1);
  EXPECT_TRUE(SameBits(served, trained));
  EXPECT_EQ(ServedRows(serving.get(), 0), 3);
  for (size_t i = 0; i < 2 * kTinyDim; ++i) EXPECT_EQ(served[i], 0.0f) << "value " << i;
  for (size_t i = 2 * kTinyDim; i < served.size(); ++i) EXPECT_NE(served[i], 0.0f) << i;
}

TEST(InferenceDeltaLoad, RollbackPastTheMarkAtWorld2) {
  constexpr int32_t kWorld = 2;
  DynScenario s =
      MakeDynScenario(kWorld, SHARDREC_SHARDING_ROW_WISE, SHARDREC_OPTIMIZER_ADAGRAD, 16, 24);
  for (auto& d : s.dynamic) d.eviction = SHARDREC_EVICTION_LRU;  // 24 ids, 16 slots: evictions
  const int64_t dim = DynOutputDim(s);
  const Stream st = MakeStream(s, dim, 6);
  PlanPtr plan = MakeDynPlan(s);
  ASSERT_NE(plan, nullptr);
  const std::string older = FreshDir("older"), at_mark = FreshDir("atmark");
  const char* names[2] = {"t0", "t1"};
  DeltaVectors deltas[kWorld][2];
  SpawnRanks(kWorld, [&](int r) {
    CollPtr coll;
    MakeStreamCollection(s, plan.get(), kWorld, r, &coll);
    shardrec_embedding_t* c = coll.get();
    if (c == nullptr) return;
    auto train = [&](int32_t step) {
      ForwardSlice(c, st.batches[step], kWorld, r, dim, nullptr);
      BackwardSlice(c, st.grads[step], kWorld, r, dim);
    };
    for (int32_t step = 0; step < 2; ++step) train(step);
    ASSERT_EQ(shardrec_checkpoint_save(c, older.c_str(), nullptr), SHARDREC_OK);
    for (int32_t step = 2; step < 4; ++step) train(step);
    for (const char* t : names) ASSERT_EQ(shardrec_embedding_dynamic_mark(c, t), SHARDREC_OK);
    ASSERT_EQ(shardrec_checkpoint_save(c, at_mark.c_str(), nullptr), SHARDREC_OK);
    for (int32_t step = 4; step < 6; ++step) train(step);
    ASSERT_EQ(shardrec_checkpoint_load(c, older.c_str(), nullptr), SHARDREC_OK)
        << shardrec_last_error();
    for (int t = 0; t < 2; ++t)
      deltas[r][t] = TakeDelta(c, names[t], s.base.tables[static_cast<size_t>(t)].dim);
  });
  size_t tombstones = 0;
  for (int t = 0; t < 2; ++t) {
    EXPECT_EQ(deltas[1][t].ids, deltas[0][t].ids);
    EXPECT_TRUE(SameBits(deltas[1][t].rows, deltas[0][t].rows));
    EXPECT_EQ(deltas[1][t].tombstones, deltas[0][t].tombstones);
    tombstones += deltas[0][t].tombstones.size();
  }
  EXPECT_GT(tombstones, 0u);  // the table at the mark held ids the older checkpoint lacks

  InferencePtr followed = Open(at_mark, SHARDREC_SERVING_AS_TRAINED);
  InferencePtr fresh = Open(older, SHARDREC_SERVING_AS_TRAINED);
  ASSERT_TRUE(followed != nullptr && fresh != nullptr);
  for (int t = 0; t < 2; ++t)
    ASSERT_EQ(ApplyMerged(followed.get(), names[t], deltas[0][t]), SHARDREC_OK)
        << shardrec_last_error();
  EXPECT_TRUE(SameBits(Lookup(followed.get(), st.probe, 3), Lookup(fresh.get(), st.probe, 3)));
  for (size_t t = 0; t < 2; ++t)
    EXPECT_EQ(ServedRows(followed.get(), t), ServedRows(fresh.get(), t));
}

}  // namespace
}  // namespace shardrec::testing
