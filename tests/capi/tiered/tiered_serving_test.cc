// Serving a checkpoint's dynamic tables from its files (shardrec_serving_tier_t;
// docs/disk-tier.md, "Serving"): the same bits as the same checkpoint opened in memory, for
// every id the in-memory version answers (live, evicted and never seen), from store snapshots
// (a tiered save) and from rank files (an in-memory save), with caches of a row or two that evict
// on every lookup; many threads across reloads; damaged or missing files refused with the serving
// version left as it was; and a request's misses read as one batch (fewer reads than rows).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "shardrec/checkpoint.h"
#include "shardrec/inference.h"
#include "tests/capi/dynamic/stream.h"
#include "tests/capi/dynamic/test_util.h"
#include "tests/capi/tiered/tiered_serving_util.h"
#include "tests/capi/tiered/tiered_test_util.h"
#include "tests/support/spawn_ranks.h"

namespace shardrec::testing {
namespace {

// A batch of ids that no pool holds (never seen by training): they read the zero row.
RefBatch UnknownIds() {
  RefBatch b;
  b.batch_size = 2;
  b.lengths = {2, 1, 1, 0, 3, 1};  // feature-major: f0, f1, f2 x 2 samples
  b.ids = {987654321, -5, 987654321, 424242, 17171717, -5, 3, 99};
  return b;
}

TEST(TieredServing, DynamicTablesServeTheBitsOfTheCheckpointInMemory) {
  struct Case {
    int32_t world, sharding;
    bool tiered;
  };
  const int32_t storages[] = {SHARDREC_SERVING_AS_TRAINED, SHARDREC_SERVING_FP16,
                              SHARDREC_SERVING_INT8, SHARDREC_SERVING_FP8_E4M3};
  for (const Case& k :
       {Case{1, SHARDREC_SHARDING_TABLE_WISE, true}, Case{2, SHARDREC_SHARDING_ROW_WISE, false},
        Case{2, SHARDREC_SHARDING_COLUMN_WISE, true}}) {
    SCOPED_TRACE("world " + std::to_string(k.world) + " sharding " + std::to_string(k.sharding) +
                 (k.tiered ? " saved tiered" : " saved in memory"));
    DynScenario s = MakeDynScenario(1, k.sharding, 3, 80, 200);
    const Saved sv = TrainAndSave(s, k.world, k.sharding, k.tiered, "serve_same");
    ASSERT_FALSE(::testing::Test::HasFailure());
    std::vector<RefBatch> batches = sv.batches;
    batches.push_back(UnknownIds());
    for (int32_t storage : storages) {
      SCOPED_TRACE("storage " + std::to_string(storage));
      Inf mem = OpenOk(sv.second, storage, 0);
      // 200 bytes: one or two rows per table, so nearly every lookup evicts.
      Inf disk = OpenOk(sv.second, storage, 200);
      ASSERT_TRUE(mem && disk);
      for (int round = 0; round < 2; ++round)
        for (size_t i = 0; i < batches.size(); ++i)
          EXPECT_EQ(FirstBitDifference(Lookup(disk.get(), batches[i], nullptr),
                                       Lookup(mem.get(), batches[i], nullptr)),
                    "")
              << "batch " << i << " round " << round;
      if (storage == SHARDREC_SERVING_INT8) {  // row scales read through the cache too
        const int64_t ids[] = {s.pools[0][0], s.pools[0][150], 987654321, s.pools[0][0]};
        float sm[4], bm[4], sd[4], bd[4];
        ASSERT_EQ(shardrec_inference_row_scales(mem.get(), "t0", ids, 4, sm, bm, nullptr),
                  SHARDREC_OK);
        ASSERT_EQ(shardrec_inference_row_scales(disk.get(), "t0", ids, 4, sd, bd, nullptr),
                  SHARDREC_OK)
            << shardrec_last_error();
        EXPECT_EQ(std::memcmp(sm, sd, sizeof(sm)), 0);
        EXPECT_EQ(std::memcmp(bm, bd, sizeof(bm)), 0);
        EXPECT_EQ(sd[2], 0.0f);  // an unknown id: the zero row
      }
      for (const char* table : {"t0", "t1"}) {
        const shardrec_serving_tier_stats_t st = Stats(disk.get(), table);
        EXPECT_GT(st.misses, st.cache_slots) << table;  // evicted and read again
        EXPECT_GT(st.disk_reads, 0) << table;
        EXPECT_GE(st.disk_read_bytes, st.disk_reads) << table;
        EXPECT_LE(st.cache_rows, st.cache_slots) << table;
      }
    }
  }
}

TEST(TieredServing, ManyThreadsAcrossReloadsOfDynamicCheckpoints) {
  DynScenario s = MakeDynScenario(1, SHARDREC_SHARDING_ROW_WISE, 2, 80, 200);
  const Saved sv = TrainAndSave(s, 2, SHARDREC_SHARDING_ROW_WISE, true, "serve_threads");
  ASSERT_FALSE(::testing::Test::HasFailure());
  const std::string dirs[2] = {sv.first, sv.second};
  std::vector<RefBatch> batches = sv.batches;
  batches.push_back(UnknownIds());
  std::vector<std::vector<float>> want[2];  // want[d][k]: checkpoint d in memory, batch k
  for (int d = 0; d < 2; ++d) {
    Inf mem = OpenOk(dirs[d], SHARDREC_SERVING_FP16, 0);
    ASSERT_TRUE(mem);
    for (const RefBatch& b : batches) want[d].push_back(Lookup(mem.get(), b, nullptr));
  }
  ASSERT_FALSE(want[0] == want[1]);  // the versions differ, so a wrong pairing shows
  Inf disk = OpenOk(dirs[0], SHARDREC_SERVING_FP16, 300);
  ASSERT_TRUE(disk);
  std::atomic<bool> done{false};
  std::atomic<int> bad{0};
  std::atomic<int64_t> lookups{0};
  std::vector<std::thread> threads;
  for (int th = 0; th < 6; ++th)
    threads.emplace_back([&, th] {
      uint64_t x = 0x9E3779B97F4A7C15ull * static_cast<uint64_t>(th + 1);
      for (int it = 0; it < 30 || !done.load(); ++it) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        const size_t k = x % batches.size();
        uint64_t v = 0;
        const std::vector<float> got = Lookup(disk.get(), batches[k], &v);
        // Versions 1, 3, 5 serve checkpoint 0; 2, 4 checkpoint 1.
        if (v < 1 || FirstBitDifference(got, want[(v - 1) % 2][k]) != "") ++bad;
        ++lookups;
      }
    });
  for (int r = 1; r <= 4; ++r) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_EQ(shardrec_inference_reload(disk.get(), dirs[r % 2].c_str()), SHARDREC_OK)
        << shardrec_last_error();
  }
  done = true;
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_GE(lookups.load(), 180);
}

// Removes the first file named `name_part` under `dir` (recursively); its path, or "".
std::string RemoveOne(const std::string& dir, const std::string& name_part) {
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    const std::string p = e.path().string();
    if (e.is_regular_file() && e.path().filename().string().find(name_part) != std::string::npos &&
        p.find(".store") != std::string::npos) {
      std::filesystem::remove(e.path());
      return p;
    }
  }
  return "";
}

TEST(TieredServing, DamagedOrMissingFilesAreRefusedAndChangeNothing) {
  DynScenario s = MakeDynScenario(1, SHARDREC_SHARDING_TABLE_WISE, 3, 80, 200);
  const Saved sv = TrainAndSave(s, 1, SHARDREC_SHARDING_TABLE_WISE, true, "serve_damaged");
  ASSERT_FALSE(::testing::Test::HasFailure());
  Inf disk = OpenOk(sv.first, SHARDREC_SERVING_FP32, 400);
  ASSERT_TRUE(disk);
  std::vector<std::vector<float>> before;
  for (const RefBatch& b : sv.batches) before.push_back(Lookup(disk.get(), b, nullptr));

  // A rank file cut short: its ids (and any record after the cut) are gone.
  const std::string bad_rank = FreshDir("serve_damaged_rank");
  std::filesystem::copy(sv.second, bad_rank, std::filesystem::copy_options::recursive);
  for (const auto& e : std::filesystem::directory_iterator(bad_rank))
    if (e.path().extension() == ".safetensors")
      std::filesystem::resize_file(e.path(), std::filesystem::file_size(e.path()) / 2);
  // A store snapshot without a segment file, and one without its MANIFEST.
  const std::string no_segment = FreshDir("serve_damaged_segment");
  std::filesystem::copy(sv.second, no_segment, std::filesystem::copy_options::recursive);
  const std::string no_manifest = FreshDir("serve_damaged_manifest");
  std::filesystem::copy(sv.second, no_manifest, std::filesystem::copy_options::recursive);
  const std::string removed_manifest = RemoveOne(no_manifest, "MANIFEST");
  ASSERT_NE(removed_manifest, "");
  std::string removed_segment;
  for (const auto& e : std::filesystem::recursive_directory_iterator(no_segment))
    if (e.is_regular_file() && e.path().parent_path().extension() == ".store" &&
        e.path().filename() != "MANIFEST" && removed_segment.empty()) {
      removed_segment = e.path().string();
      std::filesystem::remove(e.path());
    }
  ASSERT_NE(removed_segment, "");

  for (const std::string& bad : {bad_rank, no_segment, no_manifest}) {
    SCOPED_TRACE(bad);
    shardrec_inference_t* raw = nullptr;
    EXPECT_EQ(Open(bad, SHARDREC_SERVING_FP32, 400, &raw), SHARDREC_ECORRUPT);
    EXPECT_EQ(raw, nullptr);
    EXPECT_NE(std::string(shardrec_last_error()).find(bad), std::string::npos)
        << shardrec_last_error();
    EXPECT_EQ(shardrec_inference_reload(disk.get(), bad.c_str()), SHARDREC_ECORRUPT);
    uint64_t v = 0;
    ASSERT_EQ(shardrec_inference_version(disk.get(), &v), SHARDREC_OK);
    EXPECT_EQ(v, 1u);  // still the first version, serving as before
    for (size_t i = 0; i < sv.batches.size(); ++i)
      EXPECT_EQ(FirstBitDifference(Lookup(disk.get(), sv.batches[i], nullptr), before[i]), "");
  }
}

TEST(TieredServing, ARequestsMissesAreReadAsOneBatch) {
  // Fixed tables saved in memory: rows in rank files, 32-byte (t0) and 48-byte (t1) rows, so a
  // request's missed rows share pages and a batch reads each page once.
  DynScenario s = MakeDynScenario(1, SHARDREC_SHARDING_TABLE_WISE, 3, 80, 80);
  s.fixed = true;
  for (auto& pool : s.pools)
    for (size_t i = 0; i < pool.size(); ++i) pool[i] = static_cast<int64_t>(i);
  const Saved sv = TrainAndSave(s, 1, SHARDREC_SHARDING_TABLE_WISE, false, "serve_batch");
  ASSERT_FALSE(::testing::Test::HasFailure());
  Inf mem = OpenOk(sv.second, SHARDREC_SERVING_FP32, 0);
  Inf disk = OpenOk(sv.second, SHARDREC_SERVING_FP32, 1 << 20);
  ASSERT_TRUE(mem && disk);
  const RefBatch& probe = sv.batches.back();  // every pool id: many distinct rows at once
  EXPECT_EQ(
      FirstBitDifference(Lookup(disk.get(), probe, nullptr), Lookup(mem.get(), probe, nullptr)),
      "");
  for (const char* table : {"t0", "t1"}) {
    const shardrec_serving_tier_stats_t st = Stats(disk.get(), table);
    EXPECT_GT(st.misses, 8) << table;
    // One read for the request, not one per row: its 80 rows lie back to back in the record.
    EXPECT_EQ(st.disk_reads, 1) << table;
    EXPECT_EQ(st.disk_read_bytes, st.misses * (table[1] == '0' ? 8 : 12) * 4) << table;
  }
}

}  // namespace
}  // namespace shardrec::testing
