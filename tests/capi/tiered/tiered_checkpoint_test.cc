// Checkpoints of tiered tables (docs/disk-tier.md, "Checkpoints"): a tiered collection saves in
// the in-memory tables' format, so its checkpoint loads into an in-memory collection and back and
// reshards between world sizes; training goes on with the bits of an in-memory run that saved and
// loaded the same way. A load that fails leaves a tiered collection as it was.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "shardrec/checkpoint.h"
#include "tiered_test_util.h"

namespace shardrec::testing {
namespace {

struct Param {
  int32_t sharding;
  int32_t optimizer;
  int32_t dtype;
  int32_t save_world;
  int32_t load_world;
};

std::string Name(const ::testing::TestParamInfo<Param>& info) {
  const Param& p = info.param;
  static const char* kSharding[] = {"DP", "TW", "RW", "CW"};
  static const char* kOpt[] = {"Sgd", "Adagrad", "RowAdagrad", "Adam", "PartialAdam", "Lamb"};
  static const char* kDtype[] = {"F32", "F16", "Bf16"};
  return std::string(kSharding[p.sharding]) + kOpt[p.optimizer] + kDtype[p.dtype] + "W" +
         std::to_string(p.save_world) + "To" + std::to_string(p.load_world);
}

class TieredCheckpoint : public ::testing::TestWithParam<Param> {};

TEST_P(TieredCheckpoint, SavesAndLoadsAcrossTiersAndWorlds) {
  const Param& p = GetParam();
  const std::string name = Name({p, 0});
  const Scenario a =
      TieredScenario(p.save_world, p.sharding, p.optimizer, p.dtype, SHARDREC_POOLING_SUM, true);
  Scenario b =
      TieredScenario(p.load_world, p.sharding, p.optimizer, p.dtype, SHARDREC_POOLING_SUM, true);
  b.data_seed = a.data_seed + 1;  // other batches after the load
  PlanPtr plan_a = MakePlan(a), plan_b = MakePlan(b);
  ASSERT_NE(plan_a, nullptr);
  ASSERT_NE(plan_b, nullptr);
  const std::string root = FreshDir("ckpt_" + name);
  std::filesystem::create_directories(root);
  const std::string mem_ckpt = root + "/memory", tier_ckpt = root + "/tiered";
  const std::string dir_a = root + "/stores_a", dir_b = root + "/stores_b";
  const std::vector<shardrec_table_tier_t> tiers_a = SmallTiers(a, dir_a);
  const std::vector<shardrec_table_tier_t> tiers_b = SmallTiers(b, dir_b);

  // The reference: in memory, saved after the first run and loaded into the second.
  RunTiered(a, plan_a.get(), {}, false, nullptr, nullptr, mem_ckpt.c_str());
  ASSERT_FALSE(::testing::Test::HasFailure());
  const std::vector<TieredRun> want =
      RunTiered(b, plan_b.get(), {}, false, nullptr, mem_ckpt.c_str());
  ASSERT_FALSE(::testing::Test::HasFailure());

  // A tiered run's checkpoint: evicting every step, so its rows are in caches, the write-back
  // queue and the stores when it saves.
  const std::vector<TieredRun> saved =
      RunTiered(a, plan_a.get(), tiers_a, true, nullptr, nullptr, tier_ckpt.c_str());
  ASSERT_FALSE(::testing::Test::HasFailure());
  int64_t written_back = 0;
  for (const TieredRun& r : saved)
    for (const auto& st : r.stats) written_back += st.write_backs;
  EXPECT_GT(written_back, 0) << "the saved run never wrote a row back";

  shardrec_checkpoint_options_t partial;
  shardrec_checkpoint_options_init(&partial, SHARDREC_CHECKPOINT_OPTIONS_VERSION);
  partial.allow_partial_load = 1;
  struct Case {
    const char* what;
    const std::string* ckpt;
    bool tiered;
    const shardrec_checkpoint_options_t* options;
  };
  const Case cases[] = {{"tiered -> memory", &tier_ckpt, false, nullptr},
                        {"tiered -> tiered", &tier_ckpt, true, nullptr},
                        {"memory -> tiered", &mem_ckpt, true, nullptr},
                        {"tiered -> tiered, partial load", &tier_ckpt, true, &partial}};
  for (const Case& c : cases) {
    std::filesystem::remove_all(dir_b);
    const std::vector<TieredRun> got =
        RunTiered(b, plan_b.get(), c.tiered ? tiers_b : std::vector<shardrec_table_tier_t>{}, false,
                  nullptr, c.ckpt->c_str(), nullptr, c.options);
    ASSERT_FALSE(::testing::Test::HasFailure()) << c.what;
    ExpectSameRuns(got, want, c.what);
  }
}

INSTANTIATE_TEST_SUITE_P(Worlds, TieredCheckpoint,
                         ::testing::Values(Param{SHARDREC_SHARDING_ROW_WISE, 3, 1, 1, 1},
                                           Param{SHARDREC_SHARDING_ROW_WISE, 3, 1, 2, 2},
                                           Param{SHARDREC_SHARDING_ROW_WISE, 3, 1, 1, 2},
                                           Param{SHARDREC_SHARDING_ROW_WISE, 3, 1, 2, 1},
                                           Param{SHARDREC_SHARDING_COLUMN_WISE, 2, 2, 2, 1},
                                           Param{SHARDREC_SHARDING_COLUMN_WISE, 2, 0, 1, 2},
                                           Param{SHARDREC_SHARDING_TABLE_WISE, 1, 0, 2, 2}),
                         Name);

// A corrupt checkpoint fails the load (checked before anything is written) and leaves a tiered
// collection's rows and states as they were, staged or partial.
TEST(TieredCheckpointLoad, ACorruptCheckpointChangesNothing) {
  const Scenario s =
      TieredScenario(1, SHARDREC_SHARDING_ROW_WISE, 3, 0, SHARDREC_POOLING_SUM, false);
  PlanPtr plan = MakePlan(s);
  ASSERT_NE(plan, nullptr);
  const std::string root = FreshDir("ckpt_corrupt");
  std::filesystem::create_directories(root);
  const std::string ckpt = root + "/ckpt";
  RunTiered(s, plan.get(), {}, false, nullptr, nullptr, ckpt.c_str());
  ASSERT_FALSE(::testing::Test::HasFailure());
  // Flip a byte near the end of the rank file: inside the last record's rows.
  std::string file;
  for (const auto& e : std::filesystem::directory_iterator(ckpt))
    if (e.path().extension() == ".safetensors") file = e.path().string();
  ASSERT_FALSE(file.empty());
  {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(-3, std::ios::end);
    char byte = 0;
    f.read(&byte, 1);
    byte = static_cast<char>(byte ^ 0x5a);
    f.seekp(-3, std::ios::end);
    f.write(&byte, 1);
  }
  ExpectLoadRefusedUnchanged(s, plan.get(), ckpt, root + "/stores", false, SHARDREC_ECORRUPT, "");
}

// reset_optimizer_state (a checkpoint of another optimizer) zeroes a tiered table's states
// through the same chunked path as an in-memory table's: both collections end with the
// checkpoint's weights and zero states, the same bits.
TEST(TieredCheckpointLoad, ResetOptimizerStateZeroesTieredStates) {
  const Scenario adam =
      TieredScenario(1, SHARDREC_SHARDING_ROW_WISE, 3, 0, SHARDREC_POOLING_SUM, false);
  const Scenario s =
      TieredScenario(1, SHARDREC_SHARDING_ROW_WISE, 1, 0, SHARDREC_POOLING_SUM, false);
  PlanPtr plan_adam = MakePlan(adam), plan = MakePlan(s);
  ASSERT_NE(plan_adam, nullptr);
  ASSERT_NE(plan, nullptr);
  const std::string root = FreshDir("ckpt_reset");
  std::filesystem::create_directories(root);
  const std::string ckpt = root + "/ckpt";
  RunTiered(adam, plan_adam.get(), {}, false, nullptr, nullptr, ckpt.c_str());
  ASSERT_FALSE(::testing::Test::HasFailure());
  const std::string stores = root + "/stores";
  const std::vector<shardrec_table_tier_t> tiers = SmallTiers(s, stores);
  const shardrec_optimizer_config_t opt = ToCOptimizer(s.optimizer);
  std::vector<std::vector<float>> snaps[2];
  for (int tiered = 0; tiered < 2; ++tiered) {
    shardrec_embedding_options_t o;
    shardrec_embedding_options_init(&o, SHARDREC_EMBEDDING_OPTIONS_VERSION);
    o.seed = s.seed;
    if (tiered != 0) {
      o.tiers = tiers.data();
      o.num_tiers = tiers.size();
    }
    shardrec_embedding_t* c = nullptr;
    ASSERT_EQ(shardrec_embedding_create(&c, plan.get(), GroupComm(1, 0), &opt, &o), SHARDREC_OK)
        << shardrec_last_error();
    CollPtr coll(c);
    // Nonzero states, so that the reset has something to zero.
    for (const RefTable& t : s.tables) {
      const std::vector<float> ones(static_cast<size_t>(t.rows * t.dim), 1.0f);
      ASSERT_EQ(
          shardrec_embedding_set_state(c, t.name.c_str(), "momentum1", ones.data(), ones.size()),
          SHARDREC_OK)
          << shardrec_last_error();
    }
    shardrec_checkpoint_options_t lo;
    shardrec_checkpoint_options_init(&lo, SHARDREC_CHECKPOINT_OPTIONS_VERSION);
    lo.reset_optimizer_state = 1;
    ASSERT_EQ(shardrec_checkpoint_load(c, ckpt.c_str(), &lo), SHARDREC_OK) << shardrec_last_error();
    snaps[tiered] = Snapshot(c, s);
    for (const RefTable& t : s.tables) {
      std::vector<float> state(static_cast<size_t>(t.rows * t.dim), -1.0f);
      ASSERT_EQ(
          shardrec_embedding_get_state(c, t.name.c_str(), "momentum1", state.data(), state.size()),
          SHARDREC_OK)
          << shardrec_last_error();
      EXPECT_EQ(state, std::vector<float>(state.size(), 0.0f))
          << "tiered " << tiered << " table " << t.name;
    }
  }
  ASSERT_EQ(snaps[1].size(), snaps[0].size());
  for (size_t k = 0; k < snaps[0].size(); ++k)
    EXPECT_EQ(FirstBitDifference(snaps[1][k], snaps[0][k]), "") << "snapshot " << k;
}

}  // namespace
}  // namespace shardrec::testing
