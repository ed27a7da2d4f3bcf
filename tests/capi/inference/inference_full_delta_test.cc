// Full deltas (SHARDREC_DELTA_FULL) through the C API: shardrec_embedding_dynamic_delta_ext
// flags the delta taken after a checkpoint load since the mark (also from the size query) and
// not an ordinary one, a table import's or one after a new mark; an ordinary delta is the same
// with and without the flags and applies alike through both calls; a trainer restarted from a
// checkpoint (create, mark, load, train) brings a serving copy in another state, and a fresh
// one, to its table through shardrec_inference_apply_delta_ext, where the merge of the same
// delta keeps ghosts; unknown flag bits, a full delta of a fixed table and a NULL flags pointer
// are refused and change nothing.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "shardrec/checkpoint.h"
#include "shardrec/inference.h"
#include "tests/capi/inference/delta_load_util.h"
#include "tests/capi/inference/inference_test_util.h"
#include "tests/support/temp_dirs.h"

namespace shardrec::testing {
namespace {

struct FlaggedDelta {
  DeltaVectors d;
  uint32_t flags = 0xffffffffu;
  uint32_t size_query_flags = 0xffffffffu;
};

// shardrec_embedding_dynamic_delta_ext of table "t", sized then filled.
FlaggedDelta TakeDeltaExt(shardrec_embedding_t* c) {
  FlaggedDelta f;
  size_t n = 0, nt = 0;
  const shardrec_status_t sized = shardrec_embedding_dynamic_delta_ext(
      c, "t", nullptr, nullptr, 0, nullptr, 0, &n, &nt, &f.size_query_flags);
  EXPECT_EQ(sized, n + nt == 0 ? SHARDREC_OK : SHARDREC_EINVAL) << shardrec_last_error();
  f.d.ids.resize(n);
  f.d.rows.resize(n * kTinyDim);
  f.d.tombstones.resize(nt);
  EXPECT_EQ(shardrec_embedding_dynamic_delta_ext(c, "t", f.d.ids.data(), f.d.rows.data(), n,
                                                 f.d.tombstones.data(), nt, &n, &nt, &f.flags),
            SHARDREC_OK)
      << shardrec_last_error();
  EXPECT_EQ(f.flags, f.size_query_flags);
  return f;
}

shardrec_status_t ApplyExt(shardrec_inference_t* inf, const DeltaVectors& d, uint32_t flags) {
  return shardrec_inference_apply_delta_ext(inf, "t", d.ids.data(), d.rows.data(), d.ids.size(),
                                            d.tombstones.data(), d.tombstones.size(), flags,
                                            nullptr);
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

int64_t ServedRows(shardrec_inference_t* inf) {
  int64_t rows = -1;
  EXPECT_EQ(shardrec_inference_table_info(inf, 0, nullptr, &rows, nullptr, nullptr), SHARDREC_OK);
  return rows;
}

uint64_t Version(shardrec_inference_t* inf) {
  uint64_t v = 0;
  EXPECT_EQ(shardrec_inference_version(inf, &v), SHARDREC_OK);
  return v;
}

TEST(InferenceFullDelta, FlagFollowsLoadsAndMarks) {
  Tiny t = MakeTiny(4);
  ASSERT_NE(t.coll, nullptr);
  shardrec_embedding_t* c = t.coll.get();
  ASSERT_EQ(shardrec_embedding_dynamic_mark(c, "t"), SHARDREC_OK);
  TrainIds(c, {1, 2});
  FlaggedDelta f = TakeDeltaExt(c);
  EXPECT_EQ(f.flags, 0u);
  EXPECT_EQ(f.d.ids, (std::vector<int64_t>{1, 2}));

  const std::string g = FreshDir("flag");
  ASSERT_EQ(shardrec_checkpoint_save(c, g.c_str(), nullptr), SHARDREC_OK) << shardrec_last_error();
  ASSERT_EQ(shardrec_checkpoint_load(c, g.c_str(), nullptr), SHARDREC_OK) << shardrec_last_error();
  f = TakeDeltaExt(c);
  EXPECT_EQ(f.flags, static_cast<uint32_t>(SHARDREC_DELTA_FULL));
  EXPECT_EQ(f.d.ids, (std::vector<int64_t>{1, 2}));
  EXPECT_TRUE(f.d.tombstones.empty());  // every id held before has a row again
  TrainIds(c, {3});                     // the flag stays until the next mark
  f = TakeDeltaExt(c);
  EXPECT_EQ(f.flags, static_cast<uint32_t>(SHARDREC_DELTA_FULL));
  EXPECT_EQ(f.d.ids, (std::vector<int64_t>{1, 2, 3}));

  ASSERT_EQ(shardrec_embedding_dynamic_mark(c, "t"), SHARDREC_OK);
  f = TakeDeltaExt(c);
  EXPECT_EQ(f.flags, 0u);
  EXPECT_TRUE(f.d.ids.empty() && f.d.tombstones.empty());

  // An import removes nothing: its delta is an ordinary one, every row marked changed.
  const std::string exported = FreshDir("flagexport") + "/t.safetensors";
  ASSERT_EQ(shardrec_checkpoint_export_table(c, "t", exported.c_str(), 0), SHARDREC_OK)
      << shardrec_last_error();
  ASSERT_EQ(shardrec_checkpoint_import_table(c, "t", exported.c_str(), 0), SHARDREC_OK)
      << shardrec_last_error();
  f = TakeDeltaExt(c);
  EXPECT_EQ(f.flags, 0u);
  EXPECT_EQ(f.d.ids, (std::vector<int64_t>{1, 2, 3}));
  EXPECT_TRUE(f.d.tombstones.empty());

  size_t n = 0, nt = 0;
  EXPECT_EQ(shardrec_embedding_dynamic_delta_ext(c, "t", nullptr, nullptr, 0, nullptr, 0, &n, &nt,
                                                 nullptr),
            SHARDREC_EINVAL);
}

// An ordinary delta: the same rows and tombstones with and without the flags, and the same
// served result through either apply call, equal to training.
TEST(InferenceFullDelta, OrdinaryDeltaIsUnchanged) {
  Tiny t = MakeTiny(3);
  ASSERT_NE(t.coll, nullptr);
  shardrec_embedding_t* c = t.coll.get();
  TrainIds(c, {1, 2, 3});
  const std::string g0 = FreshDir("ordinary");
  ASSERT_EQ(shardrec_checkpoint_save(c, g0.c_str(), nullptr), SHARDREC_OK) << shardrec_last_error();
  ASSERT_EQ(shardrec_embedding_dynamic_mark(c, "t"), SHARDREC_OK);
  TrainIds(c, {4, 3});  // 1 leaves
  const DeltaVectors plain = TakeDelta(c, "t", kTinyDim);
  const FlaggedDelta f = TakeDeltaExt(c);
  EXPECT_EQ(f.flags, 0u);
  EXPECT_EQ(f.d.ids, plain.ids);
  EXPECT_TRUE(SameBits(f.d.rows, plain.rows));
  EXPECT_EQ(f.d.tombstones, (std::vector<int64_t>{1}));
  EXPECT_EQ(f.d.tombstones, plain.tombstones);

  InferencePtr a = Open(g0, SHARDREC_SERVING_AS_TRAINED);
  InferencePtr b = Open(g0, SHARDREC_SERVING_AS_TRAINED);
  ASSERT_TRUE(a != nullptr && b != nullptr);
  ASSERT_EQ(ApplyMerged(a.get(), "t", plain), SHARDREC_OK) << shardrec_last_error();
  ASSERT_EQ(ApplyExt(b.get(), f.d, f.flags), SHARDREC_OK) << shardrec_last_error();
  const std::vector<int64_t> ids = {1, 2, 3, 4};
  const std::vector<float> trained = EvalRows(c, ids);
  EXPECT_TRUE(SameBits(Lookup(a.get(), SingleIdBags(ids), 1), trained));
  EXPECT_TRUE(SameBits(Lookup(b.get(), SingleIdBags(ids), 1), trained));
  EXPECT_EQ(ServedRows(a.get()), 3);
  EXPECT_EQ(ServedRows(b.get()), 3);
}

// A trainer that followed {1,2,3} -> {3,4,5} restarts from its checkpoint g1: a new collection,
// a mark, the load, a step that evicts 3. Its mark is younger than every serving copy, so only
// the flag can bring a copy opened at g0 (or anywhere else) to its table.
TEST(InferenceFullDelta, RestartedTrainerBringsAnyCopyToItsTable) {
  const std::string g0 = FreshDir("restart0"), g1 = FreshDir("restart1");
  {
    Tiny before = MakeTiny(3);
    ASSERT_NE(before.coll, nullptr);
    TrainIds(before.coll.get(), {1, 2, 3});
    ASSERT_EQ(shardrec_checkpoint_save(before.coll.get(), g0.c_str(), nullptr), SHARDREC_OK);
    TrainIds(before.coll.get(), {4, 5});
    ASSERT_EQ(shardrec_checkpoint_save(before.coll.get(), g1.c_str(), nullptr), SHARDREC_OK);
  }
  Tiny t = MakeTiny(3);
  ASSERT_NE(t.coll, nullptr);
  shardrec_embedding_t* c = t.coll.get();
  ASSERT_EQ(shardrec_embedding_dynamic_mark(c, "t"), SHARDREC_OK);
  ASSERT_EQ(shardrec_checkpoint_load(c, g1.c_str(), nullptr), SHARDREC_OK) << shardrec_last_error();
  TrainIds(c, {6, 4, 5});  // 3 leaves
  const FlaggedDelta f = TakeDeltaExt(c);
  EXPECT_EQ(f.flags, static_cast<uint32_t>(SHARDREC_DELTA_FULL));
  EXPECT_EQ(f.d.ids, (std::vector<int64_t>{4, 5, 6}));
  EXPECT_EQ(f.d.tombstones, (std::vector<int64_t>{3}));

  const std::vector<int64_t> ids = {1, 2, 3, 4, 5, 6};
  const std::vector<float> trained = EvalRows(c, ids);
  for (const std::string& from : {g0, g1}) {
    InferencePtr copy = Open(from, SHARDREC_SERVING_AS_TRAINED);
    ASSERT_NE(copy, nullptr);
    ASSERT_EQ(ApplyExt(copy.get(), f.d, f.flags), SHARDREC_OK) << shardrec_last_error();
    EXPECT_TRUE(SameBits(Lookup(copy.get(), SingleIdBags(ids), 1), trained)) << from;
    EXPECT_EQ(ServedRows(copy.get()), 3) << from;
  }
  // The same delta merged into the copy at g0 keeps 1 and 2, which no tombstone names: the
  // trainer never held them.
  InferencePtr merged = Open(g0, SHARDREC_SERVING_AS_TRAINED);
  ASSERT_NE(merged, nullptr);
  ASSERT_EQ(ApplyExt(merged.get(), f.d, 0), SHARDREC_OK) << shardrec_last_error();
  EXPECT_EQ(ServedRows(merged.get()), 5);
  EXPECT_FALSE(SameBits(Lookup(merged.get(), SingleIdBags(ids), 1), trained));
}

TEST(InferenceFullDelta, RefusalsChangeNothing) {
  Tiny t = MakeTiny(3);
  ASSERT_NE(t.coll, nullptr);
  TrainIds(t.coll.get(), {1, 2});
  const std::string g = FreshDir("refusal");
  ASSERT_EQ(shardrec_checkpoint_save(t.coll.get(), g.c_str(), nullptr), SHARDREC_OK);
  InferencePtr inf = Open(g, SHARDREC_SERVING_AS_TRAINED);
  ASSERT_NE(inf, nullptr);
  DeltaVectors d;
  d.ids = {7};
  d.rows.assign(kTinyDim, 1.0f);
  EXPECT_EQ(ApplyExt(inf.get(), d, 2u), SHARDREC_EINVAL);
  EXPECT_NE(std::string(shardrec_last_error()).find("unknown flag"), std::string::npos)
      << shardrec_last_error();
  EXPECT_EQ(ApplyExt(inf.get(), d, SHARDREC_DELTA_FULL | 4u), SHARDREC_EINVAL);
  DeltaVectors both = d;
  both.tombstones = {7};  // upserted and removed: refused in a full delta too
  EXPECT_EQ(ApplyExt(inf.get(), both, SHARDREC_DELTA_FULL), SHARDREC_EINVAL);
  // Counts whose bytes would wrap around (2^59 rows of 8 bytes are 2^62 bytes of fp32 input;
  // 2^62 rows wrap the byte count to 0) are refused before anything is read, not encoded
  // into a buffer sized by the wrapped count.
  for (const size_t rows : {size_t{1} << 59, size_t{1} << 62, SIZE_MAX}) {
    uint64_t version = 0;
    EXPECT_EQ(shardrec_inference_apply_delta(inf.get(), "t", d.ids.data(), d.rows.data(), rows,
                                             nullptr, 0, &version),
              SHARDREC_EINVAL)
        << rows;
    EXPECT_NE(std::string(shardrec_last_error()).find("more than any buffer holds"),
              std::string::npos)
        << shardrec_last_error();
    // As many tombstones, where their bytes wrap too (past 2^60; fewer would be an allocation
    // no host makes, which sanitizers abort on rather than report).
    if (rows > (size_t{1} << 60)) {
      EXPECT_EQ(shardrec_inference_apply_delta(inf.get(), "t", nullptr, nullptr, 0, d.ids.data(),
                                               rows, &version),
                SHARDREC_EINVAL)
          << rows;
    }
  }
  EXPECT_EQ(Version(inf.get()), 1u);
  EXPECT_EQ(ServedRows(inf.get()), 2);
  // A full delta with no rows empties the table.
  EXPECT_EQ(ApplyExt(inf.get(), DeltaVectors{}, SHARDREC_DELTA_FULL), SHARDREC_OK);
  EXPECT_EQ(ServedRows(inf.get()), 0);
  EXPECT_EQ(Version(inf.get()), 2u);

  // A fixed table keeps all its rows: a full delta is refused, an ordinary one applies.
  shardrec_table_config_t fixed = SHARDREC_TABLE_CONFIG_INIT;
  fixed.name = "t";
  fixed.rows = 4;
  fixed.dim = kTinyDim;
  PlanPtr plan = OneTablePlan(fixed);
  ASSERT_NE(plan, nullptr);
  shardrec_embedding_t* raw = nullptr;
  ASSERT_EQ(shardrec_embedding_create(&raw, plan.get(), GroupComm(1, 0), nullptr, nullptr),
            SHARDREC_OK);
  CollPtr coll(raw);
  const std::string gf = FreshDir("refusalfixed");
  ASSERT_EQ(shardrec_checkpoint_save(raw, gf.c_str(), nullptr), SHARDREC_OK);
  InferencePtr served = Open(gf, SHARDREC_SERVING_AS_TRAINED);
  ASSERT_NE(served, nullptr);
  d.ids = {2};
  EXPECT_EQ(ApplyExt(served.get(), d, SHARDREC_DELTA_FULL), SHARDREC_EINVAL);
  EXPECT_EQ(Version(served.get()), 1u);
  EXPECT_EQ(ApplyExt(served.get(), d, 0), SHARDREC_OK) << shardrec_last_error();
  EXPECT_EQ(Version(served.get()), 2u);
}

}  // namespace
}  // namespace shardrec::testing
