// Helpers of the delta-after-load tests (delta_load_util.h).
#include "tests/capi/inference/delta_load_util.h"

#include <gtest/gtest.h>

namespace shardrec::testing {

Tiny MakeTiny(int64_t capacity) {
  Tiny t;
  shardrec_dynamic_table_config_t d = SHARDREC_DYNAMIC_TABLE_CONFIG_INIT;
  d.eviction = SHARDREC_EVICTION_LRU;
  shardrec_table_config_t table = SHARDREC_TABLE_CONFIG_INIT;
  table.name = "t";
  table.rows = capacity;
  table.dim = kTinyDim;
  table.dynamic = &d;
  t.plan = OneTablePlan(table);
  if (t.plan == nullptr) return t;
  shardrec_embedding_t* c = nullptr;
  EXPECT_EQ(shardrec_embedding_create(&c, t.plan.get(), GroupComm(1, 0), nullptr, nullptr),
            SHARDREC_OK)
      << shardrec_last_error();
  t.coll.reset(c);
  return t;
}

RefBatch SingleIdBags(const std::vector<int64_t>& ids) {
  RefBatch b;
  b.batch_size = static_cast<int64_t>(ids.size());
  b.lengths.assign(ids.size(), 1);
  b.ids = ids;
  return b;
}

void TrainIds(shardrec_embedding_t* c, const std::vector<int64_t>& ids) {
  const RefBatch batch = SingleIdBags(ids);  // the view points into it
  KjtHolder kjt(batch, 1, false);
  std::vector<float> out(ids.size() * kTinyDim);
  ASSERT_EQ(shardrec_embedding_forward(c, kjt.view(), out.data(), out.size(), nullptr), SHARDREC_OK)
      << shardrec_last_error();
  const std::vector<float> grad(out.size(), 0.25f);
  ASSERT_EQ(shardrec_embedding_backward(c, grad.data(), grad.size(), nullptr), SHARDREC_OK)
      << shardrec_last_error();
}

std::vector<float> EvalRows(shardrec_embedding_t* c, const std::vector<int64_t>& ids) {
  const RefBatch batch = SingleIdBags(ids);  // the view points into it
  KjtHolder kjt(batch, 1, false);
  std::vector<float> out(ids.size() * kTinyDim);
  EXPECT_EQ(shardrec_embedding_set_training(c, 0), SHARDREC_OK);
  EXPECT_EQ(shardrec_embedding_forward(c, kjt.view(), out.data(), out.size(), nullptr), SHARDREC_OK)
      << shardrec_last_error();
  EXPECT_EQ(shardrec_embedding_set_training(c, 1), SHARDREC_OK);
  return out;
}

DeltaVectors TakeDelta(shardrec_embedding_t* c, const char* table, int64_t dim) {
  DeltaVectors d;
  size_t n = 0, nt = 0;
  shardrec_embedding_dynamic_delta(c, table, nullptr, nullptr, 0, nullptr, 0, &n, &nt);
  d.ids.resize(n);
  d.rows.resize(n * static_cast<size_t>(dim));
  d.tombstones.resize(nt);
  EXPECT_EQ(shardrec_embedding_dynamic_delta(c, table, d.ids.data(), d.rows.data(), n,
                                             d.tombstones.data(), nt, &n, &nt),
            SHARDREC_OK)
      << shardrec_last_error();
  return d;
}

shardrec_status_t ApplyMerged(shardrec_inference_t* inf, const char* table, const DeltaVectors& d) {
  return shardrec_inference_apply_delta(inf, table, d.ids.data(), d.rows.data(), d.ids.size(),
                                        d.tombstones.data(), d.tombstones.size(), nullptr);
}

}  // namespace shardrec::testing
