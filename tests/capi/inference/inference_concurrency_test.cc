// Concurrency of one inference handle: many threads x random batches equal single-threaded
// answers; reloads under load never show a mixed version (every table and a dense tensor carry
// the version's marker); concurrent reloads are refused, not queued; snapshots outlive reloads
// and the handle. Short enough for ThreadSanitizer (.ci/tsan).
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "tests/capi/inference/inference_test_util.h"
#include "tests/support/temp_dirs.h"

namespace shardrec::testing {
namespace {

constexpr int32_t kMarkers = 3;
constexpr size_t kWidth = 48;  // StandardScenario: features read tables of dims 8, 12, 12, 16

// A world-1 table-wise collection of `pooling` whose every weight is `marker`, saved to `dir`
// with a dense tensor "marker" = {marker, marker}.
void SaveMarker(const std::string& dir, int32_t pooling, float marker) {
  Side side;
  side.world = 1;
  side.sharding = SHARDREC_SHARDING_TABLE_WISE;
  Scenario s = StandardScenario(1, side.sharding, pooling);
  OnSide(side, s, [&](int, shardrec_embedding_t* coll, shardrec_mesh_t* mesh) {
    for (const RefTable& t : s.tables) {
      std::vector<float> w(static_cast<size_t>(t.rows) * t.dim, marker);
      ASSERT_EQ(shardrec_embedding_set_weights(coll, t.name.c_str(), w.data(), w.size()),
                SHARDREC_OK);
    }
    float d[2] = {marker, marker};
    shardrec_dense_tensor_t dense{"marker", d, 2};
    shardrec_checkpoint_options_t o = SHARDREC_CHECKPOINT_OPTIONS_INIT;
    o.dense = &dense;
    o.num_dense = 1;
    ASSERT_EQ(SaveOn(coll, mesh, dir, &o), SHARDREC_OK) << shardrec_last_error();
  });
}

std::vector<RefBatch> RandomBatches(int32_t pooling, bool weighted) {
  Scenario g = StandardScenario(4, SHARDREC_SHARDING_TABLE_WISE, pooling);
  g.weighted = weighted;
  g.steps = 4;
  ReferenceModel ref(g.num_features, g.tables, g.optimizer, g.seed, g.world);
  std::vector<RefBatch> all;
  for (const auto& step : MakeBatches(g, ref))
    for (const RefBatch& b : step) all.push_back(b);
  return all;
}

// Checks that a MEAN output of marker weights is `marker` in every non-empty bag's columns and
// 0 in an empty bag's: one version from the first column to the last.
bool AllOneVersion(const std::vector<float>& out, const RefBatch& b, float marker,
                   std::string* why) {
  const Scenario s = StandardScenario(1, SHARDREC_SHARDING_TABLE_WISE, SHARDREC_POOLING_MEAN);
  const int64_t B = b.batch_size;
  int64_t offset = 0;
  const int64_t width = out.size() / static_cast<size_t>(B);
  for (int32_t f = 0; f < s.num_features; ++f) {
    const int32_t dim = f == 0 ? 8 : f == 3 ? 16 : 12;
    for (int64_t k = 0; k < B; ++k) {
      const float want = b.lengths[f * B + k] > 0 ? marker : 0.0f;
      for (int32_t c = 0; c < dim; ++c)
        if (out[k * width + offset + c] != want) {
          *why = "feature " + std::to_string(f) + " sample " + std::to_string(k) + " holds " +
                 std::to_string(out[k * width + offset + c]) + ", version marker " +
                 std::to_string(marker);
          return false;
        }
    }
    offset += dim;
  }
  return true;
}

TEST(InferenceConcurrency, ManyThreadsEqualSingleThreaded) {
  const Trained t =
      TrainAndSave(Side{1, 0, SHARDREC_SHARDING_TABLE_WISE, 4, 0}, SHARDREC_POOLING_SUM, true);
  shardrec_table_storage_t ts[2] = {SHARDREC_TABLE_STORAGE_INIT, SHARDREC_TABLE_STORAGE_INIT};
  ts[0].table = "t0";
  ts[0].storage = SHARDREC_SERVING_INT8;
  ts[1].table = "t2";
  ts[1].storage = SHARDREC_SERVING_INT4;
  shardrec_inference_options_t o = SHARDREC_INFERENCE_OPTIONS_INIT;
  o.table_storage = ts;
  o.num_table_storage = 2;
  shardrec_inference_t* raw = nullptr;
  ASSERT_EQ(shardrec_inference_open(t.trained_dir.c_str(), &o, &raw), SHARDREC_OK)
      << shardrec_last_error();
  InferencePtr inf(raw);
  const std::vector<RefBatch> batches = RandomBatches(SHARDREC_POOLING_SUM, true);
  std::vector<std::vector<float>> want;
  for (const RefBatch& b : batches) want.push_back(Lookup(inf.get(), b, 4));
  std::atomic<int> mismatches{0};
  std::vector<std::thread> threads;
  for (int th = 0; th < 4; ++th)
    threads.emplace_back([&, th] {
      uint64_t x = 88172645463325252ull + th;
      for (int it = 0; it < 40; ++it) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        const size_t k = x % batches.size();
        if (Lookup(inf.get(), batches[k], 4) != want[k]) ++mismatches;
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(mismatches.load(), 0);
}

TEST(InferenceConcurrency, SwapsUnderLoadNeverShowAMixedVersion) {
  std::vector<std::string> sources;
  for (int32_t m = 1; m <= kMarkers; ++m) {
    const std::string dir = FreshDir("marker");
    SaveMarker(dir, SHARDREC_POOLING_MEAN, static_cast<float>(m));
    // Every other marker also as a serving file: reloads alternate between both kinds.
    if (m % 2 == 0) {
      InferencePtr h = Open(dir, SHARDREC_SERVING_AS_TRAINED);
      ASSERT_TRUE(h);
      ASSERT_EQ(shardrec_inference_save(h.get(), (dir + "/m.serving").c_str()), SHARDREC_OK);
      sources.push_back(dir + "/m.serving");
    } else {
      sources.push_back(dir);
    }
  }
  InferencePtr inf = Open(sources[0], SHARDREC_SERVING_AS_TRAINED);
  ASSERT_TRUE(inf);
  const std::vector<RefBatch> batches = RandomBatches(SHARDREC_POOLING_MEAN, false);
  const auto marker = [](uint64_t version) {
    return static_cast<float>((version - 1) % kMarkers + 1);
  };
  constexpr uint64_t kReloads = 9;
  std::atomic<bool> done{false};
  std::atomic<int> bad{0};
  std::atomic<int64_t> lookups{0};
  std::atomic<uint64_t> newest{0};
  const auto note = [&](uint64_t v) {
    uint64_t seen = newest.load();
    while (v > seen && !newest.compare_exchange_weak(seen, v)) {
    }
  };
  std::vector<std::thread> readers;
  for (int th = 0; th < 3; ++th)
    readers.emplace_back([&, th] {
      size_t k = static_cast<size_t>(th);
      while (!done.load()) {
        const RefBatch& b = batches[k++ % batches.size()];
        std::string why;
        if (th == 2) {
          // A pinned snapshot: its lookup and its dense tensor are one version.
          shardrec_inference_version_t* ver = nullptr;
          uint64_t v = 0;
          const float* d = nullptr;
          size_t n = 0;
          if (shardrec_inference_pin(inf.get(), &ver) != SHARDREC_OK ||
              shardrec_inference_snapshot_version(ver, &v) != SHARDREC_OK ||
              shardrec_inference_snapshot_dense_tensor(ver, "marker", &d, &n) != SHARDREC_OK ||
              n != 2 || d[1] != marker(v)) {
            ++bad;
          } else {
            KjtHolder kjt(b, 4, false);
            std::vector<float> out(static_cast<size_t>(b.batch_size) * kWidth);
            if (shardrec_inference_snapshot_lookup(ver, kjt.view(), out.data(), out.size()) !=
                    SHARDREC_OK ||
                !AllOneVersion(out, b, marker(v), &why))
              ++bad;
            note(v);
          }
          shardrec_inference_unpin(ver);
        } else {
          uint64_t v = 0;
          const std::vector<float> out = Lookup(inf.get(), b, 4, &v);
          note(v);
          if (!AllOneVersion(out, b, marker(v), &why)) {
            ++bad;
            ADD_FAILURE() << "version " << v << ": " << why;
          }
        }
        ++lookups;
      }
    });
  for (uint64_t n = 2; n <= 1 + kReloads; ++n) {
    const int64_t before = lookups.load();
    while (lookups.load() < before + 5) std::this_thread::yield();  // swap while lookups run
    ASSERT_EQ(shardrec_inference_reload(inf.get(), sources[(n - 1) % kMarkers].c_str()),
              SHARDREC_OK)
        << shardrec_last_error();
  }
  done = true;
  for (auto& th : readers) th.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_GE(newest.load(), kReloads);  // the readers did run across the swaps
  uint64_t v = 0;
  ASSERT_EQ(shardrec_inference_version(inf.get(), &v), SHARDREC_OK);
  EXPECT_EQ(v, 1 + kReloads);
}

TEST(InferenceConcurrency, ConcurrentReloadsAreRefusedNotQueued) {
  const std::string dir = FreshDir("reloads");
  SaveMarker(dir, SHARDREC_POOLING_SUM, 1.0f);
  InferencePtr inf = Open(dir, SHARDREC_SERVING_INT8);
  ASSERT_TRUE(inf);
  std::atomic<int> ok{0}, refused{0}, other{0};
  std::vector<std::thread> threads;
  for (int th = 0; th < 3; ++th)
    threads.emplace_back([&] {
      for (int i = 0; i < 4; ++i) {
        const shardrec_status_t rc = shardrec_inference_reload(inf.get(), dir.c_str());
        (rc == SHARDREC_OK ? ok : rc == SHARDREC_EUSAGE ? refused : other)++;
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(other.load(), 0);
  EXPECT_EQ(ok.load() + refused.load(), 12);
  uint64_t v = 0;
  ASSERT_EQ(shardrec_inference_version(inf.get(), &v), SHARDREC_OK);
  EXPECT_EQ(v, static_cast<uint64_t>(1 + ok.load()));
}

TEST(InferenceConcurrency, SnapshotOutlivesReloadAndHandle) {
  const std::string a = FreshDir("snap_a"), b = FreshDir("snap_b");
  SaveMarker(a, SHARDREC_POOLING_MEAN, 1.0f);
  SaveMarker(b, SHARDREC_POOLING_MEAN, 2.0f);
  InferencePtr inf = Open(a, SHARDREC_SERVING_AS_TRAINED);
  ASSERT_TRUE(inf);
  shardrec_inference_version_t* ver = nullptr;
  ASSERT_EQ(shardrec_inference_pin(inf.get(), &ver), SHARDREC_OK);
  const float* before = nullptr;
  size_t n = 0;
  ASSERT_EQ(shardrec_inference_snapshot_dense_tensor(ver, "marker", &before, &n), SHARDREC_OK);
  ASSERT_EQ(shardrec_inference_reload(inf.get(), b.c_str()), SHARDREC_OK);
  const float* now = nullptr;
  uint64_t v = 0;
  ASSERT_EQ(shardrec_inference_dense_tensor(inf.get(), "marker", &now, &n, &v), SHARDREC_OK);
  EXPECT_EQ(v, 2u);
  EXPECT_EQ(now[0], 2.0f);
  inf.reset();
  EXPECT_EQ(before[0], 1.0f);  // still the pinned version's memory
  const RefBatch batch = RandomBatches(SHARDREC_POOLING_MEAN, false)[0];
  KjtHolder kjt(batch, 4, false);
  std::vector<float> out(static_cast<size_t>(batch.batch_size) * kWidth);
  ASSERT_EQ(shardrec_inference_snapshot_lookup(ver, kjt.view(), out.data(), out.size()),
            SHARDREC_OK);
  std::string why;
  EXPECT_TRUE(AllOneVersion(out, batch, 1.0f, &why)) << why;
  shardrec_inference_unpin(ver);
}

// A row whose values are all equal has scale 0 and reads back exactly in every storage type.
TEST(InferenceStorage, EqualRowsReadBackExactly) {
  const std::string dir = FreshDir("equal");
  SaveMarker(dir, SHARDREC_POOLING_MEAN, -0.375f);
  const RefBatch batch = RandomBatches(SHARDREC_POOLING_MEAN, false)[1];
  for (int32_t storage : {SHARDREC_SERVING_FP16, SHARDREC_SERVING_BF16, SHARDREC_SERVING_INT8,
                          SHARDREC_SERVING_INT4}) {
    InferencePtr inf = Open(dir, storage);
    ASSERT_TRUE(inf);
    std::string why;
    EXPECT_TRUE(AllOneVersion(Lookup(inf.get(), batch, 4), batch, -0.375f, &why))
        << "storage " << storage << ": " << why;
  }
}

}  // namespace
}  // namespace shardrec::testing
