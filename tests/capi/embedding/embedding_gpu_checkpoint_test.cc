// Checkpoints and table export/import of GPU collections through the public C API, run on the
// CPU through the fake embedding plugin (device memory = host memory tracked per block). A GPU
// and a host collection of one plan are trained side by side and saved: the files must be the
// same bytes. Each checkpoint is then loaded into a fresh collection of the other kind, and all
// four train on: the same outputs every step and the same weights and states, bit for bit.
// Resharding loads, optimizer resets, dtype changes and device failures in the middle of a save
// or a load are covered too.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "shardrec/checkpoint.h"
#include "tests/capi/checkpoint/checkpoint_test_util.h"
#include "tests/capi/embedding/embedding_test_util.h"
#include "tests/capi/embedding/gpu_test_util.h"
#include "tests/support/spawn_ranks.h"

namespace shardrec::testing {
namespace {

std::string ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

// One training step of one rank: forward (output returned) and backward.
std::vector<float> Step(shardrec_embedding_t* c, const Scenario& s, const RefBatch& b,
                        const std::vector<float>& grad) {
  KjtHolder kjt(b, s.num_features, false);
  std::vector<float> out(grad.size(), -7.0f);
  EXPECT_EQ(shardrec_embedding_forward(c, kjt.view(), out.data(), out.size(), nullptr), SHARDREC_OK)
      << shardrec_last_error();
  EXPECT_EQ(shardrec_embedding_backward(c, grad.data(), grad.size(), nullptr), SHARDREC_OK)
      << shardrec_last_error();
  return out;
}

shardrec_embedding_t* Create(const shardrec_plan_t* plan, const Scenario& s, int r, bool cuda,
                             uint64_t seed, const shardrec_optimizer_config_t* opt) {
  shardrec_embedding_options_t o = Options(s, cuda);
  o.seed = seed;
  shardrec_embedding_t* c = nullptr;
  EXPECT_EQ(shardrec_embedding_create(&c, plan, GroupComm(s.world, r), opt, &o), SHARDREC_OK)
      << shardrec_last_error();
  return c;
}

struct Case {
  const char* name;
  int32_t world;
  std::vector<int32_t> sharding;  // per table of the standard scenario
  int32_t optimizer;
  int32_t dtype;  // of table t1
};

std::string CaseName(const ::testing::TestParamInfo<Case>& i) { return i.param.name; }

class GpuCheckpoint : public ::testing::TestWithParam<Case> {};

TEST_P(GpuCheckpoint, SavesTheHostBytesAndLoadsCrossWise) {
  REQUIRE_DEVICE();
  const Case& c = GetParam();
  Scenario s = StandardScenario(c.world, c.sharding[0], SHARDREC_POOLING_SUM);
  s.sharding = c.sharding;
  s.optimizer.type = c.optimizer;
  s.tables[1].dtype = c.dtype;
  s.steps = 4;
  const TrainingSetup ts(s);
  ASSERT_NE(ts.plan, nullptr);
  const std::string dir_h = FreshDir("gpu_ckpt_host");
  const std::string dir_d = FreshDir("gpu_ckpt_gpu");
  SpawnRanks(s.world, [&](int r) {
    CollPtr h(Create(ts.plan.get(), s, r, false, s.seed, &ts.opt));
    CollPtr d(Create(ts.plan.get(), s, r, true, s.seed, &ts.opt));
    ASSERT_TRUE(h && d);
    for (int step = 0; step < 2; ++step) {
      const auto oh = Step(h.get(), s, ts.batches[step][r], ts.grads[step][r]);
      const auto od = Step(d.get(), s, ts.batches[step][r], ts.grads[step][r]);
      EXPECT_TRUE(BitEqual(oh, od)) << "rank " << r << " step " << step;
    }
    ASSERT_EQ(shardrec_checkpoint_save(h.get(), dir_h.c_str(), nullptr), SHARDREC_OK)
        << shardrec_last_error();
    ASSERT_EQ(shardrec_checkpoint_save(d.get(), dir_d.c_str(), nullptr), SHARDREC_OK)
        << shardrec_last_error();
    const Snap saved = TakeSnap(h.get(), s);
    // Fresh collections of the other seed (every value differs), each loading the checkpoint
    // the other kind wrote.
    CollPtr h2(Create(ts.plan.get(), s, r, false, s.seed + 1, &ts.opt));
    CollPtr d2(Create(ts.plan.get(), s, r, true, s.seed + 1, &ts.opt));
    ASSERT_TRUE(h2 && d2);
    std::string why;
    EXPECT_FALSE(BitEqual(TakeSnap(d2.get(), s), saved, &why)) << "nothing to load";
    ASSERT_EQ(shardrec_checkpoint_load(h2.get(), dir_d.c_str(), nullptr), SHARDREC_OK)
        << shardrec_last_error();
    ASSERT_EQ(shardrec_checkpoint_load(d2.get(), dir_h.c_str(), nullptr), SHARDREC_OK)
        << shardrec_last_error();
    EXPECT_TRUE(BitEqual(TakeSnap(h2.get(), s), saved, &why)) << "host <- gpu, rank " << r << why;
    EXPECT_TRUE(BitEqual(TakeSnap(d2.get(), s), saved, &why)) << "gpu <- host, rank " << r << why;
    EXPECT_TRUE(BitEqual(TakeSnap(d.get(), s), saved, &why)) << "gpu after its save: " << why;
    // Training goes on identically in all four.
    for (int step = 2; step < s.steps; ++step) {
      const auto oh = Step(h.get(), s, ts.batches[step][r], ts.grads[step][r]);
      const auto od = Step(d.get(), s, ts.batches[step][r], ts.grads[step][r]);
      const auto oh2 = Step(h2.get(), s, ts.batches[step][r], ts.grads[step][r]);
      const auto od2 = Step(d2.get(), s, ts.batches[step][r], ts.grads[step][r]);
      EXPECT_TRUE(BitEqual(oh, od) && BitEqual(oh, oh2) && BitEqual(oh, od2))
          << "rank " << r << " step " << step;
    }
    const Snap end = TakeSnap(h.get(), s);
    EXPECT_FALSE(BitEqual(end, saved, &why)) << "training after the load changed nothing";
    EXPECT_TRUE(BitEqual(TakeSnap(d.get(), s), end, &why)) << "gpu, rank " << r << ": " << why;
    EXPECT_TRUE(BitEqual(TakeSnap(h2.get(), s), end, &why)) << "host2, rank " << r << ": " << why;
    EXPECT_TRUE(BitEqual(TakeSnap(d2.get(), s), end, &why)) << "gpu2, rank " << r << ": " << why;
  });
  // The same files, byte for byte (the manifest and every rank's file).
  const auto files_h = ReadDir(dir_h);
  const auto files_d = ReadDir(dir_d);
  ASSERT_GE(files_h.size(), 2u);
  ASSERT_EQ(files_h.size(), files_d.size());
  for (const auto& [name, bytes] : files_h) {
    auto it = files_d.find(name);
    ASSERT_NE(it, files_d.end()) << name << " missing from the GPU collection's checkpoint";
    EXPECT_TRUE(it->second == bytes) << name << " differs";
  }
}

// Row-wise Adagrad and Adam (and LAMB, SGD), every sharding type, world 1 and 2, fp32, fp16 and
// bf16 storage.
const Case kCases[] = {
    {"W1_TW_RW_CW_RowAda", 1, {kTW, kRW, kCW}, kRowAdagrad, kF32},
    {"W2_TW_RW_CW_RowAda", 2, {kTW, kRW, kCW}, kRowAdagrad, kF32},
    {"W2_CW_Grid_TRW_Adam_Bf16", 2, {kCW, kGrid, kTRW}, kAdam, kBf16},
    {"W1_RW_CW_DP_Adam_Bf16", 1, {kRW, kCW, kDP}, kAdam, kBf16},
    {"W2_DP_RW_CW_RowAda_Fp16", 2, {kDP, kRW, kCW}, kRowAdagrad, kF16},
    {"W2_TW_CW_DP_Lamb", 2, {kTW, kCW, kDP}, kLamb, kF32},
    {"W2_RW_TW_Grid_Sgd", 2, {kRW, kTW, kGrid}, kSgd, kF32},
};

INSTANTIATE_TEST_SUITE_P(Plans, GpuCheckpoint, ::testing::ValuesIn(kCases), CaseName);

// A checkpoint of 2 ranks (GPU and host) loaded into 1 rank under another plan, another
// optimizer (reset_optimizer_state: weights load, state and step start from zero) and another
// dtype (allow_dtype_change): the GPU collection ends where the host collection ends.
TEST(GpuCheckpointReshard, LoadsUnderAnotherPlanOptimizerAndDtype) {
  REQUIRE_DEVICE();
  Scenario a = StandardScenario(2, kRW, SHARDREC_POOLING_SUM);
  a.sharding = {kRW, kCW, kTW};
  a.optimizer.type = kAdam;
  a.tables[1].dtype = kBf16;
  a.steps = 2;
  ReferenceModel ref(a.num_features, a.tables, a.optimizer, a.seed, a.world);
  const auto batches = MakeBatches(a, ref);
  const auto grads = MakeGrads(a, batches, ref.output_dim());
  PlanPtr plan_a = MakePlan(a);
  ASSERT_NE(plan_a, nullptr);
  const shardrec_optimizer_config_t opt_a = ToCOptimizer(a.optimizer);
  const std::string dir_h = FreshDir("gpu_reshard_host");
  const std::string dir_d = FreshDir("gpu_reshard_gpu");
  std::vector<std::vector<float>> saved_weights;
  std::mutex mu;
  SpawnRanks(a.world, [&](int r) {
    CollPtr h(Create(plan_a.get(), a, r, false, a.seed, &opt_a));
    CollPtr d(Create(plan_a.get(), a, r, true, a.seed, &opt_a));
    ASSERT_TRUE(h && d);
    for (int step = 0; step < a.steps; ++step) {
      Step(h.get(), a, batches[step][r], grads[step][r]);
      Step(d.get(), a, batches[step][r], grads[step][r]);
    }
    ASSERT_EQ(shardrec_checkpoint_save(h.get(), dir_h.c_str(), nullptr), SHARDREC_OK);
    ASSERT_EQ(shardrec_checkpoint_save(d.get(), dir_d.c_str(), nullptr), SHARDREC_OK)
        << shardrec_last_error();
    std::vector<std::vector<float>> w;
    for (const RefTable& t : a.tables) {
      w.emplace_back(static_cast<size_t>(t.rows) * t.dim);
      EXPECT_EQ(
          shardrec_embedding_get_weights(h.get(), t.name.c_str(), w.back().data(), w.back().size()),
          SHARDREC_OK);
    }
    std::lock_guard<std::mutex> lock(mu);
    if (r == 0) saved_weights = std::move(w);
  });
  ASSERT_EQ(saved_weights.size(), a.tables.size());
  Scenario b = StandardScenario(1, kTW, SHARDREC_POOLING_SUM);
  b.sharding = {kCW, kTW, kRW};
  b.optimizer.type = kRowAdagrad;
  b.tables[1].dtype = kF32;
  b.seed = 97;
  PlanPtr plan_b = MakePlan(b);
  ASSERT_NE(plan_b, nullptr);
  const shardrec_optimizer_config_t opt_b = ToCOptimizer(b.optimizer);
  shardrec_checkpoint_options_t o = SHARDREC_CHECKPOINT_OPTIONS_INIT;
  o.reset_optimizer_state = 1;
  o.allow_dtype_change = 1;
  o.verify_first = 1;
  SpawnRanks(1, [&](int r) {
    CollPtr h(Create(plan_b.get(), b, r, false, b.seed, &opt_b));
    CollPtr d(Create(plan_b.get(), b, r, true, b.seed, &opt_b));
    ASSERT_TRUE(h && d);
    // Non-zero state first, so the reset has something to clear on the device.
    Step(h.get(), b, batches[0][0], grads[0][0]);
    Step(d.get(), b, batches[0][0], grads[0][0]);
    ASSERT_EQ(shardrec_checkpoint_load(h.get(), dir_d.c_str(), &o), SHARDREC_OK)
        << shardrec_last_error();
    ASSERT_EQ(shardrec_checkpoint_load(d.get(), dir_h.c_str(), &o), SHARDREC_OK)
        << shardrec_last_error();
    std::string why;
    const Snap sh = TakeSnap(h.get(), b);
    EXPECT_TRUE(BitEqual(TakeSnap(d.get(), b), sh, &why)) << why;
    EXPECT_EQ(sh.steps, 0);
    for (size_t t = 0; t < b.tables.size(); ++t) {
      // Snapshot order: each table's weights, then its one row-wise Adagrad state.
      EXPECT_TRUE(BitEqual(sh.tensors[2 * t], saved_weights[t])) << "table " << t;
      EXPECT_EQ(sh.tensors[2 * t + 1], std::vector<float>(sh.tensors[2 * t + 1].size(), 0.0f));
    }
  });
}

// Export of a trained table (with its optimizer state) writes the host collection's bytes; an
// import into fresh GPU and host collections loads it identically.
TEST(GpuTableIo, ExportsTheHostBytesAndImports) {
  REQUIRE_DEVICE();
  Scenario s = StandardScenario(2, kRW, SHARDREC_POOLING_SUM);
  s.sharding = {kTW, kCW, kRW};
  s.optimizer.type = kAdam;
  s.tables[1].dtype = kBf16;
  s.steps = 2;
  const TrainingSetup ts(s);
  ASSERT_NE(ts.plan, nullptr);
  const std::string dir = FreshDir("gpu_table_io");
  const std::string path_h = dir + "/host.safetensors";
  const std::string path_d = dir + "/gpu.safetensors";
  SpawnRanks(s.world, [&](int r) {
    CollPtr h(Create(ts.plan.get(), s, r, false, s.seed, &ts.opt));
    CollPtr d(Create(ts.plan.get(), s, r, true, s.seed, &ts.opt));
    ASSERT_TRUE(h && d);
    for (int step = 0; step < s.steps; ++step) {
      Step(h.get(), s, ts.batches[step][r], ts.grads[step][r]);
      Step(d.get(), s, ts.batches[step][r], ts.grads[step][r]);
    }
    for (const RefTable& t : s.tables) {
      ASSERT_EQ(
          shardrec_checkpoint_export_table(h.get(), t.name.c_str(), (path_h + t.name).c_str(), 1),
          SHARDREC_OK)
          << shardrec_last_error();
      ASSERT_EQ(
          shardrec_checkpoint_export_table(d.get(), t.name.c_str(), (path_d + t.name).c_str(), 1),
          SHARDREC_OK)
          << shardrec_last_error();
    }
    const Snap trained = TakeSnap(h.get(), s);
    CollPtr h2(Create(ts.plan.get(), s, r, false, s.seed + 1, &ts.opt));
    CollPtr d2(Create(ts.plan.get(), s, r, true, s.seed + 1, &ts.opt));
    ASSERT_TRUE(h2 && d2);
    for (const RefTable& t : s.tables) {
      ASSERT_EQ(
          shardrec_checkpoint_import_table(h2.get(), t.name.c_str(), (path_d + t.name).c_str(), 1),
          SHARDREC_OK)
          << shardrec_last_error();
      ASSERT_EQ(
          shardrec_checkpoint_import_table(d2.get(), t.name.c_str(), (path_h + t.name).c_str(), 1),
          SHARDREC_OK)
          << shardrec_last_error();
    }
    // Every table and state came from the files; the step counter is not part of a table.
    Snap a = TakeSnap(h2.get(), s);
    Snap b = TakeSnap(d2.get(), s);
    a.steps = b.steps = trained.steps;
    std::string why;
    EXPECT_TRUE(BitEqual(a, trained, &why)) << "host <- gpu export, rank " << r << ": " << why;
    EXPECT_TRUE(BitEqual(b, trained, &why)) << "gpu <- host export, rank " << r << ": " << why;
  });
  for (const RefTable& t : s.tables) {
    const std::string bytes = ReadFile(path_h + t.name);
    EXPECT_FALSE(bytes.empty());
    EXPECT_TRUE(bytes == ReadFile(path_d + t.name)) << t.name;
  }
}

// A checkpoint save and load and a table export and import of a GPU collection stage its rows in
// pinned host memory allocated with the collection's device current (host_alloc_on): a bare
// host_alloc from a thread with no current device would create a context on device 0.
TEST(GpuCheckpoint, PinnedStagingIsAllocatedOnTheCollectionsDevice) {
  REQUIRE_FAKE();
  if (FakeHostAllocsWithoutDevice() < 0) GTEST_SKIP() << "needs the fake's allocation counter";
  Scenario s = StandardScenario(1, kRW, SHARDREC_POOLING_SUM);
  s.sharding = {kTW, kCW, kRW};
  s.optimizer.type = kRowAdagrad;
  s.steps = 1;
  const TrainingSetup ts(s);
  ASSERT_NE(ts.plan, nullptr);
  const std::string dir = FreshDir("gpu_ckpt_pinned");
  const int64_t before = FakeHostAllocsWithoutDevice();
  CollPtr d(Create(ts.plan.get(), s, 0, true, s.seed, &ts.opt));
  ASSERT_TRUE(d);
  Step(d.get(), s, ts.batches[0][0], ts.grads[0][0]);
  ASSERT_EQ(shardrec_checkpoint_save(d.get(), dir.c_str(), nullptr), SHARDREC_OK)
      << shardrec_last_error();
  ASSERT_EQ(shardrec_checkpoint_load(d.get(), dir.c_str(), nullptr), SHARDREC_OK)
      << shardrec_last_error();
  const std::string table = dir + "/t0.safetensors";
  const char* name = s.tables[0].name.c_str();
  ASSERT_EQ(shardrec_checkpoint_export_table(d.get(), name, table.c_str(), 1), SHARDREC_OK)
      << shardrec_last_error();
  ASSERT_EQ(shardrec_checkpoint_import_table(d.get(), name, table.c_str(), 1), SHARDREC_OK)
      << shardrec_last_error();
  EXPECT_EQ(FakeHostAllocsWithoutDevice(), before);
}

// A device copy that fails in the middle of a save fails the save (SHARDREC_ECUDA on every
// rank), leaves the collection as it was and the previous checkpoint loadable; one that fails in
// the middle of a load is reported the same way, and loading again restores the checkpoint.
TEST(GpuCheckpointFailure, DeviceFailureMidSaveAndMidLoad) {
  REQUIRE_DEVICE();
  if (!FakeFailCopyAfter(-1)) GTEST_SKIP() << "needs the fake plugin's failure injection";
  Scenario s = StandardScenario(1, kRW, SHARDREC_POOLING_SUM);
  s.sharding = {kTW, kCW, kRW};
  s.optimizer.type = kRowAdagrad;
  s.steps = 2;
  const TrainingSetup ts(s);
  ASSERT_NE(ts.plan, nullptr);
  const std::string dir = FreshDir("gpu_ckpt_fail");
  // One rank on this thread: the injected failure's count is the process's.
  CollPtr d(Create(ts.plan.get(), s, 0, true, s.seed, &ts.opt));
  ASSERT_TRUE(d);
  Step(d.get(), s, ts.batches[0][0], ts.grads[0][0]);
  ASSERT_EQ(shardrec_checkpoint_save(d.get(), dir.c_str(), nullptr), SHARDREC_OK)
      << shardrec_last_error();
  const Snap first = TakeSnap(d.get(), s);
  const auto files = ReadDir(dir);
  Step(d.get(), s, ts.batches[1][0], ts.grads[1][0]);
  const Snap second = TakeSnap(d.get(), s);
  for (int64_t after : {0, 2}) {
    ASSERT_TRUE(FakeFailCopyAfter(after));
    EXPECT_EQ(shardrec_checkpoint_save(d.get(), dir.c_str(), nullptr), SHARDREC_ECUDA);
    const std::string err = shardrec_last_error();
    FakeFailCopyAfter(-1);
    EXPECT_NE(err.find("injected device failure"), std::string::npos) << err;
    EXPECT_NE(err.find("saving"), std::string::npos) << err;
    std::string why;
    EXPECT_TRUE(BitEqual(TakeSnap(d.get(), s), second, &why)) << why;
    // The previous checkpoint is still the published one (the failed save left at most a
    // temporary file).
    const auto now = ReadDir(dir);
    for (const auto& [name, bytes] : files) {
      auto it = now.find(name);
      ASSERT_NE(it, now.end()) << name;
      EXPECT_TRUE(it->second == bytes) << name;
    }
  }
  // A load that fails after some blocks reports the failure; loading again completes it.
  for (int64_t after : {0, 3}) {
    ASSERT_TRUE(FakeFailCopyAfter(after));
    EXPECT_EQ(shardrec_checkpoint_load(d.get(), dir.c_str(), nullptr), SHARDREC_ECUDA);
    const std::string err = shardrec_last_error();
    FakeFailCopyAfter(-1);
    EXPECT_NE(err.find("injected device failure"), std::string::npos) << err;
  }
  ASSERT_EQ(shardrec_checkpoint_load(d.get(), dir.c_str(), nullptr), SHARDREC_OK)
      << shardrec_last_error();
  std::string why;
  EXPECT_TRUE(BitEqual(TakeSnap(d.get(), s), first, &why)) << why;
}

// A GPU collection's load is all-or-nothing too: its part is staged and verified in host memory
// before any device copy, so a corrupt record changes nothing on the device.
TEST(GpuCheckpointFailure, CorruptRecordChangesNothingOnTheDevice) {
  REQUIRE_DEVICE();
  Scenario s = StandardScenario(1, kRW, SHARDREC_POOLING_SUM);
  s.sharding = {kTW, kCW, kRW};
  s.optimizer.type = kRowAdagrad;
  s.steps = 2;
  const TrainingSetup ts(s);
  ASSERT_NE(ts.plan, nullptr);
  const std::string dir = FreshDir("gpu_ckpt_corrupt");
  CollPtr d(Create(ts.plan.get(), s, 0, true, s.seed, &ts.opt));
  ASSERT_TRUE(d);
  Step(d.get(), s, ts.batches[0][0], ts.grads[0][0]);
  ASSERT_EQ(shardrec_checkpoint_save(d.get(), dir.c_str(), nullptr), SHARDREC_OK)
      << shardrec_last_error();
  const Snap saved = TakeSnap(d.get(), s);
  Step(d.get(), s, ts.batches[1][0], ts.grads[1][0]);
  const Snap before = TakeSnap(d.get(), s);
  std::string file;
  for (const auto& [name, bytes] : ReadDir(dir))
    if (name.find(".safetensors") != std::string::npos) file = dir + "/" + name;
  ASSERT_FALSE(file.empty());
  std::string bytes = ReadFile(file);
  const std::string good = bytes;
  bytes[bytes.size() - 5] ^= 0x20;  // in the last record's data
  std::ofstream(file, std::ios::binary | std::ios::trunc) << bytes;
  EXPECT_EQ(shardrec_checkpoint_load(d.get(), dir.c_str(), nullptr), SHARDREC_ECORRUPT);
  EXPECT_NE(std::string(shardrec_last_error()).find("checksum"), std::string::npos)
      << shardrec_last_error();
  std::string why;
  EXPECT_TRUE(BitEqual(TakeSnap(d.get(), s), before, &why)) << why;
  std::ofstream(file, std::ios::binary | std::ios::trunc) << good;
  ASSERT_EQ(shardrec_checkpoint_load(d.get(), dir.c_str(), nullptr), SHARDREC_OK)
      << shardrec_last_error();
  EXPECT_TRUE(BitEqual(TakeSnap(d.get(), s), saved, &why)) << why;
}

}  // namespace
}  // namespace shardrec::testing
