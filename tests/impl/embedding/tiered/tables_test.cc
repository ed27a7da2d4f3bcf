// The tiered tables' resolver (impl/embedding/tiered/tables.h) over the in-memory RowStore test
// double: when the write-back queue refuses a batch's evicted dirty rows (the writer failed), the
// forward fails with the writer's error and the rows it would have evicted stay in their slots,
// changed values and all, so nothing is lost.
#include "impl/embedding/tiered/tables.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <vector>

#include "impl/embedding/layout.h"
#include "impl/embedding/param_store.h"
#include "impl/embedding/tiered/cache_layout.h"
#include "impl/sharding/layout.h"
#include "tests/impl/embedding/tiered/memory_row_store.h"

namespace shardrec::embedding::tiered {
namespace {

constexpr int64_t kRows = 64;
constexpr int32_t kDim = 4;
constexpr int64_t kSlots = 8;

// A batch of one run of unpooled ids (the resolver rewrites them into slots).
RoutedBatch Batch(std::vector<int64_t>* ids) {
  RoutedBatch rb;
  rb.shards.resize(1);
  kernels::BagRun run;
  run.rows = ids->data();
  run.num_bags = static_cast<int64_t>(ids->size());
  rb.shards[0].runs.push_back(run);
  rb.shards[0].num_ids = run.num_bags;
  return rb;
}

TEST(TieredTables, AFailedWriteBackKeepsTheRowsItWouldHaveEvictedInTheirSlots) {
  auto plan = std::make_shared<sharding::Plan>();
  plan->features = {{"f", 1.0f}};
  sharding::TableConfig t;
  t.name = "t";
  t.rows = kRows;
  t.dim = kDim;
  t.features = {0};
  t.dtype = DType::kFloat32;
  plan->tables = {t};
  plan->table_plans = {sharding::MakeTableWise(t, 0)};
  Layout layout;
  ASSERT_TRUE(BuildLayout(plan, 0, {optim::OptimizerType::kSgd}, &layout).ok());
  const std::string dir =
      (std::filesystem::temp_directory_path() / "shardrec_tiered_tables_test").string();
  TierConfig tier;
  tier.table = "t";
  tier.dir = dir;
  tier.cache_bytes = kSlots * static_cast<int64_t>(kDim * sizeof(float) + kSlotOverheadBytes);
  std::vector<TieredShard> shards;
  ASSERT_TRUE(ShrinkToCache({tier}, false, &layout, &shards).ok());
  ASSERT_EQ(shards.size(), 1u);
  ASSERT_EQ(shards[0].slots, kSlots);
  ParamStore params;
  ASSERT_TRUE(params.Allocate(&layout, false).ok());
  ASSERT_TRUE(params.Initialise(7, ExecContext::Host(nullptr)).ok());
  MemoryRowStore* store = nullptr;
  TieredTables tables;
  ASSERT_TRUE(tables
                  .Open(&layout, &params, shards, {tier}, 7,
                        [&](const store::StoreOptions& so, std::unique_ptr<store::RowStore>* out) {
                          auto s = std::make_unique<MemoryRowStore>(so.value_bytes);
                          store = s.get();
                          *out = std::move(s);
                          return Status::Ok();
                        })
                  .ok());
  const LocalShard& ls = layout.local[0];

  // A training batch fills the cache with rows 0..7, which a backward then changes.
  std::vector<int64_t> first{0, 1, 2, 3, 4, 5, 6, 7};
  RoutedBatch rb1 = Batch(&first);
  ASSERT_TRUE(tables.Resolve(rb1, nullptr, /*training=*/true).ok());
  auto* w = static_cast<float*>(params.ShardWeights(ls));
  for (int64_t slot : first)
    for (int32_t c = 0; c < kDim; ++c) w[slot * kDim + c] = 100.0f + static_cast<float>(slot);
  std::vector<float> trained(kSlots * kDim);
  ASSERT_TRUE(tables.ReadRows(0, -1, 0, kSlots, trained.data()).ok());

  // The writer fails (a full disk): a row written around the cache is kept queued, and the
  // queue reports the error from then on.
  store->set_fail(true);
  const std::vector<float> row(kDim, 1.5f);
  ASSERT_TRUE(tables.WriteRows(0, -1, 40, 1, row.data()).ok());
  ASSERT_FALSE(tables.Drain().ok());

  // The next batch needs all eight slots: their dirty rows cannot be queued, so it fails and
  // they stay cached, still dirty, with the values the backward gave them.
  std::vector<int64_t> second{8, 9, 10, 11, 12, 13, 14, 15};
  RoutedBatch rb2 = Batch(&second);
  const Status s = tables.Resolve(rb2, nullptr, /*training=*/true);
  EXPECT_EQ(s.code(), Code::kIo) << s.message();
  std::vector<float> after(kSlots * kDim);
  ASSERT_TRUE(tables.ReadRows(0, -1, 0, kSlots, after.data()).ok());
  EXPECT_EQ(after, trained);
  for (size_t i = 0; i < trained.size(); ++i)
    ASSERT_EQ(trained[i], 100.0f + static_cast<float>(first[i / kDim])) << i;
  TierStats stats;
  ASSERT_TRUE(tables.Stats(0, &stats));
  EXPECT_EQ(stats.cache_rows, kSlots);
  EXPECT_EQ(stats.write_backs, 0);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace shardrec::embedding::tiered
