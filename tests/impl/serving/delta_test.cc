// Row deltas of a served model, white box (delta.cc): the next version patches a fixed table by
// index or merges a dynamic one in id order, shares every other table's memory with the served
// version, never changes the served version, and refuses a malformed delta before building
// anything.
#include "impl/serving/delta.h"

#include <gtest/gtest.h>

#include <limits>
#include <memory>
#include <vector>

#include "tests/impl/serving/serving_test_util.h"

namespace shardrec::serving {
namespace {

using testing::MakeModel;
using testing::ReadRow;

// Table 0 "fixed": 4 rows of dim 2, row r = {r, 10 + r}; table 1 "dyn": ids 10, 20, 30 with rows
// {1, 1}, {2, 2}, {3, 3}.
std::shared_ptr<Model> Served(Storage dyn_storage = Storage::kFp32) {
  return MakeModel({{"fixed", 2, Storage::kFp32, {0, 10, 1, 11, 2, 12, 3, 13}, {}},
                    {"dyn", 2, dyn_storage, {1, 1, 2, 2, 3, 3}, {10, 20, 30}}});
}

using Rows = std::vector<float>;

TEST(ServingDelta, FixedTableOverwritesNamedRowsAndSharesTheOthers) {
  auto served = Served();
  const int64_t ids[] = {2, 0};
  const float rows[] = {-2, -12, -0.5f, -10};
  Delta d;
  d.ids = ids;
  d.rows = rows;
  d.num_rows = 2;
  std::shared_ptr<Model> next;
  ASSERT_TRUE(ApplyDelta(*served, 0, d, &next).ok());
  const Table& t = next->tables[0];
  EXPECT_EQ(ReadRow(t, 0), (Rows{-0.5f, -10}));
  EXPECT_EQ(ReadRow(t, 1), (Rows{1, 11}));
  EXPECT_EQ(ReadRow(t, 2), (Rows{-2, -12}));
  EXPECT_EQ(ReadRow(t, 3), (Rows{3, 13}));
  // The served version is untouched; the other table is the same memory, not a copy.
  EXPECT_EQ(ReadRow(served->tables[0], 0), (Rows{0, 10}));
  EXPECT_NE(t.data, served->tables[0].data);
  EXPECT_EQ(next->tables[1].data, served->tables[1].data);
  EXPECT_EQ(next->tables[1].dynamic, served->tables[1].dynamic);
}

TEST(ServingDelta, FixedTableRefusesTombstonesFullDeltasAndIdsOutsideItsRows) {
  auto served = Served();
  const int64_t outside[] = {4};
  const int64_t twice[] = {1, 1};
  const float rows[] = {0, 0, 0, 0};
  std::shared_ptr<Model> next;

  Delta tomb;
  tomb.tombstones = outside;
  tomb.num_tombstones = 1;
  Status st = ApplyDelta(*served, 0, tomb, &next);
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_NE(st.message().find("takes no tombstones (1 given)"), std::string::npos) << st.message();

  Delta full;
  full.full = true;
  st = ApplyDelta(*served, 0, full, &next);
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_NE(st.message().find("takes no full delta"), std::string::npos) << st.message();

  Delta out;
  out.ids = outside;
  out.rows = rows;
  out.num_rows = 1;
  st = ApplyDelta(*served, 0, out, &next);
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_NE(st.message().find("id 4 at position 0 is outside its rows [0, 4)"), std::string::npos)
      << st.message();

  Delta dup;
  dup.ids = twice;
  dup.rows = rows;
  dup.num_rows = 2;
  st = ApplyDelta(*served, 0, dup, &next);
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_NE(st.message().find("name id 1 twice"), std::string::npos) << st.message();
  EXPECT_EQ(next, nullptr);  // nothing was built
}

TEST(ServingDelta, DynamicTableUpsertsAndDropsInIdOrder) {
  auto served = Served();
  const int64_t ids[] = {25, 10};
  const float rows[] = {25, 25, 100, 100};
  const int64_t gone[] = {30, 99};  // 99 has no row: dropping it is no change
  Delta d;
  d.ids = ids;
  d.rows = rows;
  d.num_rows = 2;
  d.tombstones = gone;
  d.num_tombstones = 2;
  std::shared_ptr<Model> next;
  ASSERT_TRUE(ApplyDelta(*served, 1, d, &next).ok());
  const Table& t = next->tables[1];
  ASSERT_EQ(t.rows, 3);
  EXPECT_EQ(t.dynamic->ids, (std::vector<int64_t>{10, 20, 25}));
  EXPECT_EQ(ReadRow(t, t.dynamic->index->Find(10)), (Rows{100, 100}));
  EXPECT_EQ(ReadRow(t, t.dynamic->index->Find(20)), (Rows{2, 2}));
  EXPECT_EQ(ReadRow(t, t.dynamic->index->Find(25)), (Rows{25, 25}));
  EXPECT_EQ(t.dynamic->index->Find(30), -1);
  EXPECT_EQ(ReadRow(t, t.rows), (Rows{0, 0}));  // the zero row unknown ids read
  // The served version still holds 30 and the old row of 10.
  EXPECT_EQ(served->tables[1].dynamic->ids, (std::vector<int64_t>{10, 20, 30}));
  EXPECT_EQ(ReadRow(served->tables[1], 0), (Rows{1, 1}));
  EXPECT_EQ(next->tables[0].data, served->tables[0].data);
}

TEST(ServingDelta, FullDeltaReplacesADynamicTable) {
  auto served = Served();
  const int64_t ids[] = {7};
  const float rows[] = {7, 7};
  Delta d;
  d.ids = ids;
  d.rows = rows;
  d.num_rows = 1;
  d.full = true;
  std::shared_ptr<Model> next;
  ASSERT_TRUE(ApplyDelta(*served, 1, d, &next).ok());
  EXPECT_EQ(next->tables[1].dynamic->ids, (std::vector<int64_t>{7}));
  EXPECT_EQ(next->tables[1].rows, 1);
  EXPECT_EQ(next->tables[1].dynamic->index->Find(10), -1);
}

TEST(ServingDelta, DynamicTableRefusesAnIdBothUpsertedAndRemoved) {
  auto served = Served();
  const int64_t ids[] = {20};
  const float rows[] = {0, 0};
  Delta d;
  d.ids = ids;
  d.rows = rows;
  d.num_rows = 1;
  d.tombstones = ids;
  d.num_tombstones = 1;
  std::shared_ptr<Model> next;
  const Status st = ApplyDelta(*served, 1, d, &next);
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_NE(st.message().find("id 20 is both upserted and removed"), std::string::npos)
      << st.message();
  EXPECT_EQ(next, nullptr);
}

TEST(ServingDelta, RowsAreEncodedToTheTableStorageAndNonFiniteRefused) {
  auto served = Served(Storage::kInt8);
  const int64_t ids[] = {20};
  const float rows[] = {-1.0f, 3.0f};
  Delta d;
  d.ids = ids;
  d.rows = rows;
  d.num_rows = 1;
  std::shared_ptr<Model> next;
  ASSERT_TRUE(ApplyDelta(*served, 1, d, &next).ok());
  const Table& t = next->tables[1];
  EXPECT_EQ(t.storage, Storage::kInt8);
  // Quantized as at open: the minimum is the bias (exact), the maximum the top code.
  const Rows got = ReadRow(t, t.dynamic->index->Find(20));
  EXPECT_EQ(got[0], -1.0f);
  EXPECT_NEAR(got[1], 3.0f, 1e-6f);
  EXPECT_NE(ReadRow(served->tables[1], 1), got);  // the served row of 20 is {2, 2}

  const float bad[] = {1.0f, std::numeric_limits<float>::quiet_NaN()};
  d.rows = bad;
  next.reset();
  const Status st = ApplyDelta(*served, 1, d, &next);
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_NE(st.message().find("delta of table dyn row 0 column 1"), std::string::npos)
      << st.message();
  EXPECT_EQ(next, nullptr);
}

TEST(ServingDelta, NullArraysWithCountsAreRefused) {
  auto served = Served();
  Delta d;
  d.num_rows = 1;
  std::shared_ptr<Model> next;
  const Status st = ApplyDelta(*served, 1, d, &next);
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_NE(st.message().find("are NULL but their count is not 0"), std::string::npos)
      << st.message();
}

}  // namespace
}  // namespace shardrec::serving
