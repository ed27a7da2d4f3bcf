// FP8 tables beside a tiered table keep their own rows: the tier shrinks its table's arenas to
// the cache and lays every local shard out again, FP8 rows (scale and codes, in their own byte
// arena) included. Each FP8 table's weights read back, and look up, as set, whichever table was
// written last, and so do they after a checkpoint load into such a collection.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "shardrec/checkpoint.h"
#include "shardrec/shardrec.h"
#include "tests/capi/embedding/embedding_test_util.h"
#include "tests/support/temp_dirs.h"

namespace shardrec::testing {
namespace {

// World 1: "a" (38 x 8) and "b" (27 x 3) store FP8 E4M3 rows, "c" (fp32, 35 x 1) may be tiered.
const char* kPlan = R"({"format": "shardrec.plan", "version": 1, "world_size": 1,
  "ranks_per_node": 1,
  "features": [{"name": "fa", "pooling_factor": 1}, {"name": "fb", "pooling_factor": 1},
               {"name": "fc", "pooling_factor": 1}],
  "tables": [
    {"name": "a", "rows": 38, "dim": 8, "pooling": "sum", "dtype": "fp8_e4m3", "features": [0],
     "init": {"kind": "default", "low": 0, "high": 0},
     "optimizer": {"type": "sgd", "learning_rate": 0.1, "eps": 1e-8, "beta1": 0.9, "beta2": 0.999, "weight_decay": 0, "weight_decay_mode": 0, "stochastic_rounding": 0},
     "sharding": "table_wise", "shards": [{"row_offset": 0, "rows": 38, "col_offset": 0,
     "cols": 8, "rank": 0}]},
    {"name": "b", "rows": 27, "dim": 3, "pooling": "sum", "dtype": "fp8_e4m3", "features": [1],
     "init": {"kind": "default", "low": 0, "high": 0},
     "optimizer": {"type": "sgd", "learning_rate": 0.1, "eps": 1e-8, "beta1": 0.9, "beta2": 0.999, "weight_decay": 0, "weight_decay_mode": 0, "stochastic_rounding": 0},
     "sharding": "table_wise", "shards": [{"row_offset": 0, "rows": 27, "col_offset": 0,
     "cols": 3, "rank": 0}]},
    {"name": "c", "rows": 35, "dim": 1, "pooling": "sum", "dtype": "float32", "features": [2],
     "init": {"kind": "default", "low": 0, "high": 0},
     "optimizer": {"type": "sgd", "learning_rate": 0.1, "eps": 1e-8, "beta1": 0.9, "beta2": 0.999, "weight_decay": 0, "weight_decay_mode": 0, "stochastic_rounding": 0},
     "sharding": "table_wise", "shards": [{"row_offset": 0, "rows": 35, "col_offset": 0,
     "cols": 1, "rank": 0}]}]})";

// Small integers: every row encodes exactly in E4M3 (scale 2^-7 for a largest magnitude of 3).
std::vector<float> Rows(int64_t rows, int64_t dim, int64_t salt) {
  std::vector<float> w(static_cast<size_t>(rows * dim));
  for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>((i * 5 + salt) % 7) - 3.0f;
  return w;
}

CollPtr Create(const shardrec_plan_t* plan, const std::string& tier_dir) {
  shardrec_embedding_options_t o;
  EXPECT_EQ(shardrec_embedding_options_init(&o, SHARDREC_EMBEDDING_OPTIONS_VERSION), SHARDREC_OK);
  shardrec_table_tier_t tier;
  EXPECT_EQ(shardrec_table_tier_init(&tier, SHARDREC_TABLE_TIER_VERSION), SHARDREC_OK);
  tier.table = "c";
  tier.dir = tier_dir.c_str();
  tier.cache_bytes = 1 << 20;
  if (!tier_dir.empty()) {
    o.tiers = &tier;
    o.num_tiers = 1;
  }
  shardrec_embedding_t* c = nullptr;
  EXPECT_EQ(shardrec_embedding_create(&c, plan, GroupComm(1, 0), nullptr, &o), SHARDREC_OK)
      << shardrec_last_error();
  return CollPtr(c);
}

std::vector<float> Get(shardrec_embedding_t* c, const char* table, size_t n) {
  std::vector<float> w(n);
  EXPECT_EQ(shardrec_embedding_get_weights(c, table, w.data(), n), SHARDREC_OK)
      << shardrec_last_error();
  return w;
}

// Row r of each table as a bag of one id per feature: the pooled output is the rows themselves.
void ExpectLookup(shardrec_embedding_t* c, int64_t row, const std::vector<float>& a,
                  const std::vector<float>& b) {
  const int32_t lengths[] = {1, 1, 0};
  const int64_t ids[] = {row, row % 27};
  shardrec_kjt_view_t k;
  std::memset(&k, 0, sizeof(k));
  k.batch_size = 1;
  k.num_features = 3;
  k.lengths = lengths;
  k.num_lengths = 3;
  k.values = ids;
  k.values_dtype = SHARDREC_DTYPE_INT64;
  k.num_values = 2;
  std::vector<float> out(12);
  ASSERT_EQ(shardrec_embedding_forward(c, &k, out.data(), out.size(), nullptr), SHARDREC_OK)
      << shardrec_last_error();
  for (int j = 0; j < 8; ++j) EXPECT_EQ(out[j], a[row * 8 + j]) << "a row " << row;
  for (int j = 0; j < 3; ++j) EXPECT_EQ(out[8 + j], b[(row % 27) * 3 + j]) << "b row " << row;
}

TEST(TieredFp8Neighbour, Fp8TablesKeepTheirRowsBesideATieredTable) {
  PlanPtr plan;
  {
    shardrec_plan_t* p = nullptr;
    ASSERT_EQ(shardrec_plan_from_json(&p, kPlan, std::strlen(kPlan)), SHARDREC_OK)
        << shardrec_last_error();
    plan.reset(p);
  }
  const std::string dir = FreshDir("fp8_neighbour");
  const std::vector<float> a = Rows(38, 8, 1), b = Rows(27, 3, 4), c = Rows(35, 1, 2);
  const std::string ckpt = dir + "/ckpt";
  {
    CollPtr mem = Create(plan.get(), "");
    ASSERT_NE(mem, nullptr);
    ASSERT_EQ(shardrec_embedding_set_weights(mem.get(), "a", a.data(), a.size()), SHARDREC_OK);
    ASSERT_EQ(shardrec_embedding_set_weights(mem.get(), "b", b.data(), b.size()), SHARDREC_OK);
    ASSERT_EQ(shardrec_embedding_set_weights(mem.get(), "c", c.data(), c.size()), SHARDREC_OK);
    ASSERT_EQ(shardrec_checkpoint_save(mem.get(), ckpt.c_str(), nullptr), SHARDREC_OK)
        << shardrec_last_error();
  }
  // Written in either order, neither FP8 table overwrites the other's rows.
  for (int order = 0; order < 2; ++order) {
    SCOPED_TRACE(order == 0 ? "a then b" : "b then a");
    CollPtr coll = Create(plan.get(), dir + "/tier" + std::to_string(order));
    ASSERT_NE(coll, nullptr);
    for (int k = 0; k < 2; ++k) {
      const bool write_a = (k == 0) == (order == 0);
      ASSERT_EQ(shardrec_embedding_set_weights(coll.get(), write_a ? "a" : "b",
                                               write_a ? a.data() : b.data(),
                                               write_a ? a.size() : b.size()),
                SHARDREC_OK);
    }
    EXPECT_EQ(Get(coll.get(), "a", a.size()), a);
    EXPECT_EQ(Get(coll.get(), "b", b.size()), b);
    for (int64_t r = 0; r < 38; r += 5) ExpectLookup(coll.get(), r, a, b);
  }
  // The same through a checkpoint saved in memory and loaded beside the tier.
  CollPtr loaded = Create(plan.get(), dir + "/tier_load");
  ASSERT_NE(loaded, nullptr);
  ASSERT_EQ(shardrec_checkpoint_load(loaded.get(), ckpt.c_str(), nullptr), SHARDREC_OK)
      << shardrec_last_error();
  EXPECT_EQ(Get(loaded.get(), "a", a.size()), a);
  EXPECT_EQ(Get(loaded.get(), "b", b.size()), b);
  EXPECT_EQ(Get(loaded.get(), "c", c.size()), c);
  for (int64_t r = 0; r < 38; r += 5) ExpectLookup(loaded.get(), r, a, b);
}

}  // namespace
}  // namespace shardrec::testing
