// A sequence collection whose tables split their columns differently (one column-wise, one
// whole): every table's rows share the output's dim columns, so the combine must not let one
// table's column block initialise (zero) the rows another table returned.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/capi/embedding/embedding_test_util.h"
#include "tests/support/spawn_ranks.h"

namespace shardrec::testing {
namespace {

// Table "a" (feature 0) column-wise: columns 0-1 on rank 0, 2-3 on rank 1; table "b" (feature 1)
// table-wise on `b_rank`. At world 2 rank 0 then returns a's first block and all of b's columns.
std::string Plan(int b_rank, const char* b_sharding) {
  return std::string(R"({"format": "shardrec.plan", "version": 1, "world_size": 2,
    "ranks_per_node": 2,
    "features": [{"name": "fa", "pooling_factor": 1}, {"name": "fb", "pooling_factor": 1}],
    "tables": [
     {"name": "a", "rows": 6, "dim": 4, "pooling": "none", "dtype": "float32", "features": [0],
      "init": {"kind": "default", "low": 0, "high": 0}, "sharding": "column_wise",
      "shards": [{"row_offset": 0, "rows": 6, "col_offset": 0, "cols": 2, "rank": 0},
                 {"row_offset": 0, "rows": 6, "col_offset": 2, "cols": 2, "rank": 1}]},
     {"name": "b", "rows": 5, "dim": 4, "pooling": "none", "dtype": "float32", "features": [1],
      "init": {"kind": "default", "low": 0, "high": 0}, "sharding": ")") +
         b_sharding + R"(",
      "shards": [)" +
         (std::string(b_sharding) == "row_wise"
              ? std::string(R"({"row_offset": 0, "rows": 3, "col_offset": 0, "cols": 4, "rank": 0},
                 {"row_offset": 3, "rows": 2, "col_offset": 0, "cols": 4, "rank": 1})")
              : R"({"row_offset": 0, "rows": 5, "col_offset": 0, "cols": 4, "rank": )" +
                    std::to_string(b_rank) + "}") +
         "]}]}";
}

void ExpectRowsOfEveryTable(const std::string& json) {
  shardrec_plan_t* plan = nullptr;
  ASSERT_EQ(shardrec_plan_from_json(&plan, json.c_str(), json.size()), SHARDREC_OK)
      << shardrec_last_error();
  PlanPtr owned(plan);
  // Distinct known weights: row r, column c of table t is 100 t + 10 r + c + 1.
  std::vector<float> wa(6 * 4), wb(5 * 4);
  for (int r = 0; r < 6; ++r)
    for (int c = 0; c < 4; ++c) wa[r * 4 + c] = static_cast<float>(10 * r + c + 1);
  for (int r = 0; r < 5; ++r)
    for (int c = 0; c < 4; ++c) wb[r * 4 + c] = static_cast<float>(100 + 10 * r + c + 1);
  SpawnRanks(2, [&](int rank) {
    shardrec_embedding_t* c = nullptr;
    ASSERT_EQ(shardrec_embedding_create(&c, plan, GroupComm(2, rank), nullptr, nullptr),
              SHARDREC_OK)
        << shardrec_last_error();
    CollPtr coll(c);
    ASSERT_EQ(shardrec_embedding_set_weights(c, "a", wa.data(), wa.size()), SHARDREC_OK);
    ASSERT_EQ(shardrec_embedding_set_weights(c, "b", wb.data(), wb.size()), SHARDREC_OK);
    // Two samples: feature a bags {1, 5} and {}, feature b bags {4} and {0, 2}; rank 1 reverses
    // the samples. Weighted, so each row comes back scaled.
    const std::vector<int32_t> lengths =
        rank == 0 ? std::vector<int32_t>{2, 0, 1, 2} : std::vector<int32_t>{0, 2, 2, 1};
    const std::vector<int64_t> ids =
        rank == 0 ? std::vector<int64_t>{1, 5, 4, 0, 2} : std::vector<int64_t>{1, 5, 0, 2, 4};
    const std::vector<float> weights = {2.0f, -1.0f, 0.5f, 3.0f, 1.0f};
    shardrec_kjt_view_t kjt = SHARDREC_KJT_VIEW_INIT;
    kjt.batch_size = 2;
    kjt.num_features = 2;
    kjt.lengths = lengths.data();
    kjt.num_lengths = lengths.size();
    kjt.values = ids.data();
    kjt.num_values = ids.size();
    kjt.weights = weights.data();
    kjt.num_weights = weights.size();
    std::vector<float> out(ids.size() * 4, -7.0f);
    ASSERT_EQ(shardrec_embedding_forward(c, &kjt, out.data(), out.size(), nullptr), SHARDREC_OK)
        << shardrec_last_error();
    for (size_t i = 0; i < ids.size(); ++i) {
      const bool in_a = i < 2;  // the first two ids are feature a's on both ranks
      const std::vector<float>& w = in_a ? wa : wb;
      for (int col = 0; col < 4; ++col) {
        const float want = w[static_cast<size_t>(ids[i]) * 4 + col] * weights[i];
        EXPECT_EQ(out[i * 4 + col], want) << "rank " << rank << " id " << i << " col " << col;
      }
    }
    // The backward trains each row with its own output row's gradient times its weight.
    std::vector<float> grad(out.size(), 1.0f);
    ASSERT_EQ(shardrec_embedding_backward(c, grad.data(), grad.size(), nullptr), SHARDREC_OK)
        << shardrec_last_error();
  });
}

TEST(EmbeddingSequenceColumns, ColumnSplitBesideAWholeTableOnTheSameRank) {
  ExpectRowsOfEveryTable(Plan(0, "table_wise"));
}

TEST(EmbeddingSequenceColumns, ColumnSplitBesideAWholeTableOnTheOtherRank) {
  ExpectRowsOfEveryTable(Plan(1, "table_wise"));
}

TEST(EmbeddingSequenceColumns, ColumnSplitBesideARowWiseTable) {
  ExpectRowsOfEveryTable(Plan(0, "row_wise"));
}

}  // namespace
}  // namespace shardrec::testing
