// How a GPU collection moves data (device_step.h): every host <-> device copy of a phase goes
// through pinned staging and the phase waits once. Counted through the fake embedding plugin's
// runtime counters (shardrec_fake_runtime_calls): host synchronisations, copies by direction and
// allocations. The fake runs copies only when the stream gets there (SHARDREC_FAKE_DEFER_COPIES,
// set by ctest), so these runs also check that nothing reads a staging block before its wait;
// the results are compared bit for bit with a host collection. Fake-only: skipped elsewhere.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <array>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "shardrec/device.h"
#include "tests/capi/embedding/embedding_test_util.h"
#include "tests/support/spawn_ranks.h"

namespace shardrec::testing {
namespace {

enum Counter { kSync = 0, kUp, kDown, kDeviceAlloc, kHostAlloc, kNumCounters };
using Counts = std::array<int64_t, kNumCounters>;

// The fake's counters, or an empty optional-like {-1...} when the fake is not the plugin.
Counts Runtime() {
  Counts out{};
  out.fill(-1);
  (void)shardrec_device_check(SHARDREC_DEVICE_CUDA, 0);  // loads the plugin
  const char* path = std::getenv("SHARDREC_CUDA_PLUGIN");
  void* h = path != nullptr ? dlopen(path, RTLD_NOW | RTLD_NOLOAD) : nullptr;
  if (h == nullptr) return out;
  auto fn = reinterpret_cast<int64_t (*)(int32_t)>(dlsym(h, "shardrec_fake_runtime_calls"));
  for (int i = 0; fn != nullptr && i < kNumCounters; ++i) out[i] = fn(i);
  dlclose(h);
  return out;
}

Counts Delta(const Counts& a, const Counts& b) {
  Counts d{};
  for (int i = 0; i < kNumCounters; ++i) d[i] = b[i] - a[i];
  return d;
}

#define REQUIRE_FAKE()                                                            \
  do {                                                                            \
    if (Runtime()[kSync] < 0) {                                                   \
      if (std::getenv("SHARDREC_TEST_EXPECT_FAKE") != nullptr)                    \
        FAIL() << "SHARDREC_CUDA_PLUGIN does not name the fake embedding plugin"; \
      GTEST_SKIP() << "the counters are the fake embedding plugin's";             \
    }                                                                             \
  } while (0)

bool BitEqual(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

struct SyncCase {
  const char* name;
  std::vector<int32_t> sharding;
  int32_t pooling;
  int32_t optimizer;
  // Per forward and per backward, as device_step.h documents them for this plan.
  Counts forward;   // {syncs, copies up, copies down, 0, 0}
  Counts backward;  // the same; -1 where the plan decides (checked against the syncs instead)
};

std::string SyncCaseName(const ::testing::TestParamInfo<SyncCase>& i) { return i.param.name; }

class GpuStaging : public ::testing::TestWithParam<SyncCase> {};

// World 1 (the counters are per process): every step's forward and backward, one at a time,
// against the documented counts, and against a host collection bit for bit.
TEST_P(GpuStaging, OneSyncPerPhase) {
  REQUIRE_FAKE();
  const SyncCase& c = GetParam();
  Scenario s = StandardScenario(1, c.sharding[0], c.pooling);
  s.sharding = c.sharding;
  s.optimizer.type = c.optimizer;
  s.steps = 3;
  s.batch_sizes = {6};
  ReferenceModel ref(s.num_features, s.tables, s.optimizer, s.seed, s.world);
  const auto batches = MakeBatches(s, ref);
  const auto grads = MakeGrads(s, batches, ref.output_dim());
  // Every table is read in every step, so every phase has work.
  for (int step = 0; step < s.steps; ++step) {
    const RefBatch& b = batches[step][0];
    size_t at = 0;
    std::vector<int64_t> per_feature(s.num_features, 0);
    for (int32_t f = 0; f < s.num_features; ++f)
      for (int64_t i = 0; i < b.batch_size; ++i) per_feature[f] += b.lengths[at++];
    for (int32_t f = 0; f < s.num_features; ++f)
      ASSERT_GT(per_feature[f], 0) << "step " << step << " feature " << f;
  }
  PlanPtr plan = MakePlan(s);
  ASSERT_NE(plan, nullptr);
  const shardrec_optimizer_config_t opt = ToCOptimizer(s.optimizer);
  shardrec_embedding_options_t oh;
  shardrec_embedding_options_init(&oh, SHARDREC_EMBEDDING_OPTIONS_VERSION);
  oh.seed = s.seed;
  shardrec_embedding_options_t od = oh;
  od.device_type = SHARDREC_DEVICE_CUDA;
  shardrec_embedding_t* h = nullptr;
  shardrec_embedding_t* d = nullptr;
  ASSERT_EQ(shardrec_embedding_create(&h, plan.get(), GroupComm(1, 0), &opt, &oh), SHARDREC_OK)
      << shardrec_last_error();
  CollPtr ch(h);
  ASSERT_EQ(shardrec_embedding_create(&d, plan.get(), GroupComm(1, 0), &opt, &od), SHARDREC_OK)
      << shardrec_last_error();
  CollPtr cd(d);
  int64_t dim = 0;
  shardrec_embedding_output_dim(d, &dim);
  const bool seq = c.pooling == SHARDREC_POOLING_NONE;
  for (int step = 0; step < s.steps; ++step) {
    const RefBatch& rb = batches[step][0];
    KjtHolder kjt(rb, s.num_features, false);
    const size_t n =
        static_cast<size_t>(seq ? static_cast<int64_t>(rb.ids.size()) : rb.batch_size) *
        static_cast<size_t>(dim);
    std::vector<float> out_h(n), out_d(n);
    ASSERT_EQ(shardrec_embedding_forward(h, kjt.view(), out_h.data(), n, nullptr), SHARDREC_OK);
    const Counts f0 = Runtime();
    ASSERT_EQ(shardrec_embedding_forward(d, kjt.view(), out_d.data(), n, nullptr), SHARDREC_OK)
        << shardrec_last_error();
    const Counts fwd = Delta(f0, Runtime());
    EXPECT_TRUE(BitEqual(out_h, out_d)) << "step " << step;
    EXPECT_EQ(fwd[kSync], c.forward[kSync]) << "forward syncs, step " << step;
    EXPECT_EQ(fwd[kUp], c.forward[kUp]) << "forward uploads, step " << step;
    EXPECT_EQ(fwd[kDown], c.forward[kDown]) << "forward downloads, step " << step;
    std::vector<float> g = grads[step][0];
    ASSERT_EQ(shardrec_embedding_backward(h, g.data(), g.size(), nullptr), SHARDREC_OK);
    const Counts b0 = Runtime();
    ASSERT_EQ(shardrec_embedding_backward(d, g.data(), g.size(), nullptr), SHARDREC_OK)
        << shardrec_last_error();
    const Counts bwd = Delta(b0, Runtime());
    if (c.backward[kSync] >= 0) {
      EXPECT_EQ(bwd[kSync], c.backward[kSync]) << "backward syncs, step " << step;
      EXPECT_EQ(bwd[kUp], c.backward[kUp]) << "backward uploads, step " << step;
      EXPECT_EQ(bwd[kDown], c.backward[kDown]) << "backward downloads, step " << step;
    } else {
      // Column shards with row statistics: one wait for the counts, one for the statistics
      // (downloaded, one copy per such shard), one at the end; one upload of the runs and
      // gradients plus one of full statistics per shard.
      EXPECT_GT(bwd[kDown], 0) << "step " << step;
      EXPECT_EQ(bwd[kSync], 3) << "backward syncs, step " << step;
      EXPECT_EQ(bwd[kUp], 1 + bwd[kDown]) << "backward uploads, step " << step;
    }
  }
  const auto a = Snapshot(h, s);
  const auto b = Snapshot(d, s);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(BitEqual(a[i], b[i])) << "tensor " << i;
}

constexpr int32_t kDP = SHARDREC_SHARDING_DATA_PARALLEL;
constexpr int32_t kTW = SHARDREC_SHARDING_TABLE_WISE;
constexpr int32_t kRW = SHARDREC_SHARDING_ROW_WISE;
constexpr int32_t kCW = SHARDREC_SHARDING_COLUMN_WISE;
constexpr int32_t kSum = SHARDREC_POOLING_SUM;
constexpr int32_t kNone = SHARDREC_POOLING_NONE;
constexpr int32_t kSgd = SHARDREC_OPTIMIZER_SGD;
constexpr int32_t kAdam = SHARDREC_OPTIMIZER_ADAM;
constexpr int32_t kRowAdagrad = SHARDREC_OPTIMIZER_ROWWISE_ADAGRAD;

const SyncCase kSyncCases[] = {
    // Fused backward on every shard: one wait per call.
    {"Fused", {kTW, kRW, kTW}, kSum, kAdam, {1, 1, 1, 0, 0}, {1, 1, 0, 0, 0}},
    // A data-parallel table: its own lookup phase and its own update phase (one upload).
    {"DataParallel", {kDP, kRW, kTW}, kSum, kSgd, {2, 2, 2, 0, 0}, {2, 2, 0, 0, 0}},
    // Sequence: aggregated, so the counts are read on the host before the updates.
    {"Sequence", {kTW, kRW, kTW}, kNone, kSgd, {1, 1, 1, 0, 0}, {2, 1, 0, 0, 0}},
    // Column shards of row-wise Adagrad exchange row statistics.
    {"ColumnStats", {kCW, kCW, kCW}, kSum, kRowAdagrad, {1, 1, 1, 0, 0}, {-1, -1, -1, 0, 0}},
};

INSTANTIATE_TEST_SUITE_P(Plans, GpuStaging, ::testing::ValuesIn(kSyncCases), SyncCaseName);

}  // namespace
}  // namespace shardrec::testing
