// Exact manual layouts through the public C API: the plan text of docs/plan-format.md (the doc's
// example is this file's kExample, byte for byte), the refusals that page documents, and what
// pinned ranks give (config.h, shardrec_table_constraints_t).
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "shardrec/config.h"
#include "shardrec/plan.h"

namespace {

// docs/plan-format.md, "Example": two tables on a world of 2, "user" table-wise on rank 1,
// "item" column-wise over ranks 1 and 0 in that order.
const std::string kExample = R"json({
  "format": "shardrec.plan",
  "version": 1,
  "world_size": 2,
  "ranks_per_node": 2,
  "features": [
    {"name": "user_id", "pooling_factor": 1},
    {"name": "item_id", "pooling_factor": 1}
  ],
  "tables": [
    {
      "name": "user", "rows": 1000, "dim": 16, "pooling": "sum", "dtype": "float32",
      "features": [0],
      "init": {"kind": "default", "low": 0, "high": 0},
      "sharding": "table_wise",
      "shards": [
        {"row_offset": 0, "rows": 1000, "col_offset": 0, "cols": 16, "rank": 1}
      ]
    },
    {
      "name": "item", "rows": 500, "dim": 16, "pooling": "sum", "dtype": "float32",
      "features": [1],
      "init": {"kind": "default", "low": 0, "high": 0},
      "sharding": "column_wise",
      "shards": [
        {"row_offset": 0, "rows": 500, "col_offset": 0, "cols": 8, "rank": 1},
        {"row_offset": 0, "rows": 500, "col_offset": 8, "cols": 8, "rank": 0}
      ]
    }
  ]
}
)json";

// The first ```json block of the doc, without its fences.
std::string DocExample() {
  std::ifstream in(SHARDREC_PLAN_FORMAT_DOC);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string doc = ss.str();
  const std::string open = "```json\n";
  const size_t begin = doc.find(open);
  if (begin == std::string::npos) return "(no ```json block in " SHARDREC_PLAN_FORMAT_DOC ")";
  const size_t end = doc.find("```", begin + open.size());
  if (end == std::string::npos) return "(unclosed ```json block)";
  return doc.substr(begin + open.size(), end - begin - open.size());
}

std::string Replace(std::string text, const std::string& from, const std::string& to) {
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) text.replace(at, from.size(), to);
  return text;
}

void ExpectRefused(const std::string& text, shardrec_status_t want, const std::string& message) {
  shardrec_plan_t* plan = nullptr;
  EXPECT_EQ(shardrec_plan_from_json(&plan, text.data(), text.size()), want)
      << shardrec_last_error();
  EXPECT_EQ(plan, nullptr);
  EXPECT_NE(std::string(shardrec_last_error()).find(message), std::string::npos)
      << "message: " << shardrec_last_error() << "\nexpected to contain: " << message;
}

shardrec_shard_t Shard(const shardrec_plan_t* plan, size_t table, size_t shard) {
  shardrec_shard_t s{};
  EXPECT_EQ(shardrec_plan_shard(plan, table, shard, &s), SHARDREC_OK) << shardrec_last_error();
  return s;
}

void ExpectShard(const shardrec_shard_t& s, int64_t row_offset, int64_t rows, int32_t col_offset,
                 int32_t cols, int32_t rank) {
  EXPECT_EQ(s.row_offset, row_offset);
  EXPECT_EQ(s.rows, rows);
  EXPECT_EQ(s.col_offset, col_offset);
  EXPECT_EQ(s.cols, cols);
  EXPECT_EQ(s.rank, rank);
}

TEST(ManualLayout, TheDocExampleIsTheTestedText) { EXPECT_EQ(DocExample(), kExample); }

TEST(ManualLayout, TheDocExampleLoadsAsWritten) {
  shardrec_plan_t* plan = nullptr;
  ASSERT_EQ(shardrec_plan_from_json(&plan, kExample.data(), kExample.size()), SHARDREC_OK)
      << shardrec_last_error();
  int32_t world = 0, per_node = 0;
  size_t tables = 0, features = 0;
  ASSERT_EQ(shardrec_plan_world_size(plan, &world), SHARDREC_OK);
  ASSERT_EQ(shardrec_plan_ranks_per_node(plan, &per_node), SHARDREC_OK);
  ASSERT_EQ(shardrec_plan_num_tables(plan, &tables), SHARDREC_OK);
  ASSERT_EQ(shardrec_plan_num_features(plan, &features), SHARDREC_OK);
  EXPECT_EQ(world, 2);
  EXPECT_EQ(per_node, 2);
  ASSERT_EQ(tables, 2u);
  EXPECT_EQ(features, 2u);

  size_t index = 99;
  ASSERT_EQ(shardrec_plan_find_table(plan, "user", &index), SHARDREC_OK);
  EXPECT_EQ(index, 0u);
  int32_t type = -1;
  size_t shards = 0;
  ASSERT_EQ(shardrec_plan_table_sharding(plan, 0, &type, &shards), SHARDREC_OK);
  EXPECT_EQ(type, SHARDREC_SHARDING_TABLE_WISE);
  ASSERT_EQ(shards, 1u);
  ExpectShard(Shard(plan, 0, 0), 0, 1000, 0, 16, 1);

  ASSERT_EQ(shardrec_plan_table_sharding(plan, 1, &type, &shards), SHARDREC_OK);
  EXPECT_EQ(type, SHARDREC_SHARDING_COLUMN_WISE);
  ASSERT_EQ(shards, 2u);
  ExpectShard(Shard(plan, 1, 0), 0, 500, 0, 8, 1);
  ExpectShard(Shard(plan, 1, 1), 0, 500, 8, 8, 0);

  // The example is written in the exporter's form, so it comes back byte for byte.
  char* text = nullptr;
  size_t len = 0;
  ASSERT_EQ(shardrec_plan_to_json(plan, &text, &len), SHARDREC_OK);
  EXPECT_EQ(std::string(text, len), kExample);
  shardrec_free(text);
  shardrec_plan_destroy(plan);
}

TEST(ManualLayout, TheDocumentedRefusals) {
  const std::string item_shard1 =
      "{\"row_offset\": 0, \"rows\": 500, \"col_offset\": 8, \"cols\": 8, \"rank\": 0}";
  ExpectRefused(Replace(kExample, item_shard1,
                        "{\"row_offset\": 0, \"rows\": 500, \"col_offset\": 8, \"cols\": 8, "
                        "\"rank\": 2}"),
                SHARDREC_EINVAL,
                "plan: table 'item': shard 1 (rows 0+500, cols 8+8, rank 2): rank 2 does not "
                "exist (world_size 2)");
  ExpectRefused(Replace(kExample, item_shard1,
                        "{\"row_offset\": 0, \"rows\": 500, \"col_offset\": 8, \"cols\": 7, "
                        "\"rank\": 0}"),
                SHARDREC_EINVAL,
                "plan: table 'item': gap: row 0, column 15 is not covered by any shard");
  ExpectRefused(Replace(kExample, item_shard1,
                        "{\"row_offset\": 0, \"rows\": 500, \"col_offset\": 7, \"cols\": 8, "
                        "\"rank\": 0}"),
                SHARDREC_EINVAL,
                "plan: table 'item': shard 0 (rows 0+500, cols 0+8, rank 1) and shard 1 (rows "
                "0+500, cols 7+8, rank 0) overlap at row 0, column 7");
  // Column blocks must come in column order.
  ExpectRefused(
      Replace(Replace(kExample,
                      "{\"row_offset\": 0, \"rows\": 500, \"col_offset\": 0, \"cols\": 8, "
                      "\"rank\": 1}",
                      "{\"row_offset\": 0, \"rows\": 500, \"col_offset\": 8, \"cols\": 8, "
                      "\"rank\": 1}"),
              item_shard1,
              "{\"row_offset\": 0, \"rows\": 500, \"col_offset\": 0, \"cols\": 8, \"rank\": 0}"),
      SHARDREC_EINVAL,
      "plan: table 'item': column_wise shard 0 (rows 0+500, cols 8+8, rank 1) must be a "
      "full-height column block starting at column 0");
  ExpectRefused(Replace(kExample, "\"sharding\": \"table_wise\"", "\"sharding\": \"TW\""),
                SHARDREC_EINVAL, "plan: table 'user': unknown sharding type \"TW\"");
  ExpectRefused(Replace(kExample, "\"version\": 1", "\"version\": 2"), SHARDREC_EINVAL,
                "plan json: unsupported version 2 (this library reads version 1)");
  ExpectRefused(Replace(kExample, ", \"rank\": 0}", "}"), SHARDREC_ECORRUPT,
                "plan json: tables[1].shards[1] has no member \"rank\"");
  ExpectRefused(Replace(kExample, "\"rows\": 1000, \"dim\"", "\"rows\": 1000.0, \"dim\""),
                SHARDREC_ECORRUPT, "plan json: tables[0].rows must be an integer in int64 range");
}

// One table "t" (rows x dim) read by one feature, on `world` ranks of `per_node` per node,
// restricted to `type` and pinned to `ranks`.
struct Pinned {
  shardrec_plan_t* plan = nullptr;
  Pinned(int32_t world, int32_t per_node, int32_t dim, int32_t type, std::vector<int32_t> ranks,
         int32_t min_partition = 0) {
    shardrec_feature_config_t f;
    EXPECT_EQ(shardrec_feature_config_init(&f, SHARDREC_FEATURE_CONFIG_VERSION), SHARDREC_OK);
    f.name = "f";
    const int32_t feature = 0;
    shardrec_table_config_t t = SHARDREC_TABLE_CONFIG_INIT;
    t.name = "t";
    t.rows = 1000;
    t.dim = dim;
    t.features = &feature;
    t.num_features = 1;
    shardrec_topology_t topo = SHARDREC_TOPOLOGY_INIT;
    EXPECT_EQ(shardrec_topology_init(&topo, SHARDREC_TOPOLOGY_VERSION), SHARDREC_OK);
    topo.world_size = world;
    topo.ranks_per_node = per_node;
    shardrec_table_constraints_t c = SHARDREC_TABLE_CONSTRAINTS_INIT;
    c.table = "t";
    c.sharding_types = 1u << type;
    c.ranks = ranks.data();
    c.num_ranks = ranks.size();
    c.min_partition = min_partition;
    EXPECT_EQ(shardrec_plan_create(&plan, &t, 1, &f, 1, &topo, &c, 1), SHARDREC_OK)
        << shardrec_last_error();
  }
  ~Pinned() { shardrec_plan_destroy(plan); }
  size_t Shards() const {
    size_t n = 0;
    EXPECT_EQ(shardrec_plan_table_sharding(plan, 0, nullptr, &n), SHARDREC_OK);
    return n;
  }
};

TEST(ManualLayout, PinnedRanksAreASetInAscendingOrder) {
  // CW over {1, 0}: shard k (column order) goes to the k-th lowest pinned rank.
  Pinned cw(4, 0, 128, SHARDREC_SHARDING_COLUMN_WISE, {1, 0});
  ASSERT_NE(cw.plan, nullptr);
  ASSERT_EQ(cw.Shards(), 2u);
  ExpectShard(Shard(cw.plan, 0, 0), 0, 1000, 0, 64, 0);
  ExpectShard(Shard(cw.plan, 0, 1), 0, 1000, 64, 64, 1);
  // Uneven: the first dim % n shards (the lowest ranks') hold one column more.
  Pinned odd(4, 0, 129, SHARDREC_SHARDING_COLUMN_WISE, {3, 0});
  ASSERT_NE(odd.plan, nullptr);
  ASSERT_EQ(odd.Shards(), 2u);
  ExpectShard(Shard(odd.plan, 0, 0), 0, 1000, 0, 65, 0);
  ExpectShard(Shard(odd.plan, 0, 1), 0, 1000, 65, 64, 3);
  // TWCW inside one node: the same rule.
  Pinned twcw(4, 2, 128, SHARDREC_SHARDING_TABLE_COLUMN_WISE, {3, 2});
  ASSERT_NE(twcw.plan, nullptr);
  ASSERT_EQ(twcw.Shards(), 2u);
  ExpectShard(Shard(twcw.plan, 0, 0), 0, 1000, 0, 64, 2);
  ExpectShard(Shard(twcw.plan, 0, 1), 0, 1000, 64, 64, 3);
}

TEST(ManualLayout, PinnedTableWiseTakesTheCheapestTiesToTheLowerLocalRank) {
  // Nothing placed yet: every rank costs 0, so the lower local rank wins (rank 2 is local rank 0
  // of node 1, rank 1 local rank 1 of node 0), not the first listed nor the lowest rank.
  Pinned tw(4, 2, 16, SHARDREC_SHARDING_TABLE_WISE, {1, 2});
  ASSERT_NE(tw.plan, nullptr);
  ASSERT_EQ(tw.Shards(), 1u);
  EXPECT_EQ(Shard(tw.plan, 0, 0).rank, 2);
}

TEST(ManualLayout, PinnedColumnBlocksCanShareARank) {
  // min_partition > 0: blocks of the planner's width, each to the cheapest pinned rank.
  Pinned cw(4, 0, 128, SHARDREC_SHARDING_COLUMN_WISE, {0, 1}, 32);
  ASSERT_NE(cw.plan, nullptr);
  ASSERT_EQ(cw.Shards(), 4u);
  ExpectShard(Shard(cw.plan, 0, 0), 0, 1000, 0, 32, 0);
  ExpectShard(Shard(cw.plan, 0, 1), 0, 1000, 32, 32, 1);
  ExpectShard(Shard(cw.plan, 0, 2), 0, 1000, 64, 32, 0);
  ExpectShard(Shard(cw.plan, 0, 3), 0, 1000, 96, 32, 1);
  // TWCW pinned across two nodes: blocks of the planner's width (128 here), all on the pinned
  // ranks of one node (node 0, the cheaper by the lower index: only rank 1 is pinned there).
  Pinned twcw(4, 2, 256, SHARDREC_SHARDING_TABLE_COLUMN_WISE, {1, 2});
  ASSERT_NE(twcw.plan, nullptr);
  ASSERT_EQ(twcw.Shards(), 2u);
  ExpectShard(Shard(twcw.plan, 0, 0), 0, 1000, 0, 128, 1);
  ExpectShard(Shard(twcw.plan, 0, 1), 0, 1000, 128, 128, 1);
}

TEST(ManualLayout, PinnedRanksAreRefusedOutOfRangeOrTwice) {
  shardrec_feature_config_t f;
  ASSERT_EQ(shardrec_feature_config_init(&f, SHARDREC_FEATURE_CONFIG_VERSION), SHARDREC_OK);
  f.name = "f";
  const int32_t feature = 0;
  shardrec_table_config_t t = SHARDREC_TABLE_CONFIG_INIT;
  t.name = "t";
  t.rows = 10;
  t.dim = 8;
  t.features = &feature;
  t.num_features = 1;
  shardrec_topology_t topo = SHARDREC_TOPOLOGY_INIT;
  ASSERT_EQ(shardrec_topology_init(&topo, SHARDREC_TOPOLOGY_VERSION), SHARDREC_OK);
  topo.world_size = 2;
  shardrec_table_constraints_t c = SHARDREC_TABLE_CONSTRAINTS_INIT;
  c.table = "t";
  const int32_t twice[] = {1, 1};
  c.ranks = twice;
  c.num_ranks = 2;
  shardrec_plan_t* plan = nullptr;
  EXPECT_EQ(shardrec_plan_create(&plan, &t, 1, &f, 1, &topo, &c, 1), SHARDREC_EINVAL);
  EXPECT_NE(std::string(shardrec_last_error()).find("pinned rank 1 listed twice"),
            std::string::npos)
      << shardrec_last_error();
  const int32_t absent[] = {2};
  c.ranks = absent;
  c.num_ranks = 1;
  EXPECT_EQ(shardrec_plan_create(&plan, &t, 1, &f, 1, &topo, &c, 1), SHARDREC_EINVAL);
  EXPECT_NE(std::string(shardrec_last_error()).find("pinned rank 2 does not exist"),
            std::string::npos)
      << shardrec_last_error();
  EXPECT_EQ(plan, nullptr);
}

}  // namespace
