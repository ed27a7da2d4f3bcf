// Saves of fixed tiered tables by store snapshot (docs/disk-tier.md, "Checkpoints";
// docs/checkpoint-format.md, version 4): the checkpoint shares the stores' segment files (hard
// links, no copy of a row), loads bit for bit into in-memory and tiered collections at other
// world sizes and trains on as an in-memory run does; a damaged or missing snapshot segment is
// refused and changes nothing; serving reads the snapshot as it reads a rank file; a reader of
// an older format refuses the version.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "shardrec/checkpoint.h"
#include "shardrec/inference.h"
#include "tiered_test_util.h"

namespace shardrec::testing {
namespace {

namespace fs = std::filesystem;

std::vector<shardrec_table_tier_t> Tiers(const Scenario& s, const std::string& dir) {
  const bool halved = s.sharding[0] == SHARDREC_SHARDING_ROW_WISE && s.world == 2;
  const int64_t slots[] = {halved ? 40 : 52, halved ? 80 : 100, halved ? 40 : 52};
  std::vector<shardrec_table_tier_t> tiers(s.tables.size());
  for (size_t t = 0; t < tiers.size(); ++t) {
    shardrec_table_tier_init(&tiers[t], SHARDREC_TABLE_TIER_VERSION);
    tiers[t].table = s.tables[t].name.c_str();
    tiers[t].dir = dir.c_str();
    tiers[t].cache_bytes = CacheBytesFor(s, t, slots[t]);
  }
  return tiers;
}

nlohmann::json ReadManifest(const std::string& ckpt) {
  std::ifstream f(ckpt + "/manifest.json");
  return nlohmann::json::parse(f);
}

// The store snapshot directories of checkpoint `ckpt`, as its manifest names them.
std::vector<std::string> StoreDirs(const std::string& ckpt) {
  std::vector<std::string> out;
  const nlohmann::json m = ReadManifest(ckpt);
  for (const auto& f : m.at("files"))
    if (f.contains("store")) out.push_back(ckpt + "/" + f.at("name").get<std::string>());
  return out;
}

std::vector<std::string> Segments(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".dat") out.push_back(e.path().string());
  return out;
}

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
  RunTiered(a, plan_a.get(), Tiers(a, stores_a), true, nullptr, nullptr, tier_ckpt.c_str());
  ASSERT_FALSE(::testing::Test::HasFailure());

  // Every table is tiered: the checkpoint holds store snapshots only (no rank file, no row
  // copied), version 4, and each snapshot segment is the store's own file (same inode).
  const nlohmann::json m = ReadManifest(tier_ckpt);
  EXPECT_EQ(m.at("format_version").get<int>(), 4);
  EXPECT_EQ(ReadManifest(mem_ckpt).at("format_version").get<int>(), 1);
  for (const auto& e : fs::directory_iterator(tier_ckpt))
    EXPECT_NE(e.path().extension(), ".safetensors") << e.path();
  std::set<std::pair<dev_t, ino_t>> store_files;
  for (const auto& e : fs::recursive_directory_iterator(stores_a)) {
    struct stat st {};
    if (e.is_regular_file() && ::stat(e.path().c_str(), &st) == 0)
      store_files.insert({st.st_dev, st.st_ino});
  }
  const std::vector<std::string> snaps = StoreDirs(tier_ckpt);
  // Three tables, each in one shard per rank (row-wise).
  EXPECT_EQ(snaps.size(), static_cast<size_t>(3 * a.world));
  size_t segments = 0;
  for (const std::string& d : snaps) {
    for (const std::string& seg : Segments(d)) {
      struct stat st {};
      ASSERT_EQ(::stat(seg.c_str(), &st), 0) << seg;
      EXPECT_GE(st.st_nlink, 2u) << seg << " was copied, not linked";
      EXPECT_EQ(store_files.count({st.st_dev, st.st_ino}), 1u) << seg << " is not a store's file";
      ++segments;
    }
  }
  EXPECT_GT(segments, 0u);

  struct Case {
    const char* what;
    bool tiered;
  };
  for (const Case c : {Case{"snapshot -> memory", false}, Case{"snapshot -> tiered", true}}) {
    fs::remove_all(stores_b);
    const std::vector<TieredRun> got = RunTiered(
        b, plan_b.get(), c.tiered ? Tiers(b, stores_b) : std::vector<shardrec_table_tier_t>{},
        false, nullptr, tier_ckpt.c_str());
    ASSERT_FALSE(::testing::Test::HasFailure()) << c.what;
    for (int32_t r = 0; r < b.world; ++r) {
      for (size_t f = 0; f < want[r].out.size(); ++f)
        EXPECT_EQ(FirstBitDifference(got[r].out[f], want[r].out[f]), "")
            << c.what << ": rank " << r << " forward " << f;
      ASSERT_EQ(got[r].snap.size(), want[r].snap.size());
      for (size_t k = 0; k < want[r].snap.size(); ++k)
        EXPECT_EQ(FirstBitDifference(got[r].snap[k], want[r].snap[k]), "")
            << c.what << ": rank " << r << " table state " << k;
    }
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
    RunTiered(out.s, out.plan.get(), Tiers(out.s, out.root + "/stores_saved"), false, nullptr,
              nullptr, out.ckpt.c_str());
  return out;
}

// Loads `ckpt` into a tiered and an in-memory collection of `sv`, staged and partial with
// verify_first; each load must fail with `code` (and a message holding `says`) and leave the
// collection as it was.
void ExpectRefusedUnchanged(const Saved& sv, const std::string& ckpt, shardrec_status_t code,
                            const std::string& says) {
  const shardrec_optimizer_config_t opt = ToCOptimizer(sv.s.optimizer);
  const std::string stores = sv.root + "/stores_load";
  const std::vector<shardrec_table_tier_t> tiers = Tiers(sv.s, stores);
  for (bool tiered : {true, false}) {
    fs::remove_all(stores);
    shardrec_embedding_options_t o;
    shardrec_embedding_options_init(&o, SHARDREC_EMBEDDING_OPTIONS_VERSION);
    o.seed = sv.s.seed;
    o.tiers = tiered ? tiers.data() : nullptr;
    o.num_tiers = tiered ? tiers.size() : 0;
    shardrec_embedding_t* c = nullptr;
    ASSERT_EQ(shardrec_embedding_create(&c, sv.plan.get(), GroupComm(1, 0), &opt, &o), SHARDREC_OK)
        << shardrec_last_error();
    CollPtr coll(c);
    const std::vector<std::vector<float>> before = Snapshot(c, sv.s);
    for (bool partial : {false, true}) {
      shardrec_checkpoint_options_t lo;
      shardrec_checkpoint_options_init(&lo, SHARDREC_CHECKPOINT_OPTIONS_VERSION);
      lo.allow_partial_load = partial;
      lo.verify_first = partial;
      EXPECT_EQ(shardrec_checkpoint_load(c, ckpt.c_str(), &lo), code)
          << "tiered " << tiered << " partial " << partial << ": " << shardrec_last_error();
      EXPECT_NE(std::string(shardrec_last_error()).find(says), std::string::npos)
          << shardrec_last_error();
      const std::vector<std::vector<float>> after = Snapshot(c, sv.s);
      ASSERT_EQ(after.size(), before.size());
      for (size_t k = 0; k < before.size(); ++k)
        EXPECT_EQ(FirstBitDifference(after[k], before[k]), "")
            << "tiered " << tiered << " partial " << partial << " " << k;
    }
  }
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
  const std::vector<std::string> segs = Segments(victim);
  ASSERT_FALSE(segs.empty());
  const uint64_t record = value_bytes + 16, page = 4096;
  for (const std::string& seg : segs) {
    std::fstream f(seg, std::ios::in | std::ios::out | std::ios::binary);
    const uint64_t size = fs::file_size(seg);
    for (uint64_t at = page; at + page <= size; at += page) {
      for (uint64_t slot = 0; (slot + 1) * record <= page || (slot == 0 && record > page); ++slot) {
        const uint64_t byte = at + slot * record + 9;  // inside the value
        char c = 0;
        f.seekg(static_cast<std::streamoff>(byte));
        f.read(&c, 1);
        c = static_cast<char>(c ^ 0x21);
        f.seekp(static_cast<std::streamoff>(byte));
        f.write(&c, 1);
        if (record > page) break;
      }
    }
  }
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
    text.replace(at, key.size(), "\"format_version\": 5");
    std::ofstream(newer + "/manifest.json", std::ios::trunc) << text;
  }
  ExpectRefusedUnchanged(sv, newer, SHARDREC_EUNSUPPORTED, "version 5");
}

// A copy of checkpoint `from` at `to` whose manifest `edit` changed (written without its
// checksum member, which a manifest may lack, so the edit itself is what the load meets).
template <typename Edit>
void EditedCopy(const std::string& from, const std::string& to, Edit edit) {
  fs::copy(from, to, fs::copy_options::recursive);
  nlohmann::json m = ReadManifest(to);
  m.erase("manifest_xxh3");
  edit(m);
  std::ofstream(to + "/manifest.json", std::ios::trunc) << m.dump(1);
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
