// Saves of fixed tiered tables by store snapshot (docs/disk-tier.md, "Checkpoints";
// docs/checkpoint-format.md, version 4): the checkpoint shares the stores' segment files (hard
// links, no copy of a row), loads bit for bit into in-memory and tiered collections at other
// world sizes and trains on as an in-memory run does; a damaged or missing snapshot segment is
// refused and changes nothing; serving reads the snapshot as it reads a rank file; a reader of
// an older format refuses the version.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "shardrec/checkpoint.h"
#include "shardrec/inference.h"
#include "tiered_test_util.h"

namespace shardrec::testing {
namespace {

namespace fs = std::filesystem;

struct Param {
  int32_t save_world, load_world;
};

class TieredSnapshot : public ::testing::TestWithParam<Param> {};

TEST_P(TieredSnapshot, SharesTheStoresSegmentsAndLoadsBitForBit) {
  const Param& p = GetParam();
  const std::string name =
      "snap_w" + std::to_string(p.save_world) + "to" + std::to_string(p.load_world);
  const Scenario a =
      TieredScenario(p.save_world, SHARDREC_SHARDING_ROW_WISE, 3, 1, SHARDREC_POOLING_SUM, true);
  Scenario b =
      TieredScenario(p.load_world, SHARDREC_SHARDING_ROW_WISE, 3, 1, SHARDREC_POOLING_SUM, true);
  b.data_seed = a.data_seed + 1;
  PlanPtr plan_a = MakePlan(a), plan_b = MakePlan(b);
  ASSERT_NE(plan_a, nullptr);
  ASSERT_NE(plan_b, nullptr);
  const std::string root = FreshDir(name);
  fs::create_directories(root);
  const std::string mem_ckpt = root + "/memory", tier_ckpt = root + "/tiered";
  const std::string stores_a = root + "/stores_a", stores_b = root + "/stores_b";

  RunTiered(a, plan_a.get(), {}, false, nullptr, nullptr, mem_ckpt.c_str());
  ASSERT_FALSE(::testing::Test::HasFailure());
  const std::vector<TieredRun> want =
      RunTiered(b, plan_b.get(), {}, false, nullptr, mem_ckpt.c_str());
  ASSERT_FALSE(::testing::Test::HasFailure());
  RunTiered(a, plan_a.get(), SmallTiers(a, stores_a), true, nullptr, nullptr, tier_ckpt.c_str());
  ASSERT_FALSE(::testing::Test::HasFailure());

  // Every table is tiered: the checkpoint holds store snapshots only (no rank file, no row
  // copied), version 4, and each snapshot segment is the store's own file (same inode).
  const nlohmann::json m = ReadManifest(tier_ckpt);
  EXPECT_EQ(m.at("format_version").get<int>(), 4);
  EXPECT_EQ(ReadManifest(mem_ckpt).at("format_version").get<int>(), 1);
  for (const auto& e : fs::directory_iterator(tier_ckpt))
    EXPECT_NE(e.path().extension(), ".safetensors") << e.path();
  // Three tables, each in one shard per rank (row-wise).
  EXPECT_EQ(StoreDirs(tier_ckpt).size(), static_cast<size_t>(3 * a.world));
  EXPECT_GT(ExpectSegmentsAreTheStores(tier_ckpt, {stores_a}), 0u);

  struct Case {
    const char* what;
    bool tiered;
  };
  for (const Case c : {Case{"snapshot -> memory", false}, Case{"snapshot -> tiered", true}}) {
    fs::remove_all(stores_b);
    const std::vector<TieredRun> got = RunTiered(
        b, plan_b.get(), c.tiered ? SmallTiers(b, stores_b) : std::vector<shardrec_table_tier_t>{},
        false, nullptr, tier_ckpt.c_str());
    ASSERT_FALSE(::testing::Test::HasFailure()) << c.what;
    ExpectSameRuns(got, want, c.what);
  }
}

INSTANTIATE_TEST_SUITE_P(Worlds, TieredSnapshot,
                         ::testing::Values(Param{1, 1}, Param{1, 2}, Param{2, 1}, Param{2, 4},
                                           Param{4, 1}),
                         [](const ::testing::TestParamInfo<Param>& i) {
                           return "W" + std::to_string(i.param.save_world) + "To" +
                                  std::to_string(i.param.load_world);
                         });

// A tiered collection's checkpoint (store snapshots) at world 1, its scenario and plan.
struct Saved {
  Scenario s;
  PlanPtr plan;
  std::string root, ckpt;
};

Saved SaveTiered(const std::string& name) {
  Saved out;
  out.s = TieredScenario(1, SHARDREC_SHARDING_ROW_WISE, 3, 0, SHARDREC_POOLING_SUM, false);
  out.plan = MakePlan(out.s);
  out.root = FreshDir(name);
  fs::create_directories(out.root);
  out.ckpt = out.root + "/ckpt";
  if (out.plan != nullptr)
    RunTiered(out.s, out.plan.get(), SmallTiers(out.s, out.root + "/stores_saved"), false, nullptr,
              nullptr, out.ckpt.c_str());
  return out;
}

// Loads `ckpt` into a tiered and an in-memory collection of `sv`: refused with `code` (a message
// holding `says`), changing nothing.
void ExpectRefusedUnchanged(const Saved& sv, const std::string& ckpt, shardrec_status_t code,
                            const std::string& says) {
  ExpectLoadRefusedUnchanged(sv.s, sv.plan.get(), ckpt, sv.root + "/stores_load", true, code, says);
}

TEST(TieredSnapshotLoad, ADamagedOrMissingSegmentIsRefusedAndChangesNothing) {
  const Saved sv = SaveTiered("snap_corrupt");
  ASSERT_NE(sv.plan, nullptr);
  ASSERT_FALSE(::testing::Test::HasFailure());
  const std::vector<std::string> snaps = StoreDirs(sv.ckpt);
  ASSERT_FALSE(snaps.empty());
  const uint64_t value_bytes =
      ReadManifest(sv.ckpt).at("files").at(0).at("store").at("value_bytes").get<uint64_t>();
  // Damaged: one byte of every record slot of one snapshot's segments (a copy of the checkpoint,
  // its segments copied rather than linked, so the original stays whole).
  const std::string damaged = sv.root + "/damaged";
  fs::copy(sv.ckpt, damaged, fs::copy_options::recursive);
  const std::string victim = damaged + "/" + fs::path(snaps[0]).filename().string();
  ASSERT_FALSE(Segments(victim).empty());
  DamageSegments(victim, value_bytes);
  ExpectRefusedUnchanged(sv, damaged, SHARDREC_ECORRUPT, "checksum");

  // Missing: a segment file of one snapshot removed.
  const std::string missing = sv.root + "/missing";
  fs::copy(sv.ckpt, missing, fs::copy_options::recursive);
  const std::vector<std::string> msegs =
      Segments(missing + "/" + fs::path(snaps[0]).filename().string());
  ASSERT_FALSE(msegs.empty());
  fs::remove(msegs[0]);
  ExpectRefusedUnchanged(sv, missing, SHARDREC_ECORRUPT, "is missing");

  // The intact checkpoint still loads.
  const std::vector<TieredRun> ok =
      RunTiered(sv.s, sv.plan.get(), {}, false, nullptr, sv.ckpt.c_str());
  EXPECT_FALSE(::testing::Test::HasFailure());
}

TEST(TieredSnapshotLoad, ANewerVersionIsRefused) {
  const Saved sv = SaveTiered("snap_version");
  ASSERT_NE(sv.plan, nullptr);
  ASSERT_FALSE(::testing::Test::HasFailure());
  const std::string newer = sv.root + "/newer";
  fs::copy(sv.ckpt, newer, fs::copy_options::recursive);
  {
    std::ifstream f(newer + "/manifest.json");
    std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    const std::string key = "\"format_version\": 4";
    const size_t at = text.find(key);
    ASSERT_NE(at, std::string::npos) << text.substr(0, 200);
    // Version 5 (dynamic tables' snapshots) is read too: 6 is the first this library does not.
    text.replace(at, key.size(), "\"format_version\": 6");
    std::ofstream(newer + "/manifest.json", std::ios::trunc) << text;
  }
  ExpectRefusedUnchanged(sv, newer, SHARDREC_EUNSUPPORTED, "version 6");
}

TEST(TieredSnapshotLoad, AManifestThatMisdescribesItsSnapshotIsRefused) {
  const Saved sv = SaveTiered("snap_misdescribed");
  ASSERT_NE(sv.plan, nullptr);
  ASSERT_FALSE(::testing::Test::HasFailure());
  // The snapshot's MANIFEST checksum: another snapshot's (or a damaged) MANIFEST.
  EditedCopy(sv.ckpt, sv.root + "/other_manifest", [](nlohmann::json& m) {
    auto& st = m.at("files").at(0).at("store");
    st["manifest_xxh3"] = st.at("manifest_xxh3").get<uint64_t>() ^ 1;
  });
  ExpectRefusedUnchanged(sv, sv.root + "/other_manifest", SHARDREC_ECORRUPT,
                         "does not match the checkpoint's manifest");
  // Records of a snapshot in an entry that is not one (a rank file's name in their place).
  EditedCopy(sv.ckpt, sv.root + "/not_a_store",
             [](nlohmann::json& m) { m.at("files").at(0).erase("store"); });
  ExpectRefusedUnchanged(sv, sv.root + "/not_a_store", SHARDREC_ECORRUPT, "does not fit");
  // A record reaching past the store's records.
  EditedCopy(sv.ckpt, sv.root + "/past_the_record", [](nlohmann::json& m) {
    auto& f = m.at("files").at(0);
    f.at("records").at(0)["store_offset"] = f.at("store").at("value_bytes").get<uint64_t>();
  });
  ExpectRefusedUnchanged(sv, sv.root + "/past_the_record", SHARDREC_ECORRUPT, "does not fit");
}

// A save killed after it made a store snapshot directory leaves it behind, unnamed by any
// manifest (capi_tiered_kill_test kills saves): the next successful save into the directory
// removes every such directory, whatever its generation, rank or shard, and nothing else.
TEST(TieredSnapshotSave, ASaveRemovesSnapshotsNoManifestNames) {
  const Saved sv = SaveTiered("snap_stray");
  ASSERT_NE(sv.plan, nullptr);
  ASSERT_FALSE(::testing::Test::HasFailure());
  // As a killed save of the next generation under another plan (shard 7) and of a later one
  // (rank 3) would leave them; and a directory of the user's that only looks alike.
  const std::vector<std::string> strays = {sv.ckpt + "/g2-rank0-shard7.store",
                                           sv.ckpt + "/g9-rank3-shard0.store"};
  const std::string kept = sv.ckpt + "/g2-rank0-shard7.store.mine";
  for (const std::string& d : {strays[0], strays[1], kept}) {
    fs::create_directories(d);
    std::ofstream(d + "/MANIFEST") << "partial";
  }
  // A tiered run from the checkpoint saves generation 2 into the same directory.
  const std::vector<TieredRun> resumed =
      RunTiered(sv.s, sv.plan.get(), SmallTiers(sv.s, sv.root + "/stores_resumed"), false, nullptr,
                sv.ckpt.c_str(), sv.ckpt.c_str());
  ASSERT_FALSE(::testing::Test::HasFailure());
  EXPECT_EQ(ReadManifest(sv.ckpt).at("generation").get<int>(), 2);
  for (const std::string& d : strays) EXPECT_FALSE(fs::exists(d)) << d;
  EXPECT_TRUE(fs::exists(kept + "/MANIFEST"));
  // Every snapshot directory left is one the manifest names, and the checkpoint loads.
  const std::vector<std::string> named = StoreDirs(sv.ckpt);
  EXPECT_EQ(named.size(), 3u);
  for (const auto& e : fs::directory_iterator(sv.ckpt)) {
    if (e.path().extension() == ".store") {
      EXPECT_NE(std::find(named.begin(), named.end(), e.path().string()), named.end()) << e.path();
    }
  }
  RunTiered(sv.s, sv.plan.get(), {}, false, nullptr, sv.ckpt.c_str());
  EXPECT_FALSE(::testing::Test::HasFailure());
}

struct InferenceDeleter {
  void operator()(shardrec_inference_t* p) const { shardrec_inference_destroy(p); }
};
using InfPtr = std::unique_ptr<shardrec_inference_t, InferenceDeleter>;

InfPtr OpenServing(const std::string& ckpt, const Scenario& s, uint64_t cache_bytes) {
  std::vector<shardrec_serving_tier_t> tiers(s.tables.size());
  for (size_t t = 0; t < tiers.size(); ++t) {
    tiers[t] = SHARDREC_SERVING_TIER_INIT;
    tiers[t].table = s.tables[t].name.c_str();
    tiers[t].cache_bytes = cache_bytes;
  }
  shardrec_inference_options_t o = SHARDREC_INFERENCE_OPTIONS_INIT;
  o.tiers = cache_bytes > 0 ? tiers.data() : nullptr;
  o.num_tiers = cache_bytes > 0 ? tiers.size() : 0;
  shardrec_inference_t* raw = nullptr;
  EXPECT_EQ(shardrec_inference_open(ckpt.c_str(), &o, &raw), SHARDREC_OK)
      << ckpt << ": " << shardrec_last_error();
  return InfPtr(raw);
}

TEST(TieredSnapshotServing, ServesTheSnapshotLikeTheInMemoryCheckpoint) {
  const Saved sv = SaveTiered("snap_serving");
  ASSERT_NE(sv.plan, nullptr);
  ASSERT_FALSE(::testing::Test::HasFailure());
  const std::string mem_ckpt = sv.root + "/memory";
  RunTiered(sv.s, sv.plan.get(), {}, false, nullptr, nullptr, mem_ckpt.c_str());
  ASSERT_FALSE(::testing::Test::HasFailure());
  ASSERT_FALSE(StoreDirs(sv.ckpt).empty());
  // The in-memory run's checkpoint in memory; the snapshot checkpoint in memory and through
  // row caches of about two rows (every lookup evicts, rows read from the snapshot one by one).
  InfPtr mem = OpenServing(mem_ckpt, sv.s, 0);
  InfPtr snap_mem = OpenServing(sv.ckpt, sv.s, 0);
  InfPtr snap_disk = OpenServing(sv.ckpt, sv.s, 200);
  ASSERT_TRUE(mem && snap_mem && snap_disk);
  ReferenceModel ref(sv.s.num_features, sv.s.tables, sv.s.optimizer, sv.s.seed, sv.s.world);
  const auto batches = MakeBatches(sv.s, ref);
  int64_t dim = 0;
  ASSERT_EQ(shardrec_inference_output_dim(mem.get(), &dim), SHARDREC_OK);
  size_t compared = 0;
  for (const auto& step : batches) {
    const RefBatch& b = step[0];
    KjtHolder kjt(b, sv.s.num_features, false);
    std::vector<float> outs[3];
    shardrec_inference_t* infs[3] = {mem.get(), snap_mem.get(), snap_disk.get()};
    for (int i = 0; i < 3; ++i) {
      outs[i].assign(static_cast<size_t>(b.batch_size * dim), NAN);
      ASSERT_EQ(
          shardrec_inference_lookup(infs[i], kjt.view(), outs[i].data(), outs[i].size(), nullptr),
          SHARDREC_OK)
          << i << ": " << shardrec_last_error();
    }
    EXPECT_EQ(FirstBitDifference(outs[1], outs[0]), "") << "snapshot in memory";
    EXPECT_EQ(FirstBitDifference(outs[2], outs[0]), "") << "snapshot through a row cache";
    compared += outs[0].size();
  }
  EXPECT_GT(compared, 0u);
  shardrec_serving_tier_stats_t st = SHARDREC_SERVING_TIER_STATS_INIT;
  ASSERT_EQ(shardrec_inference_tier_stats(snap_disk.get(), sv.s.tables[0].name.c_str(), &st),
            SHARDREC_OK);
  EXPECT_GT(st.misses, 0u);
}

}  // namespace
}  // namespace shardrec::testing
