// Dynamic tables in the inference collection, and deltas: a checkpoint of a trained dynamic
// collection (table-, row-, column-, table-row-wise and data-parallel, worlds 1, 2 and 4, and a
// 2 x 2 mesh checkpoint after a merging sync; LRU eviction) opens with
// every row the training deltas replay to and zeros for unknown ids (counted in a MEAN divisor);
// applying the next training delta equals a fresh open of the next checkpoint, bit for bit in every
// storage, also through a serving file; a fixed table takes row updates only; deltas under load
// never show a mixed version; bad deltas change nothing; corrupt ids are refused; sequence
// tables and int32 ids; ids crafted to collide in the id index.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "shardrec/checkpoint.h"
#include "shardrec/dynamic.h"
#include "shardrec/replica.h"
#include "tests/capi/dynamic/stream.h"
#include "tests/capi/dynamic/test_util.h"
#include "tests/capi/inference/delta_load_util.h"
#include "tests/capi/inference/inference_test_util.h"
#include "tests/support/spawn_ranks.h"
#include "tests/support/temp_dirs.h"

namespace shardrec::testing {
namespace {

// An id that no pool of MakeDynScenario holds (checked where used).
constexpr int64_t kUnknown = 987654321012345;

using RowMap = std::map<int64_t, std::vector<float>>;

void Replay(const DeltaVectors& d, int64_t dim, RowMap* t) {
  for (size_t i = 0; i < d.ids.size(); ++i)
    (*t)[d.ids[i]].assign(d.rows.begin() + static_cast<int64_t>(i) * dim,
                          d.rows.begin() + static_cast<int64_t>(i + 1) * dim);
  for (int64_t x : d.tombstones) t->erase(x);
}

// Training of one side: marks at creation, 3 steps, delta 1 and checkpoint 1, a new mark, 3 more
// steps, delta 2 and checkpoint 2 (rank 0's deltas; every rank gets the same).
struct DynRunSaved {
  DynScenario s;
  std::string ckpt1, ckpt2;
  DeltaVectors d1[2], d2[2];
};

DynRunSaved TrainDynamic(int32_t world, int32_t sharding) {
  DynRunSaved run;
  run.s = MakeDynScenario(world, sharding, SHARDREC_OPTIMIZER_ADAGRAD, 16, 24);
  DynScenario& s = run.s;
  for (auto& d : s.dynamic) d.eviction = SHARDREC_EVICTION_LRU;  // 24 ids, 16 slots: tombstones
  s.base.tables[0].dtype = SHARDREC_DTYPE_BFLOAT16;
  const int64_t dim = DynOutputDim(s);
  const Stream st = MakeStream(s, dim, 6);
  PlanPtr plan = MakeDynPlan(s);
  EXPECT_NE(plan, nullptr);
  if (plan == nullptr) return run;
  run.ckpt1 = FreshDir("dyn1");
  run.ckpt2 = FreshDir("dyn2");
  std::mutex mu;
  SpawnRanks(world, [&](int r) {
    CollPtr coll;
    MakeStreamCollection(s, plan.get(), world, r, &coll);
    shardrec_embedding_t* c = coll.get();
    if (c == nullptr) return;
    auto train = [&](int32_t step) {
      ForwardSlice(c, st.batches[step], world, r, dim, nullptr);
      BackwardSlice(c, st.grads[step], world, r, dim);
    };
    DeltaVectors mine[4];
    for (const char* t : {"t0", "t1"})
      ASSERT_EQ(shardrec_embedding_dynamic_mark(c, t), SHARDREC_OK);
    for (int32_t step = 0; step < 3; ++step) train(step);
    for (int t = 0; t < 2; ++t) {
      const char* name = t == 0 ? "t0" : "t1";
      mine[t] = TakeDelta(c, name, s.base.tables[static_cast<size_t>(t)].dim);
      ASSERT_EQ(shardrec_embedding_dynamic_mark(c, name), SHARDREC_OK);
    }
    ASSERT_EQ(shardrec_checkpoint_save(c, run.ckpt1.c_str(), nullptr), SHARDREC_OK)
        << shardrec_last_error();
    for (int32_t step = 3; step < 6; ++step) train(step);
    for (int t = 0; t < 2; ++t)
      mine[2 + t] = TakeDelta(c, t == 0 ? "t0" : "t1", s.base.tables[static_cast<size_t>(t)].dim);
    ASSERT_EQ(shardrec_checkpoint_save(c, run.ckpt2.c_str(), nullptr), SHARDREC_OK)
        << shardrec_last_error();
    if (r != 0) return;
    std::lock_guard<std::mutex> lock(mu);
    for (int t = 0; t < 2; ++t) {
      run.d1[t] = std::move(mine[t]);
      run.d2[t] = std::move(mine[2 + t]);
    }
  });
  return run;
}

// Every pool id once per table (f0 reads t0 with SUM, f1 and f2 read t1 with MEAN), the t1 bags
// with an unknown id beside it, then a sample of unknown ids only and an empty one.
RefBatch Probe(const DynScenario& s) {
  RefBatch b;
  const auto n = static_cast<int64_t>(s.pools[0].size());
  b.batch_size = n + 2;
  for (int32_t f = 0; f < 3; ++f) {
    for (int64_t i = 0; i < b.batch_size; ++i) {
      std::vector<int64_t> bag;
      if (i < n && f == 0) bag = {s.pools[0][static_cast<size_t>(i)]};
      if (i < n && f == 1) bag = {s.pools[1][static_cast<size_t>(i)], kUnknown};
      if (i == n) bag = {kUnknown};
      b.lengths.push_back(static_cast<int32_t>(bag.size()));
      b.ids.insert(b.ids.end(), bag.begin(), bag.end());
    }
  }
  return b;
}

// The training semantics of Probe on tables `t`: unknown ids read zeros and count in MEAN.
std::vector<float> Expected(const DynScenario& s, const RowMap t[2], const RefBatch& b) {
  const int64_t dim = DynOutputDim(s);
  const int64_t d0 = s.base.tables[0].dim, d1 = s.base.tables[1].dim;
  std::vector<float> out(static_cast<size_t>(b.batch_size * dim), 0.0f);
  const int64_t B = b.batch_size;
  size_t pos = 0;
  const int64_t offsets[3] = {0, d0, d0 + d1};
  for (int32_t f = 0; f < 3; ++f) {
    const RowMap& table = t[f == 0 ? 0 : 1];
    const int64_t w = f == 0 ? d0 : d1;
    for (int64_t i = 0; i < B; ++i) {
      const int32_t len = b.lengths[static_cast<size_t>(f * B + i)];
      float* acc = out.data() + i * dim + offsets[f];
      for (int32_t k = 0; k < len; ++k, ++pos) {
        auto it = table.find(b.ids[pos]);
        for (int64_t c = 0; c < w; ++c) acc[c] += it == table.end() ? 0.0f : it->second[c];
      }
      if (f > 0 && len > 0)
        for (int64_t c = 0; c < w; ++c) acc[c] /= static_cast<float>(len);
    }
  }
  return out;
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

shardrec_status_t Apply(shardrec_inference_t* inf, const char* table, const DeltaVectors& d,
                        uint64_t* version = nullptr) {
  return shardrec_inference_apply_delta(inf, table, d.ids.data(), d.rows.data(), d.ids.size(),
                                        d.tombstones.data(), d.tombstones.size(), version);
}

TEST(InferenceDynamic, CheckpointsAndDeltasEqualTraining) {
  struct Side {
    int32_t world, sharding;
  };
  for (const Side side :
       {Side{1, SHARDREC_SHARDING_TABLE_WISE}, Side{2, SHARDREC_SHARDING_ROW_WISE},
        Side{2, SHARDREC_SHARDING_COLUMN_WISE}, Side{2, SHARDREC_SHARDING_DATA_PARALLEL},
        Side{4, SHARDREC_SHARDING_ROW_WISE}, Side{4, SHARDREC_SHARDING_TABLE_ROW_WISE}}) {
    const std::string what =
        "world " + std::to_string(side.world) + " sharding " + std::to_string(side.sharding);
    const DynRunSaved run = TrainDynamic(side.world, side.sharding);
    ASSERT_FALSE(run.ckpt1.empty()) << what;
    for (const auto& pool : run.s.pools)
      ASSERT_EQ(std::count(pool.begin(), pool.end(), kUnknown), 0);
    size_t tombstones = 0;
    RowMap at1[2], at2[2];
    for (int t = 0; t < 2; ++t) {
      const int64_t dim = run.s.base.tables[static_cast<size_t>(t)].dim;
      Replay(run.d1[t], dim, &at1[t]);
      at2[t] = at1[t];
      Replay(run.d2[t], dim, &at2[t]);
      tombstones += run.d2[t].tombstones.size();
    }
    EXPECT_GT(tombstones, 0u) << what;  // the second delta removes rows too
    const RefBatch probe = Probe(run.s);
    for (int32_t storage : {SHARDREC_SERVING_AS_TRAINED, SHARDREC_SERVING_FP16,
                            SHARDREC_SERVING_INT8, SHARDREC_SERVING_INT4}) {
      const std::string how = what + " storage " + std::to_string(storage);
      InferencePtr inf = Open(run.ckpt1, storage);
      ASSERT_NE(inf, nullptr) << how;
      for (size_t t = 0; t < 2; ++t) {
        int64_t rows = 0;
        ASSERT_EQ(shardrec_inference_table_info(inf.get(), t, nullptr, &rows, nullptr, nullptr),
                  SHARDREC_OK);
        EXPECT_EQ(rows, static_cast<int64_t>(at1[t].size())) << how;
      }
      const std::vector<float> v1 = Lookup(inf.get(), probe, 3);
      if (storage == SHARDREC_SERVING_AS_TRAINED) {
        EXPECT_TRUE(SameBits(v1, Expected(run.s, at1, probe))) << how;
      }
      uint64_t version = 0;
      ASSERT_EQ(Apply(inf.get(), "t0", run.d2[0], &version), SHARDREC_OK) << shardrec_last_error();
      EXPECT_EQ(version, 2u);
      ASSERT_EQ(Apply(inf.get(), "t1", run.d2[1], &version), SHARDREC_OK) << shardrec_last_error();
      EXPECT_EQ(version, 3u);
      const std::vector<float> v2 = Lookup(inf.get(), probe, 3);
      if (storage == SHARDREC_SERVING_AS_TRAINED) {
        EXPECT_TRUE(SameBits(v2, Expected(run.s, at2, probe))) << how;
      }
      // A fresh open of the next checkpoint, and the delta-applied version's serving file.
      InferencePtr fresh = Open(run.ckpt2, storage);
      ASSERT_NE(fresh, nullptr) << how;
      EXPECT_TRUE(SameBits(v2, Lookup(fresh.get(), probe, 3))) << how;
      for (size_t t = 0; t < 2; ++t) {
        int64_t rows = 0;
        ASSERT_EQ(shardrec_inference_table_info(inf.get(), t, nullptr, &rows, nullptr, nullptr),
                  SHARDREC_OK);
        EXPECT_EQ(rows, static_cast<int64_t>(at2[t].size())) << how;
      }
      const std::string file = FreshDir("dynfile") + "/model.srv";
      ASSERT_EQ(shardrec_inference_save(inf.get(), file.c_str()), SHARDREC_OK)
          << shardrec_last_error();
      InferencePtr mapped = Open(file, SHARDREC_SERVING_AS_TRAINED);
      ASSERT_NE(mapped, nullptr) << how;
      EXPECT_TRUE(SameBits(v2, Lookup(mapped.get(), probe, 3))) << how;
      // A reload of the older checkpoint replaces the applied deltas.
      ASSERT_EQ(shardrec_inference_reload(inf.get(), run.ckpt1.c_str()), SHARDREC_OK)
          << shardrec_last_error();
      EXPECT_TRUE(SameBits(v1, Lookup(inf.get(), probe, 3))) << how;
    }
  }
}

// Dynamic tables trained on a 2 x 2 mesh (each replica on its own batches, then a sync that
// merges them by id) serve from the mesh checkpoint: every id of the merged table reads its row
// (the rows the synced collection's delta export replays to), unknown ids zeros.
TEST(InferenceDynamic, MeshCheckpointServesTheMergedTable) {
  constexpr int32_t kWorld = 4;
  DynScenario s =
      MakeDynScenario(2, SHARDREC_SHARDING_ROW_WISE, SHARDREC_OPTIMIZER_ADAGRAD, 16, 24);
  for (auto& d : s.dynamic) d.eviction = SHARDREC_EVICTION_LRU;
  const int64_t dim = DynOutputDim(s);
  const Stream st = MakeStream(s, dim, 3);
  PlanPtr plan = MakeDynPlan(s);
  ASSERT_NE(plan, nullptr);
  const std::string ckpt = FreshDir("dynmesh");
  const shardrec_optimizer_config_t opt = ToCOptimizer(s.base.optimizer);
  DeltaVectors merged[2];
  std::mutex mu;
  SpawnRanks(kWorld, [&](int r) {
    shardrec_mesh_options_t mo;
    shardrec_mesh_options_init(&mo, SHARDREC_MESH_OPTIONS_VERSION);
    mo.sharding_group_size = 2;
    shardrec_mesh_t* m = nullptr;
    ASSERT_EQ(shardrec_mesh_create(&m, GroupComm(kWorld, r), &mo), SHARDREC_OK)
        << shardrec_last_error();
    const std::unique_ptr<shardrec_mesh_t, void (*)(shardrec_mesh_t*)> mesh(m,
                                                                            shardrec_mesh_destroy);
    shardrec_embedding_options_t o;
    shardrec_embedding_options_init(&o, SHARDREC_EMBEDDING_OPTIONS_VERSION);
    o.seed = s.base.seed;
    shardrec_embedding_t* c = nullptr;
    ASSERT_EQ(shardrec_mesh_embedding_create(&c, m, plan.get(), &opt, &o), SHARDREC_OK)
        << shardrec_last_error();
    CollPtr coll(c);  // destroyed before the mesh
    for (const char* t : {"t0", "t1"})
      ASSERT_EQ(shardrec_embedding_dynamic_mark(c, t), SHARDREC_OK) << shardrec_last_error();
    for (int32_t step = 0; step < 3; ++step) {
      ForwardSlice(c, st.batches[step], kWorld, r, dim, nullptr);
      BackwardSlice(c, st.grads[step], kWorld, r, dim);
    }
    ASSERT_EQ(shardrec_mesh_sync(m, c, SHARDREC_SYNC_DEFAULT), SHARDREC_OK)
        << shardrec_last_error();
    DeltaVectors mine[2];
    for (int t = 0; t < 2; ++t)
      mine[t] = TakeDelta(c, t == 0 ? "t0" : "t1", s.base.tables[static_cast<size_t>(t)].dim);
    ASSERT_EQ(shardrec_checkpoint_save_mesh(m, c, ckpt.c_str(), nullptr), SHARDREC_OK)
        << shardrec_last_error();
    if (r != 0) return;
    std::lock_guard<std::mutex> lock(mu);
    for (int t = 0; t < 2; ++t) merged[t] = std::move(mine[t]);
  });
  if (HasFatalFailure()) return;
  RowMap at[2];
  for (int t = 0; t < 2; ++t) {
    Replay(merged[t], s.base.tables[static_cast<size_t>(t)].dim, &at[t]);
    EXPECT_FALSE(at[t].empty()) << "table " << t;
  }
  const RefBatch probe = Probe(s);
  InferencePtr inf = Open(ckpt, SHARDREC_SERVING_AS_TRAINED);
  ASSERT_NE(inf, nullptr);
  for (size_t t = 0; t < 2; ++t) {
    int64_t rows = 0;
    ASSERT_EQ(shardrec_inference_table_info(inf.get(), t, nullptr, &rows, nullptr, nullptr),
              SHARDREC_OK);
    EXPECT_EQ(rows, static_cast<int64_t>(at[t].size())) << "table " << t;
  }
  EXPECT_TRUE(SameBits(Lookup(inf.get(), probe, 3), Expected(s, at, probe)));
}

// Bad deltas are refused and change nothing; a fixed table takes row updates by index.
TEST(InferenceDynamic, BadDeltasAndFixedTables) {
  const DynRunSaved run = TrainDynamic(1, SHARDREC_SHARDING_TABLE_WISE);
  InferencePtr inf = Open(run.ckpt1, SHARDREC_SERVING_INT8);
  ASSERT_NE(inf, nullptr);
  const RefBatch probe = Probe(run.s);
  const std::vector<float> before = Lookup(inf.get(), probe, 3);
  const std::vector<float> row(8, 1.0f), nan_row(8, NAN);
  const int64_t id = run.s.pools[0][0];
  const int64_t twice[2] = {id, id};
  const float two_rows[16] = {};
  EXPECT_EQ(
      shardrec_inference_apply_delta(inf.get(), "nope", &id, row.data(), 1, nullptr, 0, nullptr),
      SHARDREC_ENOTFOUND);
  EXPECT_EQ(
      shardrec_inference_apply_delta(inf.get(), "t0", twice, two_rows, 2, nullptr, 0, nullptr),
      SHARDREC_EINVAL);
  EXPECT_EQ(shardrec_inference_apply_delta(inf.get(), "t0", &id, row.data(), 1, &id, 1, nullptr),
            SHARDREC_EINVAL);
  EXPECT_EQ(
      shardrec_inference_apply_delta(inf.get(), "t0", &id, nan_row.data(), 1, nullptr, 0, nullptr),
      SHARDREC_EINVAL);
  EXPECT_NE(std::string(shardrec_last_error()).find("non-finite"), std::string::npos);
  EXPECT_EQ(
      shardrec_inference_apply_delta(inf.get(), "t0", nullptr, nullptr, 1, nullptr, 0, nullptr),
      SHARDREC_EINVAL);
  EXPECT_EQ(shardrec_inference_apply_delta(nullptr, "t0", nullptr, nullptr, 0, nullptr, 0, nullptr),
            SHARDREC_EINVAL);
  // Finite values whose span is beyond fp32 (an infinite scale) used to be taken by an int8 or
  // int4 table and then read back as NaN.
  std::vector<float> wide(8, 0.25f);
  wide[0] = 3e38f;
  wide[1] = -3e38f;
  EXPECT_EQ(
      shardrec_inference_apply_delta(inf.get(), "t0", &id, wide.data(), 1, nullptr, 0, nullptr),
      SHARDREC_EINVAL);
  EXPECT_NE(std::string(shardrec_last_error()).find("cannot scale"), std::string::npos)
      << shardrec_last_error();
  uint64_t version = 0;
  ASSERT_EQ(shardrec_inference_version(inf.get(), &version), SHARDREC_OK);
  EXPECT_EQ(version, 1u);
  EXPECT_TRUE(SameBits(before, Lookup(inf.get(), probe, 3)));
  {
    InferencePtr four = Open(run.ckpt1, SHARDREC_SERVING_INT4);
    ASSERT_NE(four, nullptr);
    EXPECT_EQ(
        shardrec_inference_apply_delta(four.get(), "t0", &id, wide.data(), 1, nullptr, 0, nullptr),
        SHARDREC_EINVAL);
    wide[1] = 0.0f;  // a span fp32 holds quantizes
    ASSERT_EQ(
        shardrec_inference_apply_delta(four.get(), "t0", &id, wide.data(), 1, nullptr, 0, nullptr),
        SHARDREC_OK)
        << shardrec_last_error();
  }
  // An empty delta is a new version with the same rows; removing an unknown id is a no-op.
  const int64_t unknown = kUnknown;
  ASSERT_EQ(
      shardrec_inference_apply_delta(inf.get(), "t0", nullptr, nullptr, 0, &unknown, 1, &version),
      SHARDREC_OK)
      << shardrec_last_error();
  EXPECT_EQ(version, 2u);
  EXPECT_TRUE(SameBits(before, Lookup(inf.get(), probe, 3)));

  // Fixed tables: rows by index; tombstones and ids out of range refused.
  Side side;
  side.world = 1;
  side.sharding = SHARDREC_SHARDING_TABLE_WISE;
  const Trained tr = TrainAndSave(side, SHARDREC_POOLING_SUM, false);
  InferencePtr fixed = Open(tr.trained_dir, SHARDREC_SERVING_FP32);
  ASSERT_NE(fixed, nullptr);
  const char* name = nullptr;
  int64_t rows = 0;
  int32_t dim = 0;
  ASSERT_EQ(shardrec_inference_table_info(fixed.get(), 0, &name, &rows, &dim, nullptr),
            SHARDREC_OK);
  size_t num_features = 0;
  ASSERT_EQ(shardrec_inference_num_features(fixed.get(), &num_features), SHARDREC_OK);
  RefBatch b;  // one sample, every feature reads id 1
  b.batch_size = 1;
  for (size_t f = 0; f < num_features; ++f) {
    b.lengths.push_back(1);
    b.ids.push_back(1);
  }
  const auto F = static_cast<int32_t>(num_features);
  const std::vector<float> old = Lookup(fixed.get(), b, F);
  const std::vector<float> marker(static_cast<size_t>(dim), 0.75f);
  const int64_t one = 1, out_of_range = rows;
  EXPECT_EQ(
      shardrec_inference_apply_delta(fixed.get(), name, &one, marker.data(), 1, &one, 1, nullptr),
      SHARDREC_EINVAL);
  EXPECT_EQ(shardrec_inference_apply_delta(fixed.get(), name, &out_of_range, marker.data(), 1,
                                           nullptr, 0, nullptr),
            SHARDREC_EINVAL);
  // Not finite, in an fp32 table too: training makes no such row, and it would serve NaN.
  std::vector<float> bad(static_cast<size_t>(dim), 0.5f);
  bad[1] = NAN;
  EXPECT_EQ(
      shardrec_inference_apply_delta(fixed.get(), name, &one, bad.data(), 1, nullptr, 0, nullptr),
      SHARDREC_EINVAL);
  EXPECT_NE(std::string(shardrec_last_error()).find("column 1"), std::string::npos)
      << shardrec_last_error();
  EXPECT_TRUE(SameBits(old, Lookup(fixed.get(), b, F)));
  // Beyond fp16's range (65504), in an fp16 table: it would read as infinity.
  InferencePtr half = Open(tr.trained_dir, SHARDREC_SERVING_FP16);
  ASSERT_NE(half, nullptr);
  const std::vector<float> half_old = Lookup(half.get(), b, F);
  bad.assign(static_cast<size_t>(dim), 0.5f);
  bad[0] = 70000.0f;
  EXPECT_EQ(
      shardrec_inference_apply_delta(half.get(), name, &one, bad.data(), 1, nullptr, 0, nullptr),
      SHARDREC_EINVAL);
  EXPECT_NE(std::string(shardrec_last_error()).find("range"), std::string::npos)
      << shardrec_last_error();
  bad[0] = 65504.0f;  // the largest fp16 value is taken
  EXPECT_EQ(
      shardrec_inference_apply_delta(half.get(), name, &one, bad.data(), 1, nullptr, 0, nullptr),
      SHARDREC_OK)
      << shardrec_last_error();
  EXPECT_FALSE(SameBits(half_old, Lookup(half.get(), b, F)));
  ASSERT_EQ(shardrec_inference_apply_delta(fixed.get(), name, &one, marker.data(), 1, nullptr, 0,
                                           &version),
            SHARDREC_OK)
      << shardrec_last_error();
  EXPECT_EQ(version, 2u);
  const std::vector<float> now = Lookup(fixed.get(), b, F);
  int64_t changed = 0;
  for (size_t c = 0; c < now.size(); ++c) {
    if (now[c] == old[c]) continue;
    EXPECT_EQ(now[c], 0.75f) << "column " << c;
    ++changed;
  }
  EXPECT_GE(changed, dim);  // every column of a pair that reads the table (unless equal by chance)
}

// The checkpoint, in a fresh directory named after `tag`, of a world-1 sequence (NONE)
// collection of two dynamic tables of dim 8 saved before any training (empty tables); empty
// when it could not be made (the test has failed then).
std::string SavedEmptySequenceTables(const std::string& tag) {
  DynScenario s = MakeDynScenario(1, SHARDREC_SHARDING_TABLE_WISE, SHARDREC_OPTIMIZER_SGD, 8, 8);
  for (RefTable& t : s.base.tables) {
    t.pooling = SHARDREC_POOLING_NONE;
    t.dim = 8;
  }
  PlanPtr plan = MakeDynPlan(s);
  EXPECT_NE(plan, nullptr) << shardrec_last_error();
  if (plan == nullptr) return "";
  const std::string dir = FreshDir(tag);
  const shardrec_optimizer_config_t opt = ToCOptimizer(s.base.optimizer);
  shardrec_embedding_t* c = nullptr;
  EXPECT_EQ(shardrec_embedding_create(&c, plan.get(), GroupComm(1, 0), &opt, nullptr), SHARDREC_OK)
      << shardrec_last_error();
  if (c == nullptr) return "";
  CollPtr coll(c);
  const shardrec_status_t saved = shardrec_checkpoint_save(c, dir.c_str(), nullptr);
  EXPECT_EQ(saved, SHARDREC_OK) << shardrec_last_error();
  return saved == SHARDREC_OK ? dir : "";
}

// A sequence (NONE) collection of two dynamic tables saved before any training (empty tables),
// filled by deltas: known ids read their rows, unknown ones zeros, with int32 ids sign-extended.
TEST(InferenceDynamic, SequenceTablesFilledByDeltas) {
  const std::string dir = SavedEmptySequenceTables("dynseq");
  ASSERT_FALSE(dir.empty());
  InferencePtr inf = Open(dir, SHARDREC_SERVING_AS_TRAINED);
  ASSERT_NE(inf, nullptr);
  int32_t seq = 0;
  int64_t rows = -1;
  ASSERT_EQ(shardrec_inference_is_sequence(inf.get(), &seq), SHARDREC_OK);
  ASSERT_EQ(shardrec_inference_table_info(inf.get(), 0, nullptr, &rows, nullptr, nullptr),
            SHARDREC_OK);
  EXPECT_EQ(seq, 1);
  EXPECT_EQ(rows, 0);
  std::vector<float> r0(3 * 8), r1(8);
  for (size_t i = 0; i < r0.size(); ++i) r0[i] = static_cast<float>(i) + 0.5f;
  for (size_t i = 0; i < r1.size(); ++i) r1[i] = -static_cast<float>(i) - 0.25f;
  const int64_t ids0[3] = {5, -7, INT64_MIN}, ids1[1] = {5};
  ASSERT_EQ(
      shardrec_inference_apply_delta(inf.get(), "t0", ids0, r0.data(), 3, nullptr, 0, nullptr),
      SHARDREC_OK)
      << shardrec_last_error();
  ASSERT_EQ(
      shardrec_inference_apply_delta(inf.get(), "t1", ids1, r1.data(), 1, nullptr, 0, nullptr),
      SHARDREC_OK)
      << shardrec_last_error();
  RefBatch b;  // one sample: f0 = [5, -7, 3] (t0), f1 = [-7] (t1), f2 = [5] (t1)
  b.batch_size = 1;
  b.lengths = {3, 1, 1};
  b.ids = {5, -7, 3, -7, 5};
  std::vector<float> want(5 * 8, 0.0f);
  std::copy_n(r0.begin(), 8, want.begin());          // t0 id 5
  std::copy_n(r0.begin() + 8, 8, want.begin() + 8);  // t0 id -7
  std::copy_n(r1.begin(), 8, want.begin() + 4 * 8);  // t1 id 5 (t1 has no -7)
  for (bool int32_ids : {false, true}) {
    KjtHolder kjt(b, 3, int32_ids);
    std::vector<float> out(want.size(), NAN);
    ASSERT_EQ(shardrec_inference_lookup(inf.get(), kjt.view(), out.data(), out.size(), nullptr),
              SHARDREC_OK)
        << shardrec_last_error();
    EXPECT_TRUE(SameBits(out, want)) << (int32_ids ? "int32 ids" : "int64 ids");
  }
}

// splitmix64's finaliser, the served tables' id index hash before it took a key, undone: the id
// whose unkeyed hash is `h`.
int64_t UnkeyedIdOfHash(uint64_t h) {
  auto unshift = [](uint64_t y, int s) {
    uint64_t x = y;
    for (int i = 0; i < 64 / s + 1; ++i) x = y ^ (x >> s);
    return x;
  };
  auto inverse = [](uint64_t a) {  // of an odd multiplier, mod 2^64 (Newton)
    uint64_t x = a;
    for (int i = 0; i < 6; ++i) x *= 2 - a * x;
    return x;
  };
  uint64_t z = unshift(h, 31) * inverse(0x94d049bb133111ebull);
  z = unshift(z, 27) * inverse(0xbf58476d1ce4e5b9ull);
  return static_cast<int64_t>(unshift(z, 30) - 0x9e3779b97f4a7c15ull);
}

// Ids chosen so their unkeyed hashes share the low 40 bits (so every id's home bucket in any
// index below 2^40 entries), as a delta from the network or a file from elsewhere may hold: the
// index put them all in one probe run, and building it took n^2 / 2 probes (2^18 ids: hours under
// the sanitizers, past this test's timeout; 32k: 33 s), as did each lookup that missed. Now its
// hash is keyed: the delta applies, saves as a serving file and opens again at once, and every id
// reads its row.
TEST(InferenceDynamic, IdsCraftedToCollideIndexInLinearTime) {
  const std::string dir = SavedEmptySequenceTables("dyncollide");
  ASSERT_FALSE(dir.empty());
  InferencePtr inf = Open(dir, SHARDREC_SERVING_FP32);
  ASSERT_NE(inf, nullptr);
  constexpr size_t kIds = size_t{1} << 18;
  std::vector<int64_t> ids(kIds);
  for (size_t k = 0; k < kIds; ++k) ids[k] = UnkeyedIdOfHash(static_cast<uint64_t>(k + 1) << 40);
  std::vector<float> rows(kIds * 8);
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<float>(i % 1000) * 0.5f;
  ASSERT_EQ(shardrec_inference_apply_delta(inf.get(), "t0", ids.data(), rows.data(), kIds, nullptr,
                                           0, nullptr),
            SHARDREC_OK)
      << shardrec_last_error();
  const std::string file = dir + "/collide.srserve";
  ASSERT_EQ(shardrec_inference_save(inf.get(), file.c_str()), SHARDREC_OK) << shardrec_last_error();
  InferencePtr reopened = Open(file, SHARDREC_SERVING_AS_TRAINED);
  ASSERT_NE(reopened, nullptr);
  for (shardrec_inference_t* h : {inf.get(), reopened.get()}) {
    int64_t n = 0;
    ASSERT_EQ(shardrec_inference_table_info(h, 0, nullptr, &n, nullptr, nullptr), SHARDREC_OK);
    EXPECT_EQ(n, static_cast<int64_t>(kIds));
    RefBatch b;  // one sample: f0 = every 997th crafted id and one without a row; f1, f2 empty
    b.batch_size = 1;
    std::vector<float> want;
    for (size_t k = 0; k < kIds; k += 997) {
      b.ids.push_back(ids[k]);
      want.insert(want.end(), rows.begin() + static_cast<int64_t>(k * 8),
                  rows.begin() + static_cast<int64_t>(k * 8 + 8));
    }
    b.ids.push_back(UnkeyedIdOfHash(uint64_t{1} << 63));
    want.insert(want.end(), 8, 0.0f);
    b.lengths = {static_cast<int32_t>(b.ids.size()), 0, 0};
    KjtHolder kjt(b, 3, false);
    std::vector<float> out(want.size(), NAN);
    ASSERT_EQ(shardrec_inference_lookup(h, kjt.view(), out.data(), out.size(), nullptr),
              SHARDREC_OK)
        << shardrec_last_error();
    EXPECT_TRUE(SameBits(out, want));
  }
}

void FlipByte(const std::string& path, uint64_t offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(offset));
  char c = 0;
  f.read(&c, 1);
  c = static_cast<char>(c ^ 0x5a);
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(&c, 1);
}

void ExpectCorrupt(const std::string& path, const std::string& word) {
  shardrec_inference_t* inf = nullptr;
  EXPECT_EQ(shardrec_inference_open(path.c_str(), nullptr, &inf), SHARDREC_ECORRUPT);
  EXPECT_EQ(inf, nullptr);
  const std::string msg = shardrec_last_error();
  EXPECT_NE(msg.find(word), std::string::npos) << msg;
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
}

// A flipped byte in a checkpoint's ids record or in a serving file's ids block is refused,
// naming the file and the record.
TEST(InferenceDynamic, CorruptIdsAreRefused) {
  namespace fs = std::filesystem;
  const DynRunSaved run = TrainDynamic(1, SHARDREC_SHARDING_TABLE_WISE);
  const std::string dir = FreshDir("dyncorrupt");
  fs::copy(run.ckpt1, dir, fs::copy_options::recursive | fs::copy_options::overwrite_existing);
  std::string rank_file;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".safetensors") rank_file = e.path().string();
  ASSERT_FALSE(rank_file.empty());
  {
    std::ifstream f(rank_file, std::ios::binary);
    uint64_t n = 0;
    f.read(reinterpret_cast<char*>(&n), 8);
    std::string header(n, '\0');
    f.read(header.data(), static_cast<std::streamsize>(n));
    std::smatch m;
    ASSERT_TRUE(
        std::regex_search(header, m, std::regex("/ids[^\"]*\"[^}]*\"data_offsets\":\\[(\\d+)")))
        << header;
    f.close();
    FlipByte(rank_file, 8 + n + std::stoull(m[1].str()) + 1);
  }
  ExpectCorrupt(dir, "ids");

  InferencePtr inf = Open(run.ckpt1, SHARDREC_SERVING_INT4);
  ASSERT_NE(inf, nullptr);
  const std::string file = FreshDir("dyncorruptfile") + "/model.srv";
  ASSERT_EQ(shardrec_inference_save(inf.get(), file.c_str()), SHARDREC_OK) << shardrec_last_error();
  std::ifstream f(file, std::ios::binary);
  char prefix[24];
  f.read(prefix, 24);
  uint64_t n = 0;
  std::memcpy(&n, prefix + 8, 8);
  std::string header(n, '\0');
  f.read(header.data(), static_cast<std::streamsize>(n));
  f.close();
  const nlohmann::json h = nlohmann::json::parse(header);
  EXPECT_EQ(h.at("format_version").get<int>(), 2);
  ASSERT_TRUE(h.at("tables")[0].value("dynamic", false));
  FlipByte(file, h.at("tables")[0].at("ids").at("offset").get<uint64_t>() + 3);
  ExpectCorrupt(file, "ids of table t0");
}

// Deltas under load: every delta k sets rows A and B of t0 to k and removes or restores C; a
// lookup sees one version: both rows equal the version's marker, and C matches that version.
TEST(InferenceDynamic, DeltasUnderLoadShowOneVersion) {
  const DynRunSaved run = TrainDynamic(1, SHARDREC_SHARDING_TABLE_WISE);
  InferencePtr inf = Open(run.ckpt1, SHARDREC_SERVING_FP32);
  ASSERT_NE(inf, nullptr);
  const int64_t A = 1000000001, B = 1000000002, C = 1000000003;
  RefBatch b;  // sample 0 reads A, sample 1 B, sample 2 C, through f0 (t0, SUM)
  b.batch_size = 3;
  b.lengths = {1, 1, 1, 0, 0, 0, 0, 0, 0};
  b.ids = {A, B, C};
  constexpr int kDeltas = 40;
  std::atomic<bool> stop{false};
  std::atomic<int64_t> checked{0}, mixed{0};
  std::vector<std::thread> readers;
  for (int r = 0; r < 3; ++r) {
    readers.emplace_back([&] {
      KjtHolder kjt(b, 3, false);
      std::vector<float> out(static_cast<size_t>(3 * DynOutputDim(run.s)));
      const size_t D = out.size() / 3;
      while (!stop.load()) {
        uint64_t v = 0;
        if (shardrec_inference_lookup(inf.get(), kjt.view(), out.data(), out.size(), &v) !=
            SHARDREC_OK) {
          ++mixed;
          continue;
        }
        if (v < 2) continue;
        const auto marker = static_cast<float>(v);
        const float c_expect = v % 2 == 0 ? marker : 0.0f;  // even versions restore C
        for (size_t c = 0; c < 8; ++c)
          if (out[c] != marker || out[D + c] != marker || out[2 * D + c] != c_expect) ++mixed;
        ++checked;
      }
    });
  }
  for (int k = 0; k < kDeltas; ++k) {
    const uint64_t next = static_cast<uint64_t>(k) + 2;
    const std::vector<float> rows(next % 2 == 0 ? 24 : 16, static_cast<float>(next));
    std::vector<int64_t> ids = {A, B};
    std::vector<int64_t> gone;
    if (next % 2 == 0) {
      ids.push_back(C);
    } else {
      gone.push_back(C);
    }
    uint64_t version = 0;
    ASSERT_EQ(shardrec_inference_apply_delta(inf.get(), "t0", ids.data(), rows.data(), ids.size(),
                                             gone.data(), gone.size(), &version),
              SHARDREC_OK)
        << shardrec_last_error();
    ASSERT_EQ(version, next);
    std::this_thread::yield();
  }
  while (checked.load() == 0 && mixed.load() == 0) std::this_thread::yield();
  stop.store(true);
  for (auto& t : readers) t.join();
  EXPECT_EQ(mixed.load(), 0);
  EXPECT_GT(checked.load(), 0);
}

// shardrec_inference_row_scales on a dynamic table: keyed by id, each row's scale and bias are
// the row-wise quantization of the trained row (the delta's rows at the checkpoint), and an id
// without a row reads the zero row (scale 0, bias 0).
TEST(InferenceDynamic, RowScalesAreKeyedById) {
  const DynRunSaved run = TrainDynamic(2, SHARDREC_SHARDING_ROW_WISE);
  ASSERT_FALSE(run.ckpt1.empty());
  InferencePtr inf = Open(run.ckpt1, SHARDREC_SERVING_INT8);
  ASSERT_NE(inf, nullptr);
  for (int t = 0; t < 2; ++t) {
    const int64_t dim = run.s.base.tables[static_cast<size_t>(t)].dim;
    RowMap rows;
    Replay(run.d1[t], dim, &rows);
    ASSERT_FALSE(rows.empty());
    std::vector<int64_t> ids;
    for (const auto& [id, row] : rows) ids.push_back(id);
    ids.push_back(kUnknown);
    std::vector<float> scales(ids.size(), -1.0f), biases(ids.size(), -1.0f);
    const char* name = t == 0 ? "t0" : "t1";
    ASSERT_EQ(shardrec_inference_row_scales(inf.get(), name, ids.data(), ids.size(), scales.data(),
                                            biases.data(), nullptr),
              SHARDREC_OK)
        << shardrec_last_error();
    for (size_t i = 0; i + 1 < ids.size(); ++i) {
      const std::vector<float>& row = rows[ids[i]];
      const float lo = *std::min_element(row.begin(), row.end());
      const float hi = *std::max_element(row.begin(), row.end());
      EXPECT_EQ(scales[i], (hi - lo) / 255.0f) << name << " id " << ids[i];
      EXPECT_EQ(biases[i], lo) << name << " id " << ids[i];
    }
    EXPECT_EQ(scales.back(), 0.0f) << name << ": an id without a row";
    EXPECT_EQ(biases.back(), 0.0f) << name << ": an id without a row";
  }
}

}  // namespace
}  // namespace shardrec::testing
