// Tables served from the checkpoint's files through a row cache (shardrec_serving_tier_t): the
// same bits as the same checkpoint opened in memory for every sharding that splits the saved
// records by rows or columns, every storage type and a 16-bit checkpoint, with caches of a row
// or two that evict on every lookup; many threads and reloads between two checkpoints; the
// statistics; and what is refused.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "tests/capi/inference/inference_test_util.h"
#include "tests/support/temp_dirs.h"

namespace shardrec::testing {
namespace {

const char* const kTables[] = {"t0", "t1", "t2"};

// Opens `path` with every table in `storage`, each served from the files through a cache of
// `cache_bytes` (0: in memory).
shardrec_status_t OpenTiered(const std::string& path, int32_t storage, uint64_t cache_bytes,
                             InferencePtr* out) {
  shardrec_serving_tier_t tiers[3];
  for (int i = 0; i < 3; ++i) {
    tiers[i] = SHARDREC_SERVING_TIER_INIT;
    tiers[i].table = kTables[i];
    tiers[i].cache_bytes = cache_bytes;
  }
  shardrec_inference_options_t o = SHARDREC_INFERENCE_OPTIONS_INIT;
  o.default_storage = storage;
  o.tiers = cache_bytes > 0 ? tiers : nullptr;
  o.num_tiers = cache_bytes > 0 ? 3 : 0;
  shardrec_inference_t* raw = nullptr;
  const shardrec_status_t st = shardrec_inference_open(path.c_str(), &o, &raw);
  out->reset(raw);
  return st;
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

shardrec_serving_tier_stats_t Stats(shardrec_inference_t* inf, const char* table) {
  shardrec_serving_tier_stats_t s = SHARDREC_SERVING_TIER_STATS_INIT;
  EXPECT_EQ(shardrec_inference_tier_stats(inf, table, &s), SHARDREC_OK) << shardrec_last_error();
  return s;
}

TEST(InferenceTier, SameBitsAsInMemory) {
  const Side sides[] = {
      {1, 0, SHARDREC_SHARDING_TABLE_WISE, 4, SHARDREC_DTYPE_FLOAT32},
      {2, 0, SHARDREC_SHARDING_ROW_WISE, 4, SHARDREC_DTYPE_FLOAT32},
      {2, 0, SHARDREC_SHARDING_COLUMN_WISE, 4, SHARDREC_DTYPE_BFLOAT16},
      {2, 0, SHARDREC_SHARDING_TABLE_ROW_WISE, 4, SHARDREC_DTYPE_FLOAT16},
  };
  const int32_t storages[] = {SHARDREC_SERVING_AS_TRAINED, SHARDREC_SERVING_FP32,
                              SHARDREC_SERVING_FP16,       SHARDREC_SERVING_BF16,
                              SHARDREC_SERVING_INT8,       SHARDREC_SERVING_INT4,
                              SHARDREC_SERVING_FP8_E4M3};
  for (const Side& side : sides) {
    SCOPED_TRACE(SideName(side));
    const Trained t = TrainAndSave(side, SHARDREC_POOLING_SUM, /*weighted=*/true);
    for (int32_t storage : storages) {
      SCOPED_TRACE("storage " + std::to_string(storage));
      InferencePtr mem, disk;
      ASSERT_EQ(OpenTiered(t.trained_dir, storage, 0, &mem), SHARDREC_OK) << shardrec_last_error();
      // 200 bytes: one or two rows per table, so nearly every lookup evicts.
      ASSERT_EQ(OpenTiered(t.trained_dir, storage, 200, &disk), SHARDREC_OK)
          << shardrec_last_error();
      for (int round = 0; round < 2; ++round)
        for (const RefBatch& b : t.batches)
          EXPECT_TRUE(SameBits(Lookup(mem.get(), b, 4), Lookup(disk.get(), b, 4)));
      int64_t misses = 0;
      for (const char* name : kTables) {
        const shardrec_serving_tier_stats_t s = Stats(disk.get(), name);
        EXPECT_EQ(s.model_version, 1u);
        EXPECT_GT(s.cache_slots, 0);
        EXPECT_LE(s.cache_rows, s.cache_slots);
        EXPECT_LE(s.cache_bytes, 200);
        // Misses read as a batch: neighbouring rows share a read, so fewer reads than misses.
        EXPECT_EQ(s.misses > 0, s.disk_reads > 0);
        EXPECT_GT(s.disk_read_bytes, 0);
        if (s.hits + s.misses > 0) {
          EXPECT_DOUBLE_EQ(s.hit_rate, static_cast<double>(s.hits) / (s.hits + s.misses));
        }
        misses += s.misses;
      }
      EXPECT_GT(misses, 0);
      if (storage == SHARDREC_SERVING_INT8) {  // row scales read through the cache too
        const int64_t ids[] = {0, 4, 9, 4};
        float sm[4], bm[4], sd[4], bd[4];
        ASSERT_EQ(shardrec_inference_row_scales(mem.get(), "t0", ids, 4, sm, bm, nullptr),
                  SHARDREC_OK);
        ASSERT_EQ(shardrec_inference_row_scales(disk.get(), "t0", ids, 4, sd, bd, nullptr),
                  SHARDREC_OK)
            << shardrec_last_error();
        EXPECT_EQ(std::memcmp(sm, sd, sizeof(sm)), 0);
        EXPECT_EQ(std::memcmp(bm, bd, sizeof(bm)), 0);
      }
    }
  }
}

TEST(InferenceTier, ACacheAsLargeAsTheTableHitsAfterTheFirstRead) {
  const Trained t =
      TrainAndSave(Side{1, 0, SHARDREC_SHARDING_TABLE_WISE, 4, SHARDREC_DTYPE_FLOAT32},
                   SHARDREC_POOLING_MEAN, false);
  InferencePtr disk;
  ASSERT_EQ(OpenTiered(t.trained_dir, SHARDREC_SERVING_FP32, 1 << 20, &disk), SHARDREC_OK);
  const RefBatch& b = t.batches[0];
  const std::vector<float> first = Lookup(disk.get(), b, 4);
  const shardrec_serving_tier_stats_t s1 = Stats(disk.get(), "t1");
  EXPECT_EQ(s1.hits, 0);
  EXPECT_GT(s1.misses, 0);
  EXPECT_EQ(s1.cache_rows, s1.misses);
  // The request's misses are read as one batch: rows less than a page apart share a read.
  EXPECT_GE(s1.disk_reads, 1);
  EXPECT_LE(s1.disk_reads, s1.misses);
  EXPECT_GE(s1.disk_read_bytes, s1.misses * 12 * 4);
  EXPECT_TRUE(SameBits(first, Lookup(disk.get(), b, 4)));
  const shardrec_serving_tier_stats_t s2 = Stats(disk.get(), "t1");
  EXPECT_EQ(s2.misses, s1.misses);
  EXPECT_EQ(s2.hits, s1.misses);
  EXPECT_EQ(s2.disk_reads, s1.disk_reads);
}

// t1 is read by features f1 and f2: a row both name in one request is read and counted once
// (docs/disk-tier.md "Serving"), whether the cache holds the request's rows or evicts between the
// features.
TEST(InferenceTier, ARowSeveralFeaturesOfARequestReadCountsOnce) {
  const Trained t =
      TrainAndSave(Side{1, 0, SHARDREC_SHARDING_TABLE_WISE, 4, SHARDREC_DTYPE_FLOAT32},
                   SHARDREC_POOLING_SUM, false);
  RefBatch b;
  b.batch_size = 2;
  b.lengths = {1, 1, 2, 1, 1, 2, 1, 1};  // f0, f1, f2, f3 x 2 samples
  b.ids = {0, 1, 3, 5, 3, 5, 7, 3, 2, 4};
  InferencePtr mem;
  ASSERT_EQ(OpenTiered(t.trained_dir, SHARDREC_SERVING_FP32, 0, &mem), SHARDREC_OK);
  const std::vector<float> want = Lookup(mem.get(), b, 4);
  for (uint64_t cache_bytes : {uint64_t{1} << 20, uint64_t{200}}) {
    SCOPED_TRACE("cache_bytes " + std::to_string(cache_bytes));
    InferencePtr disk;
    ASSERT_EQ(OpenTiered(t.trained_dir, SHARDREC_SERVING_FP32, cache_bytes, &disk), SHARDREC_OK)
        << shardrec_last_error();
    EXPECT_TRUE(SameBits(Lookup(disk.get(), b, 4), want));
    const shardrec_serving_tier_stats_t s1 = Stats(disk.get(), "t1");
    EXPECT_EQ(s1.hits, 0);
    EXPECT_EQ(s1.misses, 3);  // rows 3, 5 and 7
    EXPECT_TRUE(SameBits(Lookup(disk.get(), b, 4), want));
    const shardrec_serving_tier_stats_t s2 = Stats(disk.get(), "t1");
    EXPECT_EQ(s2.hits + s2.misses, 6);
    if (cache_bytes > 1000) {
      EXPECT_EQ(s2.hits, 3);
      EXPECT_EQ(s2.disk_reads, s1.disk_reads);
    } else {
      EXPECT_LT(s1.cache_slots, 3);  // the cache evicts within the request
    }
  }
}

TEST(InferenceTier, ManyThreadsAcrossReloads) {
  const Trained t = TrainAndSave(Side{2, 0, SHARDREC_SHARDING_ROW_WISE, 4, SHARDREC_DTYPE_FLOAT32},
                                 SHARDREC_POOLING_SUM, true);
  const std::string dirs[2] = {t.trained_dir, t.dyadic_dir};
  std::vector<RefBatch> batches = t.batches;
  batches.insert(batches.end(), t.dyadic_batches.begin(), t.dyadic_batches.end());
  // want[d][k]: checkpoint d opened in memory, batch k.
  std::vector<std::vector<float>> want[2];
  for (int d = 0; d < 2; ++d) {
    InferencePtr mem;
    ASSERT_EQ(OpenTiered(dirs[d], SHARDREC_SERVING_INT8, 0, &mem), SHARDREC_OK);
    for (const RefBatch& b : batches) want[d].push_back(Lookup(mem.get(), b, 4));
  }
  InferencePtr disk;
  ASSERT_EQ(OpenTiered(dirs[0], SHARDREC_SERVING_INT8, 300, &disk), SHARDREC_OK);
  std::atomic<bool> done{false};
  std::atomic<int> bad{0};
  std::atomic<int64_t> lookups{0};
  std::vector<std::thread> threads;
  for (int th = 0; th < 8; ++th)
    threads.emplace_back([&, th] {
      uint64_t x = 0x9E3779B97F4A7C15ull * (th + 1);
      // At least 50 lookups each, then until the reloads are over.
      for (int it = 0; it < 50 || !done.load(); ++it) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        const size_t k = x % batches.size();
        uint64_t v = 0;
        const std::vector<float> got = Lookup(disk.get(), batches[k], 4, &v);
        // Versions 1, 3, 5 serve checkpoint 0; 2, 4 checkpoint 1.
        if (!SameBits(got, want[(v - 1) % 2][k])) ++bad;
        ++lookups;
      }
    });
  for (int r = 1; r <= 4; ++r) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    ASSERT_EQ(shardrec_inference_reload(disk.get(), dirs[r % 2].c_str()), SHARDREC_OK)
        << shardrec_last_error();
  }
  done = true;
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_GE(lookups.load(), 400);
  // A reload starts a new cache with new counts.
  ASSERT_EQ(shardrec_inference_reload(disk.get(), dirs[1].c_str()), SHARDREC_OK);
  const shardrec_serving_tier_stats_t s = Stats(disk.get(), "t1");
  EXPECT_EQ(s.model_version, 6u);
  EXPECT_EQ(s.hits + s.misses, 0);
  EXPECT_EQ(s.cache_rows, 0);
  EXPECT_EQ(s.hit_rate, 0.0);
  EXPECT_TRUE(SameBits(Lookup(disk.get(), batches[0], 4), want[1][0]));
}

TEST(InferenceTier, RefusesWhatItDoesNotServe) {
  const Trained t =
      TrainAndSave(Side{1, 0, SHARDREC_SHARDING_TABLE_WISE, 4, SHARDREC_DTYPE_FLOAT32},
                   SHARDREC_POOLING_SUM, false);
  shardrec_serving_tier_t tier = SHARDREC_SERVING_TIER_INIT;
  shardrec_inference_options_t o = SHARDREC_INFERENCE_OPTIONS_INIT;
  o.tiers = &tier;
  o.num_tiers = 1;
  shardrec_inference_t* raw = nullptr;
  const auto open = [&](const std::string& path) {
    raw = nullptr;
    const shardrec_status_t st = shardrec_inference_open(path.c_str(), &o, &raw);
    if (st != SHARDREC_OK) {
      EXPECT_EQ(raw, nullptr);
    }
    return st;
  };
  tier.table = "nope";
  tier.cache_bytes = 4096;
  EXPECT_EQ(open(t.trained_dir), SHARDREC_EINVAL);
  EXPECT_NE(std::string(shardrec_last_error()).find("nope"), std::string::npos);
  tier.table = "t1";
  tier.cache_bytes = 0;
  EXPECT_EQ(open(t.trained_dir), SHARDREC_EINVAL);
  tier.cache_bytes = 100;  // a dim-12 fp32 row costs 48 + 64 bytes
  EXPECT_EQ(open(t.trained_dir), SHARDREC_EINVAL);
  EXPECT_NE(std::string(shardrec_last_error()).find("112"), std::string::npos)
      << shardrec_last_error();
  shardrec_serving_tier_t two[2] = {SHARDREC_SERVING_TIER_INIT, SHARDREC_SERVING_TIER_INIT};
  two[0].table = two[1].table = "t1";
  two[0].cache_bytes = two[1].cache_bytes = 4096;
  o.tiers = two;
  o.num_tiers = 2;
  EXPECT_EQ(open(t.trained_dir), SHARDREC_EINVAL);
  o.tiers = nullptr;
  EXPECT_EQ(open(t.trained_dir), SHARDREC_EINVAL);
  o.tiers = &tier;
  o.num_tiers = 1;
  tier.cache_bytes = 4096;

  // A serving file is mapped already.
  InferencePtr mem = Open(t.trained_dir, SHARDREC_SERVING_AS_TRAINED);
  ASSERT_TRUE(mem);
  const std::string file = FreshDir("tier_file") + "/m.serving";
  ASSERT_EQ(shardrec_inference_save(mem.get(), file.c_str()), SHARDREC_OK);
  EXPECT_EQ(open(file), SHARDREC_EUNSUPPORTED);

  // A version with a tiered table: no save, no delta of that table; stats only of tiered tables.
  ASSERT_EQ(open(t.trained_dir), SHARDREC_OK) << shardrec_last_error();
  InferencePtr disk(raw);
  EXPECT_EQ(shardrec_inference_save(disk.get(), (file + "2").c_str()), SHARDREC_EUNSUPPORTED);
  const int64_t id = 1;
  std::vector<float> row(12, 0.5f);
  EXPECT_EQ(
      shardrec_inference_apply_delta(disk.get(), "t1", &id, row.data(), 1, nullptr, 0, nullptr),
      SHARDREC_EUNSUPPORTED);
  std::vector<float> row8(8, 0.5f);
  uint64_t v = 0;
  EXPECT_EQ(shardrec_inference_apply_delta(disk.get(), "t0", &id, row8.data(), 1, nullptr, 0, &v),
            SHARDREC_OK)
      << shardrec_last_error();
  EXPECT_EQ(v, 2u);
  shardrec_serving_tier_stats_t s = SHARDREC_SERVING_TIER_STATS_INIT;
  EXPECT_EQ(shardrec_inference_tier_stats(disk.get(), "t0", &s), SHARDREC_EINVAL);
  EXPECT_EQ(shardrec_inference_tier_stats(disk.get(), "nope", &s), SHARDREC_ENOTFOUND);
  s.version = 99;
  EXPECT_EQ(shardrec_inference_tier_stats(disk.get(), "t1", &s), SHARDREC_EINVAL);
  EXPECT_EQ(shardrec_inference_tier_stats(disk.get(), "t1", nullptr), SHARDREC_EINVAL);

  // A sequence table.
  const Trained seq =
      TrainAndSave(Side{1, 0, SHARDREC_SHARDING_TABLE_WISE, 4, SHARDREC_DTYPE_FLOAT32},
                   SHARDREC_POOLING_NONE, false);
  EXPECT_EQ(open(seq.trained_dir), SHARDREC_EUNSUPPORTED);
  EXPECT_NE(std::string(shardrec_last_error()).find("sequence"), std::string::npos);
}

TEST(InferenceTier, ACorruptRecordIsFoundAtOpen) {
  const Trained t =
      TrainAndSave(Side{1, 0, SHARDREC_SHARDING_TABLE_WISE, 4, SHARDREC_DTYPE_FLOAT32},
                   SHARDREC_POOLING_SUM, false);
  // Flip one byte of every rank file's data in turn until an open in memory reports t1's
  // weights corrupt; the tiered open must then refuse it too.
  InferencePtr disk;
  EXPECT_EQ(OpenTiered(t.trained_dir, SHARDREC_SERVING_FP32, 4096, &disk), SHARDREC_OK);
  disk.reset();
  bool found = false;
  for (const auto& entry : std::filesystem::directory_iterator(t.trained_dir)) {
    if (entry.path().extension() != ".safetensors") continue;
    const auto size = std::filesystem::file_size(entry.path());
    for (uint64_t at = size - 1; at > size / 2 && !found; at -= 97) {
      std::FILE* f = std::fopen(entry.path().c_str(), "r+b");
      ASSERT_NE(f, nullptr);
      std::fseek(f, static_cast<long>(at), SEEK_SET);
      const int c = std::fgetc(f);
      std::fseek(f, static_cast<long>(at), SEEK_SET);
      std::fputc(c ^ 0x40, f);
      std::fclose(f);
      InferencePtr mem;
      const shardrec_status_t st = OpenTiered(t.trained_dir, SHARDREC_SERVING_FP32, 0, &mem);
      const std::string why = st == SHARDREC_OK ? "" : shardrec_last_error();
      if (st == SHARDREC_ECORRUPT && why.find("t1") != std::string::npos &&
          why.find("weights") != std::string::npos) {
        found = true;
        EXPECT_EQ(OpenTiered(t.trained_dir, SHARDREC_SERVING_FP32, 4096, &disk), SHARDREC_ECORRUPT);
        EXPECT_NE(std::string(shardrec_last_error()).find("t1"), std::string::npos);
      }
      f = std::fopen(entry.path().c_str(), "r+b");  // restore
      std::fseek(f, static_cast<long>(at), SEEK_SET);
      std::fputc(c, f);
      std::fclose(f);
    }
  }
  EXPECT_TRUE(found) << "no byte of t1's weights was found to flip";
}

}  // namespace
}  // namespace shardrec::testing
