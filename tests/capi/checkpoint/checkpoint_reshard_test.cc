// Checkpoints through the C API: bit-exact round trips under the same plan, a resharding matrix
// (every sharding type on one side or the other, 1 <-> 2 <-> 4 <-> 8 ranks, 1D <-> 2D, different
// column splits) for all six optimizers, 16-bit storage, and training after a load equal to
// training without one.
#include <gtest/gtest.h>

#include <mutex>

#include "tests/capi/checkpoint/checkpoint_test_util.h"

namespace shardrec::testing {
namespace {

constexpr int32_t TW = SHARDREC_SHARDING_TABLE_WISE;
constexpr int32_t RW = SHARDREC_SHARDING_ROW_WISE;
constexpr int32_t CW = SHARDREC_SHARDING_COLUMN_WISE;
constexpr int32_t TWRW = SHARDREC_SHARDING_TABLE_ROW_WISE;
constexpr int32_t TWCW = SHARDREC_SHARDING_TABLE_COLUMN_WISE;
constexpr int32_t GRID = SHARDREC_SHARDING_GRID;
constexpr int32_t DP = SHARDREC_SHARDING_DATA_PARALLEL;

// Trains side `a` two steps, saves, loads into side `b` (another seed, so every value changes)
// and compares both snapshots bit for bit.
void SaveTrainLoad(const Side& a, const Side& b, int32_t optimizer, bool allow_dtype = false) {
  const std::string dir = FreshDir("reshard");
  const Scenario sa = SideScenario(a, optimizer, 11);
  const Scenario sb = SideScenario(b, optimizer, 97);
  Snap saved;
  std::mutex mu;
  OnSide(a, sa, [&](int r, shardrec_embedding_t* c, shardrec_mesh_t* m) {
    TrainSteps(a, sa, r, c, m, 0, 2);
    ASSERT_EQ(SaveOn(c, m, dir), SHARDREC_OK) << shardrec_last_error();
    Snap snap = TakeSnap(c, sa);
    std::lock_guard<std::mutex> lock(mu);
    if (r == 0) saved = std::move(snap);
  });
  const std::string what =
      SideName(a) + " -> " + SideName(b) + " optimizer " + std::to_string(optimizer);
  ASSERT_EQ(saved.steps, 2) << what;
  OnSide(b, sb, [&](int r, shardrec_embedding_t* c, shardrec_mesh_t* m) {
    shardrec_checkpoint_options_t o = SHARDREC_CHECKPOINT_OPTIONS_INIT;
    o.allow_dtype_change = allow_dtype ? 1 : 0;
    Snap before = TakeSnap(c, sb);
    std::string why;
    if (r == 0) {
      EXPECT_FALSE(BitEqual(before, saved, &why)) << what << ": nothing to load";
    }
    ASSERT_EQ(LoadOn(c, m, dir, &o), SHARDREC_OK) << what << ": " << shardrec_last_error();
    Snap loaded = TakeSnap(c, sb);
    EXPECT_TRUE(BitEqual(loaded, saved, &why)) << what << " rank " << r << ": " << why;
  });
}

struct Pair {
  Side a, b;
};

const std::vector<Pair>& Matrix() {
  static const std::vector<Pair> pairs = {
      {{2, 0, TW}, {4, 0, RW}},       {{4, 0, RW}, {2, 0, CW}},   {{2, 0, CW}, {4, 0, TWRW}},
      {{4, 0, TWRW}, {8, 0, GRID}},   {{8, 0, GRID}, {1, 0, TW}}, {{1, 0, TW}, {8, 0, CW}},
      {{8, 4, RW}, {2, 0, CW}},                                    // 2D -> 1D, 8 -> 2 ranks
      {{2, 0, TWCW}, {4, 2, GRID}},                                // 1D -> 2D
      {{2, 0, DP}, {8, 0, RW}},       {{4, 2, CW}, {8, 4, TWRW}},  // 2D -> 2D
      {{2, 0, CW, 4}, {4, 0, CW, 8}},  // t2: 4 x 4 columns -> 2 x 8; row-wise state reshards
      {{4, 0, GRID, 4}, {2, 0, DP}},
  };
  return pairs;
}

class CheckpointReshard : public ::testing::TestWithParam<int32_t> {};

TEST_P(CheckpointReshard, MatrixIsBitExactForWeightsAndEveryState) {
  for (const Pair& p : Matrix()) SaveTrainLoad(p.a, p.b, GetParam());
}

INSTANTIATE_TEST_SUITE_P(AllOptimizers, CheckpointReshard, ::testing::Range(0, 6),
                         [](const auto& info) { return "optimizer" + std::to_string(info.param); });

TEST(CheckpointRoundTrip, SamePlanIsBitExact) {
  for (int32_t opt = 0; opt < 6; ++opt) SaveTrainLoad({4, 0, RW}, {4, 0, RW}, opt);
  SaveTrainLoad({8, 2, GRID}, {8, 2, GRID}, SHARDREC_OPTIMIZER_ADAM);
}

TEST(CheckpointRoundTrip, SixteenBitStorageAsStored) {
  for (int32_t dtype : {SHARDREC_DTYPE_FLOAT16, SHARDREC_DTYPE_BFLOAT16})
    SaveTrainLoad({2, 0, TW, 4, dtype}, {4, 0, CW, 4, dtype}, SHARDREC_OPTIMIZER_ADAGRAD);
}

// bf16 values widen exactly, so a bf16 checkpoint loaded into fp32 tables is bit-exact.
TEST(CheckpointRoundTrip, SixteenBitIntoFp32WhenAsked) {
  SaveTrainLoad({2, 0, RW, 4, SHARDREC_DTYPE_BFLOAT16}, {4, 0, TW, 4, SHARDREC_DTYPE_FLOAT32},
                SHARDREC_OPTIMIZER_ROWWISE_ADAGRAD, true);
}

// Training after a save/load equals training straight through: train 3 steps, save, train 2
// more; a fresh collection (another seed) that loads and trains the same 2 steps ends with the
// same bits, step counter included (Adam's bias correction reads it).
TEST(CheckpointRoundTrip, TrainingAfterLoadEqualsUninterrupted) {
  for (int32_t opt = 0; opt < 6; ++opt) {
    for (const Side& side : {Side{4, 0, RW}, Side{4, 2, CW}}) {
      const std::string dir = FreshDir("resume");
      const Scenario s = SideScenario(side, opt, 11);
      Scenario other = s;
      other.seed = 1234;
      Snap straight;
      std::mutex mu;
      OnSide(side, s, [&](int r, shardrec_embedding_t* c, shardrec_mesh_t* m) {
        TrainSteps(side, s, r, c, m, 0, 3);
        ASSERT_EQ(SaveOn(c, m, dir), SHARDREC_OK) << shardrec_last_error();
        TrainSteps(side, s, r, c, m, 3, 2);
        Snap snap = TakeSnap(c, s);
        std::lock_guard<std::mutex> lock(mu);
        if (r == 0) straight = std::move(snap);
      });
      OnSide(side, other, [&](int r, shardrec_embedding_t* c, shardrec_mesh_t* m) {
        ASSERT_EQ(LoadOn(c, m, dir), SHARDREC_OK) << shardrec_last_error();
        TrainSteps(side, s, r, c, m, 3, 2);
        Snap resumed = TakeSnap(c, s);
        std::string why;
        EXPECT_TRUE(BitEqual(resumed, straight, &why))
            << SideName(side) << " optimizer " << opt << " rank " << r << ": " << why;
      });
    }
  }
}

}  // namespace
}  // namespace shardrec::testing
