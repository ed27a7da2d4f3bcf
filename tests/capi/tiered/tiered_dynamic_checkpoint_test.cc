// Checkpoints, table exports and deltas of tiered dynamic tables (docs/disk-tier.md, "Tiered
// dynamic tables") through the C API: a run trains a stream with caches small enough to evict
// every step, marks its tables, saves a checkpoint, exports each table with its optimizer state
// and takes each table's delta; the checkpoint loads into a tiered or an in-memory collection of
// another world size, which exports again and trains on. Every combination (saved tiered or in
// memory, loaded tiered or in memory; worlds 1 -> 1, 1 -> 2, 2 -> 1, 2 -> 4, 4 -> 1) gives the
// same export files byte for byte, the same deltas, and the same outputs after the load, bit for
// bit. A tiered save is its stores' snapshots (docs/checkpoint-format.md, version 5): their
// segments are the stores' files, and a damaged, missing or misdescribed snapshot is refused,
// changing nothing.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <tuple>
#include <vector>

#include "shardrec/checkpoint.h"
#include "shardrec/inference.h"
#include "shardrec/tier.h"
#include "tests/capi/dynamic/stream.h"
#include "tests/capi/dynamic/test_util.h"
#include "tests/capi/tiered/tiered_test_util.h"
#include "tests/support/spawn_ranks.h"

namespace shardrec::testing {
namespace {

constexpr int32_t kSteps = 9;
constexpr int32_t kSaveAt = 6;

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

struct Result {
  std::vector<std::string> exports;             // per table, the export's bytes
  std::vector<std::vector<int64_t>> delta_ids;  // per table (saving runs), rank 0's delta
  std::vector<std::vector<float>> delta_rows;   //   and its rows
  std::vector<std::vector<float>> out;          // per trained step, the global output
  std::vector<size_t> linked;  // tiered saves: per rank, snapshot segments that are store files
};

// `s` at `world` under `sharding`, tiered (each table's stores under FreshDir(tag + "_" + its
// name)) or in memory; a loading side's tables get twice the capacity (a full table's ids need
// not split evenly into new row blocks).
DynScenario Side(DynScenario s, int32_t world, int32_t sharding, bool tiered, bool loads,
                 const std::string& tag) {
  s.base.world = world;
  s.base.ranks_per_node = world;
  s.base.sharding = {sharding, sharding};
  if (loads)
    for (RefTable& t : s.base.tables) t.rows *= 2;
  s.tiers.clear();
  // Caches smaller than a saving side's shards (capacity 80, split row-wise), so that they lose
  // rows, yet holding a forward's distinct ids.
  const bool split = sharding == SHARDREC_SHARDING_ROW_WISE && world > 1;
  const int64_t slots[2] = {split && world >= 4 ? 12 : 22, split ? (world >= 4 ? 15 : 30) : 40};
  if (tiered)
    for (size_t t = 0; t < 2; ++t)
      s.tiers.push_back({s.base.tables[t].name, FreshDir(tag + "_" + s.base.tables[t].name),
                         CacheBytesFor(s.base, t, slots[t])});
  return s;
}

// One run at `world`: tiered (caches of `slots` per shard) or in memory; loads `load` first
// (when not empty) and trains [kSaveAt, kSteps), else trains [0, kSaveAt) with marks, takes
// the deltas and saves to `save`. Either way it exports each table with its state.
Result RunSide(DynScenario s0, int32_t world, int32_t sharding, bool tiered,
               const std::string& load, const std::string& save, const std::string& tag) {
  const DynScenario s = Side(s0, world, sharding, tiered, !load.empty(), tag);
  const int64_t dim = DynOutputDim(s);
  const Stream st = MakeStream(s, dim, kSteps);
  PlanPtr plan = MakeDynPlan(s);
  Result res;
  if (plan == nullptr) return res;
  const int32_t from = load.empty() ? 0 : kSaveAt, to = load.empty() ? kSaveAt : kSteps;
  res.out.assign(static_cast<size_t>(to - from),
                 std::vector<float>(static_cast<size_t>(kGlobalBatch * dim)));
  const std::string exports = FreshDir(tag + "_exports");
  std::filesystem::create_directories(exports);
  res.delta_ids.resize(2);
  res.linked.assign(static_cast<size_t>(world), 0);
  res.delta_rows.resize(2);
  SpawnRanks(world, [&](int r) {
    CollPtr coll;
    MakeStreamCollection(s, plan.get(), world, r, &coll);
    shardrec_embedding_t* c = coll.get();
    if (c == nullptr) return;
    if (!load.empty()) {
      ASSERT_EQ(shardrec_checkpoint_load(c, load.c_str(), nullptr), SHARDREC_OK)
          << "rank " << r << ": " << shardrec_last_error();
    } else {
      for (const char* table : {"t0", "t1"})
        ASSERT_EQ(shardrec_embedding_dynamic_mark(c, table), SHARDREC_OK) << shardrec_last_error();
    }
    for (int32_t step = from; step < to; ++step) {
      ForwardSlice(c, st.batches[step], world, r, dim,
                   res.out[static_cast<size_t>(step - from)].data());
      BackwardSlice(c, st.grads[step], world, r, dim, static_cast<float>(world));
    }
    if (load.empty()) {
      for (int t = 0; t < 2; ++t) {
        const char* table = t == 0 ? "t0" : "t1";
        const size_t cols = static_cast<size_t>(s.base.tables[t].dim);
        std::vector<int64_t> ids(200), tombs(400);
        std::vector<float> rows(200 * cols);
        size_t nr = 0, nt = 0;
        ASSERT_EQ(shardrec_embedding_dynamic_delta(c, table, ids.data(), rows.data(), 200,
                                                   tombs.data(), tombs.size(), &nr, &nt),
                  SHARDREC_OK)
            << shardrec_last_error();
        ASSERT_GT(nr, 0u);
        if (r == 0) {
          res.delta_ids[t].assign(ids.begin(), ids.begin() + static_cast<int64_t>(nr));
          res.delta_ids[t].insert(res.delta_ids[t].end(), tombs.begin(),
                                  tombs.begin() + static_cast<int64_t>(nt));
          res.delta_rows[t].assign(rows.begin(), rows.begin() + static_cast<int64_t>(nr * cols));
        }
      }
      // Its snapshots' segments are its stores' files (DynScenario::Tier: one dir per rank), as
      // they were before the save: the stores compact (and drop files) meanwhile.
      std::vector<std::string> stores;
      for (const DynScenario::Tier& t : s.tiers) stores.push_back(t.dir + "/r" + std::to_string(r));
      const FileIds before = StoreFileIds(stores);
      ASSERT_EQ(shardrec_checkpoint_save(c, save.c_str(), nullptr), SHARDREC_OK)
          << "rank " << r << ": " << shardrec_last_error();
      if (tiered)
        res.linked[static_cast<size_t>(r)] = ExpectSegmentsAreTheStores(save, stores, r, &before);
    }
    if (tiered && load.empty()) {
      // The saving run's caches did lose rows: more misses than slots.
      for (const char* table : {"t0", "t1"}) {
        shardrec_tier_stats_t ts;
        shardrec_tier_stats_init(&ts, SHARDREC_TIER_STATS_VERSION);
        // A rank that holds no shard of the table has no stats of it.
        if (shardrec_embedding_tier_stats(c, table, &ts) != SHARDREC_OK) continue;
        EXPECT_GT(ts.misses, ts.cache_slots) << "rank " << r << " table " << table;
      }
    }
    for (const char* table : {"t0", "t1"}) {
      const std::string path = exports + "/" + table + ".safetensors";
      ASSERT_EQ(shardrec_checkpoint_export_table(c, table, path.c_str(), 1), SHARDREC_OK)
          << "rank " << r << ": " << shardrec_last_error();
    }
  });
  for (const char* table : {"t0", "t1"})
    res.exports.push_back(ReadBytes(exports + "/" + table + ".safetensors"));
  return res;
}

// Checkpoint `ckpt` of tiered dynamic tables, saved by `saved`, is version 5 and holds their
// rows only in store snapshots, whose segments are the stores' files (RunSide checks them right
// after the save): the rank files hold each row block's ids and metadata, no weights or state.
void ExpectSavedBySnapshot(const std::string& ckpt, const Result& saved) {
  const nlohmann::json m = ReadManifest(ckpt);
  EXPECT_EQ(m.at("format_version").get<int>(), 5);
  size_t in_stores = 0;
  for (const auto& f : m.at("files")) {
    for (const auto& r : f.at("records")) {
      const std::string tensor = r.at("tensor").get<std::string>();
      const bool rows = tensor == "weights" || tensor.rfind("momentum", 0) == 0;
      EXPECT_EQ(rows, f.contains("store")) << f.at("name") << ": " << r.at("key");
      in_stores += rows ? 1 : 0;
    }
  }
  EXPECT_GT(in_stores, 0u);
  size_t linked = 0;
  for (size_t n : saved.linked) linked += n;
  EXPECT_GT(linked, 0u);
}

// Serving's outputs (shardrec_inference_open, in memory) for every batch of `s`'s stream and its
// probe of every pool id, from checkpoint `ckpt`.
std::vector<std::vector<float>> Serve(const DynScenario& s, const std::string& ckpt) {
  const Stream st = MakeStream(s, DynOutputDim(s), kSteps);
  shardrec_inference_options_t o = SHARDREC_INFERENCE_OPTIONS_INIT;
  shardrec_inference_t* inf = nullptr;
  std::vector<std::vector<float>> outs;
  EXPECT_EQ(shardrec_inference_open(ckpt.c_str(), &o, &inf), SHARDREC_OK)
      << ckpt << ": " << shardrec_last_error();
  if (inf == nullptr) return outs;
  int64_t dim = 0;
  EXPECT_EQ(shardrec_inference_output_dim(inf, &dim), SHARDREC_OK);
  std::vector<RefBatch> batches = st.batches;
  batches.push_back(st.probe);
  for (const RefBatch& b : batches) {
    KjtHolder kjt(b, 3, false);
    std::vector<float> out(static_cast<size_t>(b.batch_size * dim), NAN);
    EXPECT_EQ(shardrec_inference_lookup(inf, kjt.view(), out.data(), out.size(), nullptr),
              SHARDREC_OK)
        << shardrec_last_error();
    outs.push_back(std::move(out));
  }
  shardrec_inference_destroy(inf);
  return outs;
}

TEST(TieredDynamicCheckpoint, SavesAndLoadsLikeTheTableInMemoryAcrossWorlds) {
  struct Case {
    int32_t save_world, load_world, sharding, optimizer;
  };
  for (const Case& k :
       {Case{1, 1, SHARDREC_SHARDING_TABLE_WISE, 3}, Case{1, 2, SHARDREC_SHARDING_ROW_WISE, 2},
        Case{2, 1, SHARDREC_SHARDING_COLUMN_WISE, 1}, Case{2, 4, SHARDREC_SHARDING_ROW_WISE, 3},
        Case{4, 1, SHARDREC_SHARDING_ROW_WISE, 2}}) {
    SCOPED_TRACE("worlds " + std::to_string(k.save_world) + " -> " + std::to_string(k.load_world) +
                 ", sharding " + std::to_string(k.sharding) + ", optimizer " +
                 std::to_string(k.optimizer));
    DynScenario s = MakeDynScenario(1, k.sharding, k.optimizer, 80, 200);
    for (auto& d : s.dynamic) d.eviction = SHARDREC_EVICTION_LFU;
    if (k.optimizer == 2)
      for (RefTable& t : s.base.tables) t.dtype = SHARDREC_DTYPE_FLOAT16;
    const std::string mem_ckpt = FreshDir("ck_mem"), tier_ckpt = FreshDir("ck_tier");
    const Result saved_mem = RunSide(s, k.save_world, k.sharding, false, "", mem_ckpt, "save_mem");
    const Result saved_tier =
        RunSide(s, k.save_world, k.sharding, true, "", tier_ckpt, "save_tier");
    ASSERT_FALSE(::testing::Test::HasFailure());
    ExpectSavedBySnapshot(tier_ckpt, saved_tier);
    for (size_t t = 0; t < 2; ++t) {
      EXPECT_FALSE(saved_mem.exports[t].empty());
      EXPECT_TRUE(saved_tier.exports[t] == saved_mem.exports[t]) << "export of table " << t;
      EXPECT_EQ(saved_tier.delta_ids[t], saved_mem.delta_ids[t]) << "delta ids of table " << t;
      EXPECT_EQ(FirstBitDifference(saved_tier.delta_rows[t], saved_mem.delta_rows[t]), "")
          << "delta rows of table " << t;
    }
    for (size_t i = 0; i < saved_mem.out.size(); ++i)
      EXPECT_EQ(FirstBitDifference(saved_tier.out[i], saved_mem.out[i]), "") << "step " << i;
    // Served, the snapshot gives the in-memory checkpoint's outputs.
    const auto served_mem = Serve(s, mem_ckpt), served_tier = Serve(s, tier_ckpt);
    ASSERT_EQ(served_tier.size(), served_mem.size());
    EXPECT_GT(served_mem.size(), 0u);
    for (size_t i = 0; i < served_mem.size(); ++i)
      EXPECT_EQ(FirstBitDifference(served_tier[i], served_mem[i]), "") << "served batch " << i;
    const Result want = RunSide(s, k.load_world, k.sharding, false, mem_ckpt, "", "load_mm");
    for (const auto& [ckpt, tiered, tag] :
         {std::tuple{mem_ckpt, true, "load_mt"}, std::tuple{tier_ckpt, false, "load_tm"},
          std::tuple{tier_ckpt, true, "load_tt"}}) {
      const Result got = RunSide(s, k.load_world, k.sharding, tiered, ckpt, "", tag);
      ASSERT_FALSE(::testing::Test::HasFailure()) << tag;
      for (size_t t = 0; t < 2; ++t)
        EXPECT_TRUE(got.exports[t] == want.exports[t]) << tag << ": export of table " << t;
      for (size_t i = 0; i < want.out.size(); ++i)
        EXPECT_EQ(FirstBitDifference(got.out[i], want.out[i]), "") << tag << ": step " << i;
    }
  }
}

// Loads `bad` into a tiered and an in-memory world-1 collection of `s` (row-wise), staged and
// partial with verify_first: each load fails with `code` and a message holding `says`, and each
// table's export (ids, weights, state) and the next forward's output are what they were.
void ExpectDynRefusedUnchanged(const DynScenario& s0, const std::string& bad,
                               shardrec_status_t code, const std::string& says) {
  for (bool tiered : {true, false}) {
    const DynScenario s = Side(s0, 1, SHARDREC_SHARDING_ROW_WISE, tiered, true, "refused_load");
    const int64_t dim = DynOutputDim(s);
    const Stream st = MakeStream(s, dim, kSteps);
    PlanPtr plan = MakeDynPlan(s);
    ASSERT_NE(plan, nullptr);
    const std::string exports = FreshDir("refused_exports");
    std::filesystem::create_directories(exports);
    SpawnRanks(1, [&](int r) {
      CollPtr coll;
      MakeStreamCollection(s, plan.get(), 1, r, &coll);
      shardrec_embedding_t* c = coll.get();
      ASSERT_NE(c, nullptr);
      // Rows of its own first, so that a change would show.
      std::vector<float> out(static_cast<size_t>(kGlobalBatch * dim));
      ForwardSlice(c, st.batches[0], 1, r, dim, out.data());
      BackwardSlice(c, st.grads[0], 1, r, dim, 1.0f);
      const auto state = [&](const std::string& tag) {
        std::string bytes;
        for (const char* table : {"t0", "t1"}) {
          const std::string path = exports + "/" + tag + table + ".safetensors";
          EXPECT_EQ(shardrec_checkpoint_export_table(c, table, path.c_str(), 1), SHARDREC_OK)
              << shardrec_last_error();
          bytes += ReadBytes(path);
        }
        return bytes;
      };
      const std::string before = state("before");
      for (bool partial : {false, true}) {
        shardrec_checkpoint_options_t lo;
        shardrec_checkpoint_options_init(&lo, SHARDREC_CHECKPOINT_OPTIONS_VERSION);
        lo.allow_partial_load = partial;
        lo.verify_first = partial;
        EXPECT_EQ(shardrec_checkpoint_load(c, bad.c_str(), &lo), code)
            << "tiered " << tiered << " partial " << partial << ": " << shardrec_last_error();
        EXPECT_NE(std::string(shardrec_last_error()).find(says), std::string::npos)
            << shardrec_last_error();
        EXPECT_TRUE(state("after") == before) << "tiered " << tiered << " partial " << partial;
      }
    });
  }
}

TEST(TieredDynamicCheckpointLoad, ADamagedMissingOrMisdescribedSnapshotIsRefusedAndChangesNothing) {
  DynScenario s = MakeDynScenario(1, SHARDREC_SHARDING_ROW_WISE, 3, 80, 200);
  for (auto& d : s.dynamic) d.eviction = SHARDREC_EVICTION_LFU;
  const std::string root = FreshDir("dyn_refused");
  std::filesystem::create_directories(root);
  const std::string ckpt = root + "/ckpt";
  const Result saved = RunSide(s, 1, SHARDREC_SHARDING_ROW_WISE, true, "", ckpt, "refused_save");
  ASSERT_FALSE(::testing::Test::HasFailure());
  ExpectSavedBySnapshot(ckpt, saved);
  const std::vector<std::string> snaps = StoreDirs(ckpt);
  ASSERT_FALSE(snaps.empty());
  // The manifest's index of the first store entry.
  const nlohmann::json m = ReadManifest(ckpt);
  size_t entry = 0;
  while (!m.at("files").at(entry).contains("store")) ++entry;
  const std::string first = ckpt + "/" + m.at("files").at(entry).at("name").get<std::string>();
  const uint64_t value_bytes =
      m.at("files").at(entry).at("store").at("value_bytes").get<uint64_t>();
  const auto in_copy = [&](const std::string& copy) {
    return copy + "/" + std::filesystem::path(first).filename().string();
  };

  // Damaged: a byte of every record of the first snapshot's segments (in a copy, whose segments
  // are copies, so the stores stay whole).
  const std::string damaged = root + "/damaged";
  std::filesystem::copy(ckpt, damaged, std::filesystem::copy_options::recursive);
  ASSERT_FALSE(Segments(in_copy(damaged)).empty());
  DamageSegments(in_copy(damaged), value_bytes);
  ExpectDynRefusedUnchanged(s, damaged, SHARDREC_ECORRUPT, "checksum");

  // Missing: a segment file of it removed.
  const std::string missing = root + "/missing";
  std::filesystem::copy(ckpt, missing, std::filesystem::copy_options::recursive);
  std::filesystem::remove(Segments(in_copy(missing)).at(0));
  ExpectDynRefusedUnchanged(s, missing, SHARDREC_ECORRUPT, "is missing");

  // Misdescribed: another snapshot's MANIFEST checksum; a weights record given one row more than
  // its row block's ids (the store holds rows past the live ones: evicted ids' and the zero
  // row); and the version of fixed tables' snapshots, which a version-4 reader would take.
  EditedCopy(ckpt, root + "/other_manifest", [&](nlohmann::json& j) {
    auto& st = j.at("files").at(entry).at("store");
    st["manifest_xxh3"] = st.at("manifest_xxh3").get<uint64_t>() ^ 1;
  });
  ExpectDynRefusedUnchanged(s, root + "/other_manifest", SHARDREC_ECORRUPT,
                            "does not match the checkpoint's manifest");
  EditedCopy(ckpt, root + "/one_row_more", [&](nlohmann::json& j) {
    auto& r = j.at("files").at(entry).at("records").at(0);
    const uint64_t rows = r.at("shape").at(0).get<uint64_t>();
    const uint64_t begin = r.at("byte_range").at(0).get<uint64_t>();
    const uint64_t end = r.at("byte_range").at(1).get<uint64_t>();
    r["shape"][0] = rows + 1;
    r["byte_range"][1] = end + (end - begin) / rows;
  });
  ExpectDynRefusedUnchanged(s, root + "/one_row_more", SHARDREC_ECORRUPT, "its row block");
  EditedCopy(ckpt, root + "/stamped_4", [](nlohmann::json& j) { j["format_version"] = 4; });
  ExpectDynRefusedUnchanged(s, root + "/stamped_4", SHARDREC_ECORRUPT,
                            "store snapshot of a dynamic table");

  // The intact checkpoint loads.
  RunSide(s, 1, SHARDREC_SHARDING_ROW_WISE, true, ckpt, "", "refused_intact");
  EXPECT_FALSE(::testing::Test::HasFailure());
}

}  // namespace
}  // namespace shardrec::testing
