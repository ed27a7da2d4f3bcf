// Shared helpers of the tiered-table tests (tiered_test_util.h).
#include "tiered_test_util.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <utility>

#include "shardrec/checkpoint.h"
#include "tests/support/spawn_ranks.h"

namespace shardrec::testing {

Scenario TieredScenario(int32_t world, int32_t sharding, int32_t optimizer, int32_t dtype,
                        int32_t pooling, bool weighted) {
  Scenario s;
  s.world = world;
  s.ranks_per_node = world;
  s.num_features = 4;
  RefTable t0{"t0", 200, 8, pooling, {0}, 1, -0.5f, 0.5f, dtype};
  RefTable t1{"t1", 300, 12, pooling, {1, 2}, 0, 0, 0, dtype};
  RefTable t2{"t2", 120, 16, pooling, {3}, 1, -0.25f, 0.25f, dtype};
  s.tables = {t0, t1, t2};
  s.sharding.assign(s.tables.size(), sharding);
  s.optimizer.type = optimizer;
  s.optimizer.lr = 0.05f;
  s.weighted = weighted;
  s.batch_sizes.assign(static_cast<size_t>(world), 6);
  s.max_bag = 4;
  s.steps = 6;
  return s;
}

int64_t CacheBytesFor(const Scenario& s, size_t t, int64_t slots) {
  const RefTable& rt = s.tables[t];
  const int64_t dsize = rt.dtype == 0 ? 4 : 2;
  int64_t state = 0;
  switch (s.optimizer.type) {
    case 1:
      state = rt.dim;
      break;  // Adagrad
    case 2:
      state = 1;
      break;  // row-wise Adagrad
    case 3:
      state = 2 * rt.dim;
      break;  // Adam
    case 4:
      state = rt.dim + 1;
      break;  // partial row-wise Adam
    case 5:
      state = 2 * rt.dim;
      break;  // LAMB
    default:
      break;
  }
  const int64_t slot = rt.dim * dsize + state * 4 + 32;
  const int64_t shards = s.sharding[t] == SHARDREC_SHARDING_COLUMN_WISE ? rt.dim / 4 : 1;
  return slots * slot * shards;
}

std::vector<TieredRun> RunTiered(
    const Scenario& s, const shardrec_plan_t* plan, const std::vector<shardrec_table_tier_t>& tiers,
    bool pipelined, const Scenario* snapshot, const char* load_dir, const char* save_dir,
    const shardrec_checkpoint_options_t* load_options,
    const std::function<void(shardrec_embedding_t*, int32_t)>& after_backward) {
  ReferenceModel ref(s.num_features, s.tables, s.optimizer, s.seed, s.world);
  const auto batches = MakeBatches(s, ref);
  const auto grads = MakeGrads(s, batches, ref.output_dim());
  const shardrec_optimizer_config_t opt = ToCOptimizer(s.optimizer);
  std::vector<TieredRun> runs(static_cast<size_t>(s.world));
  SpawnRanks(s.world, [&](int r) {
    std::vector<std::string> dirs;
    std::vector<shardrec_table_tier_t> mine = tiers;
    for (auto& t : mine) dirs.push_back(std::string(t.dir) + "/rank" + std::to_string(r));
    for (size_t i = 0; i < mine.size(); ++i) mine[i].dir = dirs[i].c_str();
    shardrec_embedding_options_t o;
    shardrec_embedding_options_init(&o, SHARDREC_EMBEDDING_OPTIONS_VERSION);
    o.seed = s.seed;
    o.tiers = mine.empty() ? nullptr : mine.data();
    o.num_tiers = mine.size();
    shardrec_embedding_t* c = nullptr;
    ASSERT_EQ(shardrec_embedding_create(&c, plan, GroupComm(s.world, r), &opt, &o), SHARDREC_OK)
        << "rank " << r << ": " << shardrec_last_error();
    CollPtr coll(c);
    if (load_dir != nullptr) {
      ASSERT_EQ(shardrec_checkpoint_load(c, load_dir, load_options), SHARDREC_OK)
          << "rank " << r << ": " << shardrec_last_error();
    }
    TieredRun& run = runs[static_cast<size_t>(r)];
    const auto out_len = [&](int32_t step) {
      return static_cast<size_t>(batches[step][r].batch_size * ref.output_dim());
    };
    // The last forward reuses the first batch: it shows the last update.
    const auto batch_of = [&](int32_t step) { return step < s.steps ? step : 0; };
    std::vector<KjtHolder> kjts;
    for (int32_t step = 0; step <= s.steps; ++step)
      kjts.emplace_back(batches[batch_of(step)][r], s.num_features, s.int32_ids);
    if (pipelined) {
      ASSERT_EQ(shardrec_embedding_input_dist_start(c, kjts[0].view(), nullptr), SHARDREC_OK)
          << shardrec_last_error();
    }
    for (int32_t step = 0; step <= s.steps; ++step) {
      std::vector<float> out(out_len(batch_of(step)));
      if (pipelined) {
        ASSERT_EQ(shardrec_embedding_input_dist_wait(c, nullptr), SHARDREC_OK)
            << shardrec_last_error();
        ASSERT_EQ(shardrec_embedding_forward_distributed(c, out.data(), out.size(), nullptr),
                  SHARDREC_OK)
            << "rank " << r << " step " << step << ": " << shardrec_last_error();
        // The next batch's ids travel (and its misses are read) while this one trains.
        if (step < s.steps) {
          ASSERT_EQ(shardrec_embedding_input_dist_start(c, kjts[step + 1].view(), nullptr),
                    SHARDREC_OK)
              << shardrec_last_error();
        }
      } else {
        ASSERT_EQ(shardrec_embedding_forward(c, kjts[step].view(), out.data(), out.size(), nullptr),
                  SHARDREC_OK)
            << "rank " << r << " step " << step << ": " << shardrec_last_error();
      }
      run.out.push_back(std::move(out));
      if (step == s.steps) break;
      ASSERT_EQ(
          shardrec_embedding_backward(c, grads[step][r].data(), grads[step][r].size(), nullptr),
          SHARDREC_OK)
          << "rank " << r << " step " << step << ": " << shardrec_last_error();
      if (after_backward) after_backward(c, step);
    }
    run.snap = Snapshot(c, snapshot != nullptr ? *snapshot : s);
    if (save_dir != nullptr) {
      ASSERT_EQ(shardrec_checkpoint_save(c, save_dir, nullptr), SHARDREC_OK)
          << "rank " << r << ": " << shardrec_last_error();
    }
    for (const shardrec_table_tier_t& t : mine) {
      shardrec_tier_stats_t st;
      shardrec_tier_stats_init(&st, SHARDREC_TIER_STATS_VERSION);
      const shardrec_status_t rc = shardrec_embedding_tier_stats(c, t.table, &st);
      // A rank may hold no shard of a table-wise table.
      if (rc != SHARDREC_OK) std::memset(&st, 0, sizeof(st));
      run.stats.push_back(st);
    }
  });
  return runs;
}

std::string FirstBitDifference(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size())
    return "sizes " + std::to_string(a.size()) + " and " + std::to_string(b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    uint32_t x, y;
    std::memcpy(&x, &a[i], 4);
    std::memcpy(&y, &b[i], 4);
    if (x != y)
      return "element " + std::to_string(i) + ": " + std::to_string(a[i]) + " vs " +
             std::to_string(b[i]);
  }
  return "";
}

std::vector<shardrec_table_tier_t> SmallTiers(const Scenario& s, const std::string& dir) {
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

void ExpectSameRuns(const std::vector<TieredRun>& got, const std::vector<TieredRun>& want,
                    const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t r = 0; r < want.size(); ++r) {
    ASSERT_EQ(got[r].out.size(), want[r].out.size()) << what << ": rank " << r;
    for (size_t f = 0; f < want[r].out.size(); ++f)
      EXPECT_EQ(FirstBitDifference(got[r].out[f], want[r].out[f]), "")
          << what << ": rank " << r << " forward " << f;
    ASSERT_EQ(got[r].snap.size(), want[r].snap.size()) << what << ": rank " << r;
    for (size_t k = 0; k < want[r].snap.size(); ++k)
      EXPECT_EQ(FirstBitDifference(got[r].snap[k], want[r].snap[k]), "")
          << what << ": rank " << r << " table state " << k;
  }
}

void ExpectLoadRefusedUnchanged(const Scenario& s, const shardrec_plan_t* plan,
                                const std::string& ckpt, const std::string& stores,
                                bool also_in_memory, shardrec_status_t code,
                                const std::string& says) {
  const shardrec_optimizer_config_t opt = ToCOptimizer(s.optimizer);
  const std::vector<shardrec_table_tier_t> tiers = SmallTiers(s, stores);
  for (bool tiered : {true, false}) {
    if (!tiered && !also_in_memory) continue;
    std::filesystem::remove_all(stores);
    shardrec_embedding_options_t o;
    shardrec_embedding_options_init(&o, SHARDREC_EMBEDDING_OPTIONS_VERSION);
    o.seed = s.seed;
    o.tiers = tiered ? tiers.data() : nullptr;
    o.num_tiers = tiered ? tiers.size() : 0;
    shardrec_embedding_t* c = nullptr;
    ASSERT_EQ(shardrec_embedding_create(&c, plan, GroupComm(1, 0), &opt, &o), SHARDREC_OK)
        << shardrec_last_error();
    CollPtr coll(c);
    const std::vector<std::vector<float>> before = Snapshot(c, s);
    for (bool partial : {false, true}) {
      shardrec_checkpoint_options_t lo;
      shardrec_checkpoint_options_init(&lo, SHARDREC_CHECKPOINT_OPTIONS_VERSION);
      lo.allow_partial_load = partial;
      lo.verify_first = partial;
      EXPECT_EQ(shardrec_checkpoint_load(c, ckpt.c_str(), &lo), code)
          << "tiered " << tiered << " partial " << partial << ": " << shardrec_last_error();
      EXPECT_NE(std::string(shardrec_last_error()).find(says), std::string::npos)
          << shardrec_last_error();
      const std::vector<std::vector<float>> after = Snapshot(c, s);
      ASSERT_EQ(after.size(), before.size());
      for (size_t k = 0; k < before.size(); ++k)
        EXPECT_EQ(FirstBitDifference(after[k], before[k]), "")
            << "tiered " << tiered << " partial " << partial << " " << k;
    }
  }
}

nlohmann::json ReadManifest(const std::string& ckpt) {
  std::ifstream f(ckpt + "/manifest.json");
  return nlohmann::json::parse(f);
}

std::vector<std::string> StoreDirs(const std::string& ckpt) {
  std::vector<std::string> out;
  const nlohmann::json m = ReadManifest(ckpt);
  for (const auto& f : m.at("files"))
    if (f.contains("store")) out.push_back(ckpt + "/" + f.at("name").get<std::string>());
  return out;
}

std::vector<std::string> Segments(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().extension() == ".dat") out.push_back(e.path().string());
  return out;
}

FileIds StoreFileIds(const std::vector<std::string>& stores) {
  FileIds out;
  for (const std::string& root : stores) {
    if (!std::filesystem::exists(root)) continue;  // a rank without a shard of the table
    for (const auto& e : std::filesystem::recursive_directory_iterator(root)) {
      struct stat st {};
      if (::stat(e.path().c_str(), &st) == 0)
        out[e.path().string()] = {static_cast<uint64_t>(st.st_dev),
                                  static_cast<uint64_t>(st.st_ino)};
    }
  }
  return out;
}

size_t ExpectSegmentsAreTheStores(const std::string& ckpt, const std::vector<std::string>& stores,
                                  int rank, const FileIds* before) {
  // Each store's directory by its identity (which its MANIFEST holds and the checkpoint names).
  std::vector<std::pair<std::string, std::string>> manifests;  // (directory, MANIFEST bytes)
  for (const std::string& root : stores) {
    if (!std::filesystem::exists(root)) continue;
    for (const auto& e : std::filesystem::recursive_directory_iterator(root)) {
      if (e.path().filename() != "MANIFEST") continue;
      std::ifstream f(e.path(), std::ios::binary);
      manifests.emplace_back(e.path().parent_path().string(),
                             std::string(std::istreambuf_iterator<char>(f), {}));
    }
  }
  size_t linked = 0;
  const std::string mine = "-rank" + std::to_string(rank) + "-";
  const nlohmann::json m = ReadManifest(ckpt);
  for (const auto& entry : m.at("files")) {
    if (!entry.contains("store")) continue;
    const std::string name = entry.at("name").get<std::string>();
    if (rank >= 0 && name.find(mine) == std::string::npos) continue;
    const std::string identity = entry.at("store").at("identity").get<std::string>();
    std::string store;
    for (const auto& [dir, bytes] : manifests)
      if (bytes.find(identity) != std::string::npos) store = dir;
    EXPECT_FALSE(store.empty()) << name << ": no store of identity " << identity;
    for (const std::string& seg : Segments(ckpt + "/" + name)) {
      struct stat got {
      }, own{};
      EXPECT_EQ(::stat(seg.c_str(), &got), 0) << seg;
      const std::pair<uint64_t, uint64_t> id = {static_cast<uint64_t>(got.st_dev),
                                                static_cast<uint64_t>(got.st_ino)};
      const std::string in_store = store + "/" + std::filesystem::path(seg).filename().string();
      const auto was = before != nullptr ? before->find(in_store) : FileIds::const_iterator{};
      if (before != nullptr && was != before->end()) {
        EXPECT_TRUE(was->second == id) << seg << " is not the file " << in_store << " was";
        ++linked;
      } else if (::stat(in_store.c_str(), &own) == 0) {
        EXPECT_GE(got.st_nlink, 2u) << seg << " was copied, not linked";
        EXPECT_TRUE(got.st_dev == own.st_dev && got.st_ino == own.st_ino)
            << seg << " is not the file " << in_store;
        ++linked;
      } else {
        EXPECT_EQ(got.st_nlink, 1u) << seg;
      }
    }
  }
  return linked;
}

void DamageSegments(const std::string& dir, uint64_t value_bytes) {
  const uint64_t record = value_bytes + 16, page = 4096;
  for (const std::string& seg : Segments(dir)) {
    std::fstream f(seg, std::ios::in | std::ios::out | std::ios::binary);
    const uint64_t size = std::filesystem::file_size(seg);
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
}

void EditedCopy(const std::string& from, const std::string& to,
                const std::function<void(nlohmann::json&)>& edit) {
  std::filesystem::copy(from, to, std::filesystem::copy_options::recursive);
  nlohmann::json m = ReadManifest(to);
  m.erase("manifest_xxh3");
  edit(m);
  std::ofstream(to + "/manifest.json", std::ios::trunc) << m.dump(1);
}

}  // namespace shardrec::testing
