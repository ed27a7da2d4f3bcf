// Table export and import of dynamic tables through the C API (docs/checkpoint-format.md,
// "Table export"): a table exported with its optimizer state at one world and plan and imported
// into a fresh collection at another exports again to the same bytes and reads the same rows; an
// import inserts and overwrites by id beside the rows a table holds; one over capacity, of a
// file without ids, or of different files on different ranks fails on every rank and changes
// nothing.
#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <vector>

#include "shardrec/checkpoint.h"
#include "tests/capi/dynamic/stream.h"
#include "tests/capi/dynamic/test_util.h"
#include "tests/support/spawn_ranks.h"
#include "tests/support/temp_dirs.h"

namespace shardrec::testing {
namespace {

constexpr int32_t kSteps = 4;

struct Side {
  int32_t world;
  int32_t sharding;
  int64_t capacity;
};

std::string Bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

// On a collection of `side`: trains `train` steps of the stream, runs `body` on every rank, and
// returns the probe's global output (every pool id's row, an evaluation forward after `body`).
std::vector<float> RunSide(DynScenario s, const Side& side, const Stream& st, int32_t train,
                           const std::function<void(shardrec_embedding_t*, int)>& body) {
  s.base.world = s.base.ranks_per_node = side.world;
  s.base.sharding = {side.sharding, side.sharding};
  for (RefTable& t : s.base.tables) t.rows = side.capacity;
  const int64_t dim = DynOutputDim(s);
  std::vector<float> probe(static_cast<size_t>(st.probe.batch_size * dim), 0.0f);
  PlanPtr plan = MakeDynPlan(s);
  if (plan == nullptr) return probe;
  SpawnRanks(side.world, [&](int r) {
    CollPtr coll;
    MakeStreamCollection(s, plan.get(), side.world, r, &coll);
    shardrec_embedding_t* c = coll.get();
    if (c == nullptr) return;
    // The collection averages gradients over the ranks: world x the sample's gradient makes
    // every world train on the same sums.
    for (int32_t step = 0; step < train; ++step) {
      ForwardSlice(c, st.batches[step], side.world, r, dim, nullptr);
      BackwardSlice(c, st.grads[step], side.world, r, dim, static_cast<float>(side.world));
    }
    body(c, r);
    ASSERT_EQ(shardrec_embedding_set_training(c, 0), SHARDREC_OK);
    ForwardSlice(c, st.probe, side.world, r, dim, probe.data());
  });
  return probe;
}

void Export(shardrec_embedding_t* c, const std::string& dir, const char* tag) {
  for (const char* t : {"t0", "t1"}) {
    const std::string path = dir + "/" + tag + "_" + t + ".safetensors";
    ASSERT_EQ(shardrec_checkpoint_export_table(c, t, path.c_str(), 1), SHARDREC_OK)
        << shardrec_last_error();
  }
}

// Exported with the optimizer state at one side, imported into a fresh collection at another:
// the new collection exports the same bytes (ids, weights and every state, bit for bit) and its
// probe reads the same rows; the file holds one state tensor per optimizer state.
TEST(DynamicTableIo, ExportWithStateImportsBitExactAtAnotherWorld) {
  const std::vector<std::pair<Side, Side>> pairs = {
      {{2, SHARDREC_SHARDING_ROW_WISE, 64}, {1, SHARDREC_SHARDING_TABLE_WISE, 64}},
      {{1, SHARDREC_SHARDING_TABLE_WISE, 64}, {4, SHARDREC_SHARDING_ROW_WISE, 96}},
      {{2, SHARDREC_SHARDING_COLUMN_WISE, 48}, {3, SHARDREC_SHARDING_ROW_WISE, 64}},
      // A data-parallel table exports one copy and imports a whole copy on every rank.
      {{2, SHARDREC_SHARDING_DATA_PARALLEL, 64}, {3, SHARDREC_SHARDING_ROW_WISE, 64}},
      {{2, SHARDREC_SHARDING_TABLE_ROW_WISE, 64}, {3, SHARDREC_SHARDING_DATA_PARALLEL, 64}},
      {{4, SHARDREC_SHARDING_GRID, 64}, {2, SHARDREC_SHARDING_TABLE_COLUMN_WISE, 64}}};
  for (int32_t optimizer : {SHARDREC_OPTIMIZER_ADAM, SHARDREC_OPTIMIZER_ROWWISE_ADAGRAD}) {
    DynScenario s = MakeDynScenario(1, SHARDREC_SHARDING_TABLE_WISE, optimizer, 64, 24);
    s.base.tables[1].dtype = SHARDREC_DTYPE_BFLOAT16;  // exported widened, imported exactly
    const Stream st = MakeStream(s, DynOutputDim(s), kSteps);
    for (size_t i = 0; i < pairs.size(); ++i) {
      const auto& [from, to] = pairs[i];
      SCOPED_TRACE("optimizer " + std::to_string(optimizer) + " pair " + std::to_string(i));
      const std::string dir = FreshDir("roundtrip_" + std::to_string(i));
      const std::vector<float> want =
          RunSide(s, from, st, kSteps, [&](shardrec_embedding_t* c, int) { Export(c, dir, "a"); });
      const std::vector<float> got = RunSide(s, to, st, 0, [&](shardrec_embedding_t* c, int) {
        for (const char* t : {"t0", "t1"}) {
          const std::string path = dir + "/a_" + t + ".safetensors";
          ASSERT_EQ(shardrec_checkpoint_import_table(c, t, path.c_str(), 1), SHARDREC_OK)
              << shardrec_last_error();
        }
        Export(c, dir, "b");
      });
      EXPECT_EQ(got, want) << "probe";
      for (const char* t : {"t0", "t1"}) {
        const std::string a = Bytes(dir + "/a_" + t + ".safetensors");
        EXPECT_GT(a.size(), 64u);
        EXPECT_EQ(Bytes(dir + "/b_" + t + ".safetensors"), a) << t;
        EXPECT_NE(a.find(optimizer == SHARDREC_OPTIMIZER_ADAM ? "momentum2" : "momentum1"),
                  std::string::npos);
      }
    }
  }
}

// An import into a table that holds rows: ids it holds take the file's rows, new ids take free
// slots, the others stay; the weights-only import keeps the held ids' state. Over capacity (a
// block with fewer free slots than new ids) and a file without "ids" fail on every rank and
// change nothing.
TEST(DynamicTableIo, ImportInsertsBesideHeldRowsOrRefusesOverCapacity) {
  DynScenario s =
      MakeDynScenario(1, SHARDREC_SHARDING_ROW_WISE, SHARDREC_OPTIMIZER_ADAGRAD, 64, 24);
  const Stream st = MakeStream(s, DynOutputDim(s), kSteps);
  const Side side{2, SHARDREC_SHARDING_ROW_WISE, 64};
  const std::string dir = FreshDir("insert");
  // A: trained 4 steps, exported. B: trained 1 step (fewer ids), imports A's t0 weights.
  (void)RunSide(s, side, st, kSteps, [&](shardrec_embedding_t* c, int) { Export(c, dir, "a"); });
  const std::vector<float> b_alone = RunSide(s, side, st, 1, [](shardrec_embedding_t*, int) {});
  const std::vector<float> b = RunSide(s, side, st, 1, [&](shardrec_embedding_t* c, int) {
    const std::string path = dir + "/a_t0.safetensors";
    ASSERT_EQ(shardrec_checkpoint_import_table(c, "t0", path.c_str(), 0), SHARDREC_OK)
        << shardrec_last_error();
    Export(c, dir, "b");
  });
  const std::vector<float> a_probe =
      RunSide(s, side, st, kSteps, [](shardrec_embedding_t*, int) {});
  // t0 (columns 0-7 of every probe row) reads A's rows; t1 is B's own.
  const int64_t dim = DynOutputDim(s);
  for (size_t i = 0; i < b.size(); ++i) {
    const bool t0 = static_cast<int64_t>(i) % dim < 8;
    ASSERT_EQ(b[i], t0 ? a_probe[i] : b_alone[i]) << "probe element " << i;
  }

  // Too small a capacity for A's rows beside B's, and a file without ids: refused, unchanged.
  const Side small{2, SHARDREC_SHARDING_ROW_WISE, 12};
  const std::vector<float> before = RunSide(s, small, st, 1, [](shardrec_embedding_t*, int) {});
  {
    // A table file without ids: one fp32 row of t0's width (a fixed table's export).
    std::string header = R"({"weights":{"dtype":"F32","shape":[1,8],"data_offsets":[0,32]}})";
    header.append((8 - header.size() % 8) % 8, ' ');
    const uint64_t len = header.size();
    std::ofstream f(dir + "/no_ids.safetensors", std::ios::binary);
    f.write(reinterpret_cast<const char*>(&len), 8);
    f << header << std::string(32, '\0');
  }
  const std::vector<float> after = RunSide(s, small, st, 1, [&](shardrec_embedding_t* c, int) {
    const std::string path = dir + "/a_t0.safetensors";
    EXPECT_EQ(shardrec_checkpoint_import_table(c, "t0", path.c_str(), 1), SHARDREC_EINVAL);
    EXPECT_NE(std::string(shardrec_last_error()).find("slots"), std::string::npos)
        << shardrec_last_error();
    EXPECT_EQ(shardrec_checkpoint_import_table(c, "t1", path.c_str(), 1), SHARDREC_EINVAL)
        << "t0's file into t1: a shape mismatch";
    const std::string no_ids = dir + "/no_ids.safetensors";
    EXPECT_EQ(shardrec_checkpoint_import_table(c, "t0", no_ids.c_str(), 0), SHARDREC_EINVAL);
    EXPECT_NE(std::string(shardrec_last_error()).find("ids"), std::string::npos)
        << shardrec_last_error();
  });
  EXPECT_EQ(after, before);

  // Ranks importing different files (each valid alone): every rank reads the whole file, so they
  // compare what they read (a data-parallel copy reading another file would differ from its
  // peers): EINVAL on every rank, nothing changed.
  const std::vector<float> mixed = RunSide(s, side, st, 1, [&](shardrec_embedding_t* c, int r) {
    // B's t0 holds A's weights (imported above) but its own optimizer state.
    const std::string path = dir + (r == 0 ? "/a_t0.safetensors" : "/b_t0.safetensors");
    EXPECT_EQ(shardrec_checkpoint_import_table(c, "t0", path.c_str(), 1), SHARDREC_EINVAL);
    EXPECT_NE(std::string(shardrec_last_error()).find("different contents"), std::string::npos)
        << shardrec_last_error();
  });
  EXPECT_EQ(mixed, b_alone);
}

}  // namespace
}  // namespace shardrec::testing
