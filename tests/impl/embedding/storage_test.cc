// The storage seam (storage/table_storage.h) of a host collection: a keyed (dynamic) shard's
// metadata exported in bounded chunks is the same as exported whole, a fixed shard has none, and
// an import replaces the rows that the next export and the statistics report.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "impl/comm/factory.h"
#include "impl/embedding/collection.h"
#include "impl/embedding/dynamic/tables.h"
#include "impl/embedding/storage/table_storage.h"
#include "impl/sharding/layout.h"
#include "tests/impl/sharding/test_plans.h"

namespace shardrec::embedding {
namespace {

using sharding::testing::Table;

// One rank: "fixed" (rows 0..15) and "keyed" (a dynamic table of 32 slots), after `steps` training
// steps of one batch of 4 samples, 3 ids each, the keyed ids 1000 + 37 * k.
std::unique_ptr<EmbeddingCollection> Trained(int steps) {
  auto plan = std::make_shared<sharding::Plan>();
  plan->features = {{"f", 3.0f}, {"k", 3.0f}};
  plan->tables = {Table("fixed", 16, 4, {0}), Table("keyed", 32, 4, {1})};
  plan->tables[1].dynamic.enabled = true;
  for (const auto& t : plan->tables) plan->table_plans.push_back(sharding::MakeTableWise(t, 0));
  std::vector<std::unique_ptr<comm::Communicator>> comms;
  EXPECT_TRUE(comm::CreateLocalGroup(1, comm::CommOptions(), &comms).ok());
  optim::OptimizerConfig opt;
  opt.type = optim::OptimizerType::kAdagrad;
  std::unique_ptr<EmbeddingCollection> coll;
  const Status s =
      EmbeddingCollection::Create(plan, std::move(comms[0]), &opt, CollectionOptions(), &coll);
  EXPECT_TRUE(s.ok()) << s.ToString();
  if (!s.ok()) return nullptr;
  constexpr int64_t kBatch = 4, kLen = 3;
  std::vector<int32_t> lengths(2 * kBatch, kLen);
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < kBatch * kLen; ++i) ids.push_back(i % 16);
  for (int64_t i = 0; i < kBatch * kLen; ++i) ids.push_back(1000 + 37 * (i % 9));
  Batch batch;
  batch.batch_size = kBatch;
  batch.num_features = 2;
  batch.lengths = lengths.data();
  batch.num_lengths = lengths.size();
  batch.values = ids.data();
  batch.num_values = ids.size();
  std::vector<float> out(kBatch * 8), grad(out.size(), 0.5f);
  for (int s = 0; s < steps; ++s) {
    EXPECT_TRUE(coll->Forward(batch, out.data(), out.size()).ok());
    EXPECT_TRUE(coll->Backward(grad.data(), grad.size()).ok());
  }
  return coll;
}

int32_t LocalOf(const TableStorage& storage, int32_t table) {
  const auto& local = storage.layout().local;
  for (size_t i = 0; i < local.size(); ++i)
    if (local[i].table == table) return static_cast<int32_t>(i);
  return -1;
}

TEST(TableStorage, KeyedRowsExportInChunksAsWhole) {
  auto coll = Trained(2);
  ASSERT_NE(coll, nullptr);
  TableStorage& storage = coll->storage();
  EXPECT_EQ(&storage, &coll->storage());  // one per collection
  KeyedRows rows;
  EXPECT_FALSE(storage.ExportKeyedRows(LocalOf(storage, 0), 0, INT64_MAX, &rows));
  const int32_t keyed = LocalOf(storage, 1);
  KeyedRows whole;
  ASSERT_TRUE(storage.ExportKeyedRows(keyed, 0, INT64_MAX, &whole));
  EXPECT_EQ(whole.size, 9);  // the 9 distinct keyed ids
  EXPECT_EQ(whole.slots, 32);
  EXPECT_EQ(whole.forwards, 2);
  ASSERT_EQ(whole.ids.size(), 9u);
  std::vector<int64_t> sorted = whole.ids;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t k = 0; k < 9; ++k) EXPECT_EQ(sorted[static_cast<size_t>(k)], 1000 + 37 * k);
  for (uint32_t c : whole.counts) EXPECT_GT(c, 0u);

  // Chunks of 4 slots: 4, 4, 1, clipped to the live rows, with the counters every time.
  KeyedRows chunk;
  std::vector<int64_t> ids, last_seen;
  std::vector<uint32_t> counts;
  for (int64_t first = 0; first < whole.size; first += 4) {
    ASSERT_TRUE(storage.ExportKeyedRows(keyed, first, 4, &chunk));
    EXPECT_EQ(chunk.size, whole.size);
    EXPECT_EQ(chunk.forwards, whole.forwards);
    EXPECT_EQ(chunk.ids.size(), static_cast<size_t>(std::min<int64_t>(4, whole.size - first)));
    ids.insert(ids.end(), chunk.ids.begin(), chunk.ids.end());
    last_seen.insert(last_seen.end(), chunk.last_seen.begin(), chunk.last_seen.end());
    counts.insert(counts.end(), chunk.counts.begin(), chunk.counts.end());
  }
  EXPECT_EQ(ids, whole.ids);
  EXPECT_EQ(last_seen, whole.last_seen);
  EXPECT_EQ(counts, whole.counts);
  ASSERT_TRUE(storage.ExportKeyedRows(keyed, whole.size + 5, 4, &chunk));
  EXPECT_TRUE(chunk.ids.empty());
  EXPECT_TRUE(chunk.sketch.empty());
}

TEST(TableStorage, KeyedRowsImportReplacesTheRows) {
  auto coll = Trained(1);
  ASSERT_NE(coll, nullptr);
  TableStorage& storage = coll->storage();
  const int32_t keyed = LocalOf(storage, 1);
  KeyedRows rows;
  rows.forwards = 7;
  rows.ids = {5, 3, 11};
  rows.last_seen = {6, 2, 7};
  rows.counts = {4, 1, 9};
  rows.scores = {0, 0, 0};
  storage.ImportKeyedRows(keyed, rows, KeyedImport::kReplace);
  KeyedRows back;
  ASSERT_TRUE(storage.ExportKeyedRows(keyed, 0, INT64_MAX, &back));
  EXPECT_EQ(back.size, 3);
  EXPECT_EQ(back.forwards, 7);
  EXPECT_EQ(back.ids, rows.ids);
  EXPECT_EQ(back.last_seen, rows.last_seen);
  EXPECT_EQ(back.counts, rows.counts);
  dynamic::TableStats stats;
  ASSERT_TRUE(storage.KeyedStats(1, &stats));
  EXPECT_EQ(stats.size, 3);
  EXPECT_FALSE(storage.KeyedStats(0, &stats));

  // A table import's update keeps the rows given and adds none of its own.
  rows.ids.push_back(42);
  rows.last_seen.push_back(7);
  rows.counts.push_back(0);
  rows.scores.clear();
  storage.ImportKeyedRows(keyed, rows, KeyedImport::kUpdate);
  ASSERT_TRUE(storage.ExportKeyedRows(keyed, 0, INT64_MAX, &back));
  EXPECT_EQ(back.ids, rows.ids);
  EXPECT_EQ(back.counts, rows.counts);
}

}  // namespace
}  // namespace shardrec::embedding
