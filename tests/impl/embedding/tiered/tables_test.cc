// The tiered tables' resolver (impl/embedding/tiered/tables.h) over the in-memory RowStore test
// double: when the write-back queue refuses a batch's evicted dirty rows (the writer failed), the
// forward fails with the writer's error and the rows it would have evicted stay in their slots,
// changed values and all, so nothing is lost. The prefetch thread installs the next batch's
// misses before its forward, and never in a slot of the batch a backward may be training or of
// a row the next batch hits.
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

// One SGD table of kRows x kDim on one rank, tiered with a cache of kSlots rows over a
// MemoryRowStore.
struct Rig {
  std::shared_ptr<sharding::Plan> plan = std::make_shared<sharding::Plan>();
  Layout layout;
  ParamStore params;
  MemoryRowStore* store = nullptr;
  TieredTables tables;
  std::string dir;

  void Open(const std::string& name) {
    plan->features = {{"f", 1.0f}};
    sharding::TableConfig t;
    t.name = "t";
    t.rows = kRows;
    t.dim = kDim;
    t.features = {0};
    t.dtype = DType::kFloat32;
    plan->tables = {t};
    plan->table_plans = {sharding::MakeTableWise(t, 0)};
    ASSERT_TRUE(BuildLayout(plan, 0, {optim::OptimizerType::kSgd}, &layout).ok());
    dir = (std::filesystem::temp_directory_path() / name).string();
    TierConfig tier;
    tier.table = "t";
    tier.dir = dir;
    tier.cache_bytes = kSlots * static_cast<int64_t>(kDim * sizeof(float) + kSlotOverheadBytes);
    std::vector<TieredShard> shards;
    ASSERT_TRUE(ShrinkToCache({tier}, false, &layout, &shards).ok());
    ASSERT_EQ(shards.size(), 1u);
    ASSERT_EQ(shards[0].slots, kSlots);
    ASSERT_TRUE(params.Allocate(&layout, false).ok());
    ASSERT_TRUE(params.Initialise(7, ExecContext::Host(nullptr)).ok());
    ASSERT_TRUE(
        tables
            .Open(&layout, &params, shards, {tier}, 7,
                  [&](const store::StoreOptions& so, std::unique_ptr<store::RowStore>* out) {
                    auto s = std::make_unique<MemoryRowStore>(so.value_bytes);
                    store = s.get();
                    *out = std::move(s);
                    return Status::Ok();
                  })
            .ok());
  }
  ~Rig() {
    if (!dir.empty()) std::filesystem::remove_all(dir);
  }
};

TEST(TieredTables, AFailedWriteBackKeepsTheRowsItWouldHaveEvictedInTheirSlots) {
  Rig rig;
  ASSERT_NO_FATAL_FAILURE(rig.Open("shardrec_tiered_tables_test"));
  ParamStore& params = rig.params;
  TieredTables& tables = rig.tables;
  MemoryRowStore* store = rig.store;
  const LocalShard& ls = rig.layout.local[0];

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
}

// The ids a resolver turned into slots: each slot's weights.
std::vector<float> SlotRows(ParamStore& params, const LocalShard& ls,
                            const std::vector<int64_t>& slots) {
  const auto* w = static_cast<const float*>(params.ShardWeights(ls));
  std::vector<float> out;
  for (int64_t slot : slots) out.insert(out.end(), w + slot * kDim, w + (slot + 1) * kDim);
  return out;
}

// The in-memory table's initial weights of `rows`.
std::vector<float> InitialRows(ParamStore& params, const LocalShard& ls,
                               const std::vector<int64_t>& rows) {
  std::vector<float> out(rows.size() * kDim);
  for (size_t i = 0; i < rows.size(); ++i)
    params.InitialValues(ls, static_cast<uint64_t>(ls.row_offset + rows[i]), 7, &out[i * kDim]);
  return out;
}

TEST(TieredTables, ThePrefetchThreadInstallsTheNextBatchsMissesBeforeItsForward) {
  Rig rig;
  ASSERT_NO_FATAL_FAILURE(rig.Open("shardrec_tiered_tables_install_test"));
  const LocalShard& ls = rig.layout.local[0];
  std::vector<int64_t> first{0, 1};
  RoutedBatch rb1 = Batch(&first);
  ASSERT_TRUE(rig.tables.Resolve(rb1, nullptr, /*training=*/true).ok());
  TierStats st;
  ASSERT_TRUE(rig.tables.Stats(0, &st));
  EXPECT_EQ(st.cache_rows, 2);

  std::vector<int64_t> next{0, 5, 6, 5};
  RoutedBatch rb2 = Batch(&next);
  rig.tables.Prefetch(rb2);
  // An accessor waits for the prefetch job: by then rows 5 and 6 are cached, before any forward.
  std::vector<float> got(2 * kDim);
  ASSERT_TRUE(rig.tables.ReadRows(0, -1, 5, 2, got.data()).ok());
  EXPECT_EQ(got, InitialRows(rig.params, ls, {5, 6}));
  ASSERT_TRUE(rig.tables.Stats(0, &st));
  EXPECT_EQ(st.cache_rows, 4);
  EXPECT_EQ(st.initialised, 4);  // rows 0 and 1 by the first forward, 5 and 6 by the prefetch

  // The forward finds them cached, with the in-memory table's initial values.
  ASSERT_TRUE(rig.tables.Resolve(rb2, nullptr, /*training=*/false).ok());
  EXPECT_EQ(SlotRows(rig.params, ls, next), InitialRows(rig.params, ls, {0, 5, 6, 5}));
  ASSERT_TRUE(rig.tables.Stats(0, &st));
  EXPECT_EQ(st.cache_rows, 4);
  EXPECT_EQ(st.disk_reads + st.queue_reads, 0);
}

TEST(TieredTables, ThePrefetchSparesTheTrainedBatchAndTheNextBatchsHits) {
  Rig rig;
  ASSERT_NO_FATAL_FAILURE(rig.Open("shardrec_tiered_tables_spare_test"));
  ParamStore& params = rig.params;
  TieredTables& tables = rig.tables;
  const LocalShard& ls = rig.layout.local[0];
  // Rows 0..3 in slots 0..3, rows 10..13 in slots 4..7, then rows 0..3 again: the batch a
  // backward trains, in the slots the CLOCK hand reaches first.
  std::vector<int64_t> a{0, 1, 2, 3}, b{10, 11, 12, 13}, c{0, 1, 2, 3};
  RoutedBatch rba = Batch(&a), rbb = Batch(&b), rbc = Batch(&c);
  ASSERT_TRUE(tables.Resolve(rba, nullptr, true).ok());
  ASSERT_TRUE(tables.Resolve(rbb, nullptr, true).ok());
  ASSERT_TRUE(tables.Resolve(rbc, nullptr, true).ok());
  TierStats before;
  ASSERT_TRUE(tables.Stats(0, &before));

  // The next batch hits row 10 and misses rows 20 and 21 (the cache is full) while the backward
  // of rows 0..3 writes their slots: the prefetch thread must evict rows 11..13 only.
  std::vector<int64_t> next{10, 20, 21};
  RoutedBatch rbn = Batch(&next);
  tables.Prefetch(rbn);
  auto* w = static_cast<float*>(params.ShardWeights(ls));
  for (size_t i = 0; i < c.size(); ++i)
    for (int32_t k = 0; k < kDim; ++k)
      w[c[i] * kDim + k] = 300.0f + static_cast<float>(a[i]) + 0.25f * static_cast<float>(k);
  ASSERT_TRUE(tables.Resolve(rbn, nullptr, /*training=*/false).ok());

  std::vector<float> trained(4 * kDim);
  ASSERT_TRUE(tables.ReadRows(0, -1, 0, 4, trained.data()).ok());
  for (int64_t r = 0; r < 4; ++r)
    for (int32_t k = 0; k < kDim; ++k)
      EXPECT_EQ(trained[r * kDim + k], 300.0f + static_cast<float>(r) + 0.25f * k) << r;
  EXPECT_EQ(SlotRows(params, ls, next), InitialRows(params, ls, {10, 20, 21}));
  EXPECT_EQ(next[0], b[0]);  // row 10 kept its slot
  for (int64_t slot : {next[1], next[2]}) {
    EXPECT_GE(slot, 4) << "a slot of the trained batch was taken";
    EXPECT_NE(slot, b[0]);
  }
  TierStats after;
  ASSERT_TRUE(tables.Stats(0, &after));
  EXPECT_EQ(after.hits - before.hits, 1);
  EXPECT_EQ(after.misses - before.misses, 2);
  EXPECT_EQ(after.prefetched - before.prefetched, 2);
  EXPECT_EQ(after.write_backs - before.write_backs, 2);  // two of rows 11..13, dirty
}

TEST(TieredTables, APrefetchWhoseMissesDoNotAllFitEvictsNothing) {
  Rig rig;
  ASSERT_NO_FATAL_FAILURE(rig.Open("shardrec_tiered_tables_nofit_test"));
  TieredTables& tables = rig.tables;
  // Rows 10..13 (dirty) in slots 0..3, then rows 0..3: the batch a backward trains.
  std::vector<int64_t> a{10, 11, 12, 13}, b{0, 1, 2, 3};
  RoutedBatch rba = Batch(&a), rbb = Batch(&b);
  ASSERT_TRUE(tables.Resolve(rba, nullptr, true).ok());
  ASSERT_TRUE(tables.Resolve(rbb, nullptr, true).ok());
  TierStats before;
  ASSERT_TRUE(tables.Stats(0, &before));

  // Nine distinct rows: four could evict rows 10..13, the fifth finds no victim. The prefetch
  // evicts none of them, and the forward refuses the batch.
  std::vector<int64_t> next{20, 21, 22, 23, 24, 25, 26, 27, 28};
  RoutedBatch rbn = Batch(&next);
  tables.Prefetch(rbn);
  EXPECT_EQ(tables.Resolve(rbn, nullptr, false).code(), Code::kInvalidArgument);
  TierStats after;
  ASSERT_TRUE(tables.Stats(0, &after));
  EXPECT_EQ(after.write_backs, before.write_backs);
  EXPECT_EQ(after.cache_rows, 8);
  std::vector<int64_t> again{10, 11, 12, 13};
  RoutedBatch rbr = Batch(&again);
  ASSERT_TRUE(tables.Resolve(rbr, nullptr, false).ok());
  ASSERT_TRUE(tables.Stats(0, &before));
  EXPECT_EQ(before.hits - after.hits, 4) << "rows 10..13 left the cache";
}

// The forward marks a training batch's hits dirty in the pass that finds them; a forward refused
// after that pass clears those marks again, so its hits leave the cache later without a
// write-back, as they would had the forward never run.
TEST(TieredTables, ARefusedTrainingForwardLeavesItsHitsClean) {
  Rig rig;
  ASSERT_NO_FATAL_FAILURE(rig.Open("shardrec_tiered_tables_refused_clean_test"));
  TieredTables& tables = rig.tables;
  std::vector<int64_t> a{0, 1, 2, 3};
  RoutedBatch rba = Batch(&a);
  ASSERT_TRUE(tables.Resolve(rba, nullptr, /*training=*/false).ok());
  TierStats before;
  ASSERT_TRUE(tables.Stats(0, &before));

  // Four hits and nine misses: more than the eight slots, refused.
  std::vector<int64_t> big{0, 1, 2, 3, 20, 21, 22, 23, 24, 25, 26, 27, 28};
  RoutedBatch rbbig = Batch(&big);
  EXPECT_EQ(tables.Resolve(rbbig, nullptr, /*training=*/true).code(), Code::kInvalidArgument);

  // Eight other rows take every slot: rows 0..3 leave it, clean.
  std::vector<int64_t> other{30, 31, 32, 33, 34, 35, 36, 37};
  RoutedBatch rbo = Batch(&other);
  ASSERT_TRUE(tables.Resolve(rbo, nullptr, /*training=*/false).ok());
  TierStats after;
  ASSERT_TRUE(tables.Stats(0, &after));
  EXPECT_EQ(after.misses - before.misses, 8);
  EXPECT_EQ(after.write_backs, before.write_backs) << "the refused forward left its hits dirty";
}

}  // namespace
}  // namespace shardrec::embedding::tiered
