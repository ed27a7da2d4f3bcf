// The GPU collection (v1: parameters and kernels on the device, exchanges on the host) through
// the public C API, run on the CPU with SHARDREC_CUDA_PLUGIN set to the fake embedding plugin:
// its device memory is host memory tracked block by block, and every kernel entry refuses a
// device-side pointer outside a live device block before running the host kernels. So these
// tests check what libshardrec.so does around the device kernels (which memory lives where, what
// is staged and when) and that a GPU collection trains bit-identically to a host collection of
// the same plan; the device kernel bodies themselves are verified by the simt tests.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "shardrec/checkpoint.h"
#include "shardrec/comm.h"
#include "shardrec/device.h"
#include "shardrec/replica.h"
#include "tests/capi/embedding/embedding_test_util.h"
#include "tests/capi/embedding/gpu_test_util.h"
#include "tests/support/spawn_ranks.h"

namespace shardrec::testing {
namespace {

TEST(EmbeddingGpuCollection, TheDeviceIsUsable) {
  // Guards the rest: without the plugin every CUDA collection would be refused as ENODEVICE.
  REQUIRE_DEVICE();
  ASSERT_EQ(shardrec_device_check(SHARDREC_DEVICE_CUDA, 0), SHARDREC_OK) << shardrec_last_error();
}

struct Case {
  const char* name;
  int32_t world;
  std::vector<int32_t> sharding;  // per table of the standard scenario
  int32_t pooling;
  int32_t optimizer;
  bool weighted;
  int32_t dtype;  // of table t1
};

std::string CaseName(const ::testing::TestParamInfo<Case>& i) { return i.param.name; }

class GpuVsHost : public ::testing::TestWithParam<Case> {};

// A host and a GPU collection of one plan trained side by side (plain and pipelined forwards,
// pointer, host-view and, under the fake, CUDA-view calls on the GPU one): the same outputs every
// step and the same weights and optimizer states at the end, bit for bit.
TEST_P(GpuVsHost, TrainsBitIdenticallyToAHostCollection) {
  REQUIRE_DEVICE();
  const Case& c = GetParam();
  Scenario s = StandardScenario(c.world, c.sharding[0], c.pooling);
  s.sharding = c.sharding;
  s.optimizer.type = c.optimizer;
  s.weighted = c.weighted;
  s.tables[1].dtype = c.dtype;
  s.steps = 4;
  if (c.world == 2) s.batch_sizes = {5, 0};  // an empty batch on one rank too
  const TrainingSetup ts(s);
  ASSERT_NE(ts.plan, nullptr);
  const auto calls_before = FakeCalls();
  SpawnRanks(s.world, [&](int r) {
    CollPtr ch, cd;
    ASSERT_NO_FATAL_FAILURE(CreateHostAndGpu(ts.plan.get(), s.world, r, ts.opt, Options(s, false),
                                             Options(s, true), &ch, &cd));
    shardrec_embedding_t* h = ch.get();
    shardrec_embedding_t* d = cd.get();
    // Created bit-identical: the device arenas get the host's initial values.
    const auto init_h = Snapshot(h, s);
    const auto init_d = Snapshot(d, s);
    ExpectSameTensors(init_h, init_d, "rank " + std::to_string(r) + " initial");
    int64_t dim = 0;
    shardrec_embedding_output_dim(h, &dim);
    const bool seq = c.pooling == SHARDREC_POOLING_NONE;
    for (int step = 0; step < s.steps; ++step) {
      const RefBatch& rb = ts.batches[step][r];
      KjtHolder kjt(rb, s.num_features, false);
      const size_t n = OutputLen(rb, seq, dim);
      std::vector<float> out_h(n), out_d(n, -7.0f);
      ASSERT_EQ(shardrec_embedding_forward(h, kjt.view(), out_h.data(), n, nullptr), SHARDREC_OK)
          << shardrec_last_error();
      shardrec_tensor_view_t vd = View(&out_d, dim, SHARDREC_DEVICE_HOST);
      // Under the fake, steps 2 and 3 write CUDA views in its device memory (staged by the C API).
      FakeDeviceFloats dev_out(FakeLoaded() && step >= 2 ? n : 0);
      if (FakeLoaded() && step >= 2 && n > 0) {
        ASSERT_NE(dev_out.data(), nullptr);
      }
      if (dev_out.data() != nullptr) vd = DeviceView(dev_out.data(), n, dim);
      if (step == 0) {
        ASSERT_EQ(shardrec_embedding_forward(d, kjt.view(), out_d.data(), n, nullptr), SHARDREC_OK)
            << shardrec_last_error();
      } else if (step == 1) {
        ASSERT_EQ(shardrec_embedding_input_dist_start(d, kjt.view(), nullptr), SHARDREC_OK);
        ASSERT_EQ(shardrec_embedding_input_dist_wait(d, nullptr), SHARDREC_OK);
        ASSERT_EQ(shardrec_embedding_forward_distributed_tensor(d, &vd, nullptr), SHARDREC_OK)
            << shardrec_last_error();
      } else {
        ASSERT_EQ(shardrec_embedding_forward_tensor(d, kjt.view(), &vd, nullptr), SHARDREC_OK)
            << shardrec_last_error();
      }
      if (dev_out.data() != nullptr) out_d = dev_out.ToVector();
      EXPECT_TRUE(BitEqual(out_h, out_d)) << "rank " << r << " step " << step;
      std::vector<float> g = ts.grads[step][r];
      ASSERT_EQ(shardrec_embedding_backward(h, g.data(), g.size(), nullptr), SHARDREC_OK)
          << shardrec_last_error();
      if (step % 2 == 0) {
        ASSERT_EQ(shardrec_embedding_backward(d, g.data(), g.size(), nullptr), SHARDREC_OK)
            << shardrec_last_error();
      } else {
        shardrec_tensor_view_t gd = View(&g, dim, SHARDREC_DEVICE_HOST);
        FakeDeviceFloats dev_g(FakeLoaded() && step == 3 ? g.size() : 0);
        if (FakeLoaded() && step == 3 && !g.empty()) {
          ASSERT_NE(dev_g.data(), nullptr);
        }
        if (dev_g.data() != nullptr) {
          std::copy(g.begin(), g.end(), dev_g.data());
          gd = DeviceView(dev_g.data(), g.size(), dim);
        }
        ASSERT_EQ(shardrec_embedding_backward_tensor(d, &gd, nullptr), SHARDREC_OK)
            << shardrec_last_error();
      }
    }
    const auto snap_h = Snapshot(h, s);
    const auto snap_d = Snapshot(d, s);
    ExpectSameTensors(snap_h, snap_d, "rank " + std::to_string(r));
    // Training moved the weights, so the comparison above is not of two untouched copies.
    EXPECT_FALSE(BitEqual(init_d[0], snap_d[0]) && BitEqual(init_d.back(), snap_d.back()));
  });
  // The GPU collection's lookups and updates went through the plugin's kernel entries (the host
  // collection never calls them): lookups, the backward, and the row-statistics phase where
  // column shards or data-parallel tables of row-wise Adagrad need it.
  if (!FakeLoaded()) return;  // the real plugin has no counters
  const auto calls = FakeCalls();
  std::array<int64_t, kNumFakeCalls> delta{};
  for (int i = 0; i < kNumFakeCalls; ++i) delta[i] = calls[i] - calls_before[i];
  EXPECT_GT(delta[kLookup], 0);
  EXPECT_GT(delta[kFused] + delta[kApply] + delta[kRowPhaseCounted], 0);
  const auto has = [&](int32_t type) {
    return std::find(c.sharding.begin(), c.sharding.end(), type) != c.sharding.end();
  };
  if (has(kDP) && c.world == 1) {
    // Alone in its group: accumulated, compacted and applied on the device (the row phases over
    // counted rows).
    EXPECT_GT(delta[kDpStep], 0) << "data-parallel gradients are accumulated on the device";
    EXPECT_GT(delta[kRowPhaseCounted], 0) << "data-parallel rows are applied on the device";
  } else if (has(kDP)) {
    // Over a host communicator the gradients are accumulated and all-reduced on the host, the
    // touched rows applied on the device.
    EXPECT_EQ(delta[kDpStep], 0);
    EXPECT_GT(delta[kApply], 0) << "data-parallel rows are applied on the device";
  }
  if (c.optimizer == kRowAdagrad && ((has(kDP) && c.world > 1) || (has(kCW) && c.world > 1))) {
    EXPECT_GT(delta[kPartial], 0);
  }
}

// Column shards of row-wise Adagrad exchange their row statistics (the non-fused path);
// data-parallel tables look up on the device and all-reduce their gradients on the host.
const Case kCases[] = {
    {"W1_TW_RW_CW_Sum_RowAda_W", 1, {kTW, kRW, kCW}, kSum, kRowAdagrad, true, kF32},
    {"W2_TW_RW_CW_Sum_RowAda_W", 2, {kTW, kRW, kCW}, kSum, kRowAdagrad, true, kF32},
    {"W2_CW_Mean_RowAda", 2, {kCW, kCW, kCW}, kMean, kRowAdagrad, false, kF32},
    {"W2_TRW_Grid_Mean_Adam_Fp16", 2, {kTRW, kGrid, kRW}, kMean, kAdam, false, kF16},
    {"W1_CW_Sum_Adam_Fp16_W", 1, {kCW, kCW, kTW}, kSum, kAdam, true, kF16},
    {"W2_TW_RW_CW_Seq_Sgd", 2, {kTW, kRW, kCW}, kNone, kSgd, false, kF32},
    {"W2_RW_Seq_RowAda_W", 2, {kRW, kCW, kTW}, kNone, kRowAdagrad, true, kF32},
    {"W2_DP_RW_CW_Sum_RowAda_W", 2, {kDP, kRW, kCW}, kSum, kRowAdagrad, true, kF32},
    {"W2_TW_DP_Grid_Mean_Adam_Fp16", 2, {kTW, kDP, kGrid}, kMean, kAdam, false, kF16},
    {"W1_DP_DP_TW_Mean_Sgd_W", 1, {kDP, kDP, kTW}, kMean, kSgd, true, kF32},
    {"W2_DP_RW_DP_Seq_Adam_W", 2, {kDP, kRW, kDP}, kNone, kAdam, true, kF32},
    // The other three optimizers: row statistics across column shards (LAMB has two, partial
    // row-wise Adam one), the fused path on whole rows, data-parallel rows, and bf16 storage.
    {"W2_CW_TW_DP_Sum_Lamb_W", 2, {kCW, kTW, kDP}, kSum, kLamb, true, kF32},
    {"W2_CW_RW_Grid_Mean_PartialAdam_Bf16",
     2,
     {kCW, kRW, kGrid},
     kMean,
     kPartialAdam,
     false,
     kBf16},
    {"W1_TW_RW_DP_Sum_Adagrad_W_Bf16", 1, {kTW, kRW, kDP}, kSum, kAdagrad, true, kBf16},
};

INSTANTIATE_TEST_SUITE_P(Plans, GpuVsHost, ::testing::ValuesIn(kCases), CaseName);

// Accessors copy through the host: what is set is read back, on every rank, bit for bit; 16-bit
// weights round as a host collection rounds them.
TEST(EmbeddingGpuCollection, AccessorsRoundTrip) {
  REQUIRE_DEVICE();
  Scenario s = StandardScenario(2, SHARDREC_SHARDING_ROW_WISE, SHARDREC_POOLING_SUM);
  s.sharding = {kTW, kCW, kRW};
  s.tables[2].dtype = SHARDREC_DTYPE_BFLOAT16;
  s.optimizer.type = SHARDREC_OPTIMIZER_ADAM;
  PlanPtr plan = MakePlan(s);
  const shardrec_optimizer_config_t opt = ToCOptimizer(s.optimizer);
  SpawnRanks(s.world, [&](int r) {
    CollPtr ch, cd;
    ASSERT_NO_FATAL_FAILURE(CreateHostAndGpu(plan.get(), s.world, r, opt, Options(s, false),
                                             Options(s, true), &ch, &cd));
    shardrec_embedding_t* h = ch.get();
    shardrec_embedding_t* d = cd.get();
    for (const RefTable& t : s.tables) {
      std::vector<float> w(static_cast<size_t>(t.rows) * t.dim);
      for (size_t i = 0; i < w.size(); ++i) w[i] = 0.001f * static_cast<float>(i) - 0.37f;
      ASSERT_EQ(shardrec_embedding_set_weights(h, t.name.c_str(), w.data(), w.size()), SHARDREC_OK);
      ASSERT_EQ(shardrec_embedding_set_weights(d, t.name.c_str(), w.data(), w.size()), SHARDREC_OK)
          << shardrec_last_error();
      std::vector<float> m(w.size());
      for (size_t i = 0; i < m.size(); ++i) m[i] = 0.5f + static_cast<float>(i);
      ASSERT_EQ(shardrec_embedding_set_state(d, t.name.c_str(), "momentum2", m.data(), m.size()),
                SHARDREC_OK)
          << shardrec_last_error();
      ASSERT_EQ(shardrec_embedding_set_state(h, t.name.c_str(), "momentum2", m.data(), m.size()),
                SHARDREC_OK);
      std::vector<float> back(m.size(), -1.0f);
      ASSERT_EQ(
          shardrec_embedding_get_state(d, t.name.c_str(), "momentum2", back.data(), back.size()),
          SHARDREC_OK);
      EXPECT_TRUE(BitEqual(back, m)) << t.name;
      if (t.dtype == SHARDREC_DTYPE_FLOAT32) {
        std::vector<float> wb(w.size(), -1.0f);
        ASSERT_EQ(shardrec_embedding_get_weights(d, t.name.c_str(), wb.data(), wb.size()),
                  SHARDREC_OK);
        EXPECT_TRUE(BitEqual(wb, w)) << t.name;
      }
    }
    const auto a = Snapshot(h, s);
    const auto b = Snapshot(d, s);
    ExpectSameTensors(a, b, "");
  });
}

// What v1 refuses, clearly and without taking a step: a device that does not exist, a KJT on
// another device than the collection's; and a load from a directory without a checkpoint.
TEST(EmbeddingGpuCollection, RefusalsChangeNothing) {
  REQUIRE_DEVICE();
  Scenario s = StandardScenario(2, SHARDREC_SHARDING_ROW_WISE, SHARDREC_POOLING_SUM);
  s.steps = 1;
  const TrainingSetup ts(s);
  ASSERT_NE(ts.plan, nullptr);
  SpawnRanks(s.world, [&](int r) {
    shardrec_embedding_t* c = nullptr;
    // No machine has cuda:999: ENODEVICE on its rank, EINVAL on the peer.
    const shardrec_embedding_options_t bad = Options(s, true, r == 1 ? 999 : 0);
    EXPECT_EQ(shardrec_embedding_create(&c, ts.plan.get(), GroupComm(s.world, r), &ts.opt, &bad),
              r == 1 ? SHARDREC_ENODEVICE : SHARDREC_EINVAL)
        << shardrec_last_error();
    EXPECT_EQ(c, nullptr);
    const shardrec_embedding_options_t od = Options(s, true);
    ASSERT_EQ(shardrec_embedding_create(&c, ts.plan.get(), GroupComm(s.world, r), &ts.opt, &od),
              SHARDREC_OK)
        << shardrec_last_error();
    CollPtr cc(c);
    const auto before = Snapshot(c, s);
    const std::string dir = ::testing::TempDir() + "gpu_coll_no_ckpt";
    EXPECT_EQ(shardrec_checkpoint_load(c, dir.c_str(), nullptr), SHARDREC_ENOTFOUND)
        << shardrec_last_error();

    int64_t dim = 0;
    shardrec_embedding_output_dim(c, &dim);
    const RefBatch& rb = ts.batches[0][r];
    KjtHolder kjt(rb, s.num_features, false);
    std::vector<float> out(static_cast<size_t>(rb.batch_size * dim));
    // A KJT on another device than the collection's: refused on its rank, EINVAL on the peer.
    shardrec_kjt_view_t elsewhere = *kjt.view();
    elsewhere.device_type = SHARDREC_DEVICE_CUDA;
    elsewhere.device_index = 1;
    EXPECT_EQ(shardrec_embedding_forward(c, r == 0 ? &elsewhere : kjt.view(), out.data(),
                                         out.size(), nullptr),
              SHARDREC_EINVAL)
        << shardrec_last_error();
    if (r == 0) {
      EXPECT_NE(std::string(shardrec_last_error()).find("the batch is on cuda:1"),
                std::string::npos)
          << shardrec_last_error();
    }
    std::vector<float> g = ts.grads[0][r];
    EXPECT_EQ(shardrec_embedding_backward(c, g.data(), g.size(), nullptr), SHARDREC_EUSAGE);
    int64_t steps = -1;
    ASSERT_EQ(shardrec_embedding_num_steps(c, &steps), SHARDREC_OK);
    EXPECT_EQ(steps, 0);
    const auto after = Snapshot(c, s);
    ExpectSameTensors(before, after, "rank " + std::to_string(r));
  });
}

// An id outside its table is caught while routing on the host: the same error, word for word,
// as a host collection's, and no state changes.
TEST(EmbeddingGpuCollection, OutOfRangeIdFailsAsOnTheHost) {
  REQUIRE_DEVICE();
  Scenario s = StandardScenario(2, SHARDREC_SHARDING_ROW_WISE, SHARDREC_POOLING_SUM);
  s.steps = 1;
  ReferenceModel ref(s.num_features, s.tables, s.optimizer, s.seed, s.world);
  auto batches = MakeBatches(s, ref);
  ASSERT_FALSE(batches[0][1].ids.empty());
  batches[0][1].ids[0] = 1000;
  PlanPtr plan = MakePlan(s);
  const shardrec_optimizer_config_t opt = ToCOptimizer(s.optimizer);
  std::vector<std::string> errors(4);
  SpawnRanks(s.world, [&](int r) {
    for (int cuda = 0; cuda < 2; ++cuda) {
      const shardrec_embedding_options_t o = Options(s, cuda == 1);
      shardrec_embedding_t* c = nullptr;
      ASSERT_EQ(shardrec_embedding_create(&c, plan.get(), GroupComm(s.world, r), &opt, &o),
                SHARDREC_OK)
          << shardrec_last_error();
      CollPtr cc(c);
      int64_t dim = 0;
      shardrec_embedding_output_dim(c, &dim);
      const auto before = Snapshot(c, s);
      KjtHolder kjt(batches[0][r], s.num_features, false);
      std::vector<float> out(static_cast<size_t>(batches[0][r].batch_size * dim));
      EXPECT_EQ(shardrec_embedding_forward(c, kjt.view(), out.data(), out.size(), nullptr),
                SHARDREC_EINVAL);
      errors[r * 2 + cuda] = shardrec_last_error();
      const auto after = Snapshot(c, s);
      ExpectSameTensors(before, after, "");
    }
  });
  EXPECT_EQ(errors[0], errors[1]);
  EXPECT_EQ(errors[2], errors[3]);
  EXPECT_NE(errors[2].find("1000"), std::string::npos) << errors[2];
}

struct DeviceKjtCase {
  const char* name;
  std::vector<int32_t> sharding;
  int32_t pooling;
  bool weighted;
  bool int32_ids;
};

class DeviceKjtVsHost : public ::testing::TestWithParam<DeviceKjtCase> {};

// A KJT in device memory is routed on the device (the emb_route entry) and trains exactly as
// the same batch in host memory on a host collection: outputs every step, weights and states at
// the end, bit for bit. The test copies the KJT into device memory through the fake's hooks, or
// into CUDA managed memory on a GPU (the C API has no allocator of its own).
TEST_P(DeviceKjtVsHost, TrainsBitIdenticallyToAHostKjt) {
  REQUIRE_DEVICE();
  if (!DeviceBuffersAvailable()) GTEST_SKIP() << "no device buffers for device KJTs here";
  const DeviceKjtCase& c = GetParam();
  Scenario s = StandardScenario(2, c.sharding[0], c.pooling);
  s.sharding = c.sharding;
  s.weighted = c.weighted;
  s.steps = 3;
  s.batch_sizes = {5, 3};
  const TrainingSetup ts(s);
  ASSERT_NE(ts.plan, nullptr);
  const auto calls_before = FakeCalls();
  SpawnRanks(s.world, [&](int r) {
    CollPtr ch, cd;
    ASSERT_NO_FATAL_FAILURE(CreateHostAndGpu(ts.plan.get(), s.world, r, ts.opt, Options(s, false),
                                             Options(s, true), &ch, &cd));
    shardrec_embedding_t* h = ch.get();
    shardrec_embedding_t* d = cd.get();
    int64_t dim = 0;
    shardrec_embedding_output_dim(h, &dim);
    const bool seq = c.pooling == SHARDREC_POOLING_NONE;
    for (int step = 0; step < s.steps; ++step) {
      const RefBatch& rb = ts.batches[step][r];
      KjtHolder kjt(rb, s.num_features, c.int32_ids);
      DeviceKjt dkjt(*kjt.view());
      const size_t n = OutputLen(rb, seq, dim);
      std::vector<float> out_h(n), out_d(n, -7.0f);
      ASSERT_EQ(shardrec_embedding_forward(h, kjt.view(), out_h.data(), n, nullptr), SHARDREC_OK)
          << shardrec_last_error();
      if (step == 1) {
        ASSERT_EQ(shardrec_embedding_input_dist_start(d, dkjt.view(), nullptr), SHARDREC_OK)
            << shardrec_last_error();
        ASSERT_EQ(shardrec_embedding_input_dist_wait(d, nullptr), SHARDREC_OK);
        ASSERT_EQ(shardrec_embedding_forward_distributed(d, out_d.data(), n, nullptr), SHARDREC_OK)
            << shardrec_last_error();
      } else {
        ASSERT_EQ(shardrec_embedding_forward(d, dkjt.view(), out_d.data(), n, nullptr), SHARDREC_OK)
            << shardrec_last_error();
      }
      EXPECT_TRUE(BitEqual(out_h, out_d)) << "rank " << r << " step " << step;
      std::vector<float> g = ts.grads[step][r];
      ASSERT_EQ(shardrec_embedding_backward(h, g.data(), g.size(), nullptr), SHARDREC_OK)
          << shardrec_last_error();
      ASSERT_EQ(shardrec_embedding_backward(d, g.data(), g.size(), nullptr), SHARDREC_OK)
          << shardrec_last_error();
    }
    const auto snap_h = Snapshot(h, s);
    const auto snap_d = Snapshot(d, s);
    ExpectSameTensors(snap_h, snap_d, "rank " + std::to_string(r));
  });
  // Both ranks routed every step on the device: two entry calls (count, fill) per route, which
  // only the fake counts (on a GPU every count reads 0).
  if (FakeLoaded()) {
    const auto calls = FakeCalls();
    EXPECT_GE(calls[kRoute] - calls_before[kRoute], 2 * s.world * s.steps);
  }
}

const DeviceKjtCase kDeviceKjtCases[] = {
    {"TW_RW_CW_Sum_W", {kTW, kRW, kCW}, kSum, true, false},
    {"TRW_Grid_DP_Mean_I32", {kTRW, kGrid, kDP}, kMean, false, true},
    {"RW_CW_TW_Seq_W", {kRW, kCW, kTW}, kNone, true, false},
    {"DP_RW_DP_Seq_W_I32", {kDP, kRW, kDP}, kNone, true, true},
};

INSTANTIATE_TEST_SUITE_P(Plans, DeviceKjtVsHost, ::testing::ValuesIn(kDeviceKjtCases),
                         [](const ::testing::TestParamInfo<DeviceKjtCase>& i) {
                           return std::string(i.param.name);
                         });

// A device KJT with an id outside its table, a NaN weight or a negative length fails with the
// host collection's words (the device route's first error), and nothing changes.
TEST(EmbeddingGpuCollection, DeviceKjtRejectionsMatchTheHost) {
  REQUIRE_DEVICE();
  if (!DeviceBuffersAvailable()) GTEST_SKIP() << "no device buffers for device KJTs here";
  Scenario s = StandardScenario(2, SHARDREC_SHARDING_ROW_WISE, SHARDREC_POOLING_SUM);
  s.steps = 1;
  s.weighted = true;
  ReferenceModel ref(s.num_features, s.tables, s.optimizer, s.seed, s.world);
  const auto batches = MakeBatches(s, ref);
  ASSERT_GE(batches[0][1].ids.size(), 3u);
  PlanPtr plan = MakePlan(s);
  const shardrec_optimizer_config_t opt = ToCOptimizer(s.optimizer);
  for (int kind = 0; kind < 3; ++kind) {
    auto bad = batches;
    RefBatch& b = bad[0][1];
    if (kind == 0) b.ids[2] = 1000;
    if (kind == 1) b.weights[1] = std::nanf("");
    std::vector<std::string> errors(4);
    SpawnRanks(s.world, [&](int r) {
      for (int cuda = 0; cuda < 2; ++cuda) {
        const shardrec_embedding_options_t o = Options(s, cuda == 1);
        shardrec_embedding_t* c = nullptr;
        ASSERT_EQ(shardrec_embedding_create(&c, plan.get(), GroupComm(s.world, r), &opt, &o),
                  SHARDREC_OK)
            << shardrec_last_error();
        CollPtr cc(c);
        int64_t dim = 0;
        shardrec_embedding_output_dim(c, &dim);
        const auto before = Snapshot(c, s);
        KjtHolder kjt(bad[0][r], s.num_features, false);
        shardrec_kjt_view_t host = *kjt.view();
        std::vector<int32_t> lengths(host.lengths, host.lengths + host.num_lengths);
        if (kind == 2 && r == 1) {
          lengths[1] = -lengths[1] - 1;
          host.lengths = lengths.data();
        }
        DeviceKjt dkjt(host);
        std::vector<float> out(static_cast<size_t>(bad[0][r].batch_size * dim));
        EXPECT_EQ(shardrec_embedding_forward(c, cuda == 1 ? dkjt.view() : &host, out.data(),
                                             out.size(), nullptr),
                  SHARDREC_EINVAL);
        errors[r * 2 + cuda] = shardrec_last_error();
        const auto after = Snapshot(c, s);
        ExpectSameTensors(before, after, "");
      }
    });
    EXPECT_EQ(errors[0], errors[1]) << kind;
    EXPECT_EQ(errors[2], errors[3]) << kind;
    const char* expect[] = {"id 1000", "weight nan", "negative length"};
    EXPECT_NE(errors[2].find(expect[kind]), std::string::npos) << errors[2];
  }
}

// A device KJT whose arrays the caller copies on a side stream (the copies still queued there when
// the call starts) is read after them: the collection's stream waits for the caller's `stream`
// before routing it, in shardrec_embedding_forward and in input_dist_start alike, and the output
// is a host collection's, bit for bit. Through the fake (its side-stream copies land only when
// the stream is waited for) and on a real GPU (a CUDA stream whose copies wait behind a host
// function that holds it for FakeSideStream::kRealUploadDelayMs).
TEST(EmbeddingGpuCollection, DeviceKjtIsReadAfterTheCallersStream) {
  REQUIRE_DEVICE();
  if (!DeviceBuffersAvailable()) GTEST_SKIP() << "no device buffers here";
  Scenario s = StandardScenario(1, kRW, kSum);
  s.sharding = {kDP, kRW, kTW};
  s.weighted = true;
  s.steps = 1;
  const TrainingSetup ts(s);
  ASSERT_NE(ts.plan, nullptr);
  shardrec_embedding_options_t oh = Options(s, false), od = Options(s, true);
  CollPtr ch, cd;
  ASSERT_NO_FATAL_FAILURE(CreateHostAndGpu(ts.plan.get(), 1, 0, ts.opt, oh, od, &ch, &cd));
  int64_t dim = 0;
  shardrec_embedding_output_dim(cd.get(), &dim);
  const RefBatch& rb = ts.batches[0][0];
  KjtHolder kjt(rb, s.num_features, false);
  const shardrec_kjt_view_t& host = *kjt.view();
  const size_t n = OutputLen(rb, false, dim);
  std::vector<float> out_h(n);
  ASSERT_EQ(shardrec_embedding_forward(ch.get(), &host, out_h.data(), n, nullptr), SHARDREC_OK);
  const size_t len_bytes = host.num_lengths * sizeof(int32_t);
  const size_t val_bytes =
      host.num_values * (host.values_dtype == SHARDREC_DTYPE_INT32 ? sizeof(int32_t) : 8);
  const size_t w_bytes = host.num_weights * sizeof(float);
  // The device arrays of both calls outlive the side stream, which lands what is still queued on
  // it when it goes.
  FakeDeviceBlock blocks[2][3] = {
      {FakeDeviceBlock(len_bytes), FakeDeviceBlock(val_bytes), FakeDeviceBlock(w_bytes)},
      {FakeDeviceBlock(len_bytes), FakeDeviceBlock(val_bytes), FakeDeviceBlock(w_bytes)}};
  FakeSideStream side;
  if (side.get() == nullptr) GTEST_SKIP() << "no side stream here (the fake's or CUDA's)";
  for (int call = 0; call < 2; ++call) {
    SCOPED_TRACE(call == 0 ? "forward" : "input_dist_start");
    FakeDeviceBlock& lengths = blocks[call][0];
    FakeDeviceBlock& values = blocks[call][1];
    FakeDeviceBlock& weights = blocks[call][2];
    // Zeros on the device until the side stream's copies land.
    for (FakeDeviceBlock* b : {&lengths, &values, &weights}) {
      if (b->data() != nullptr) std::memset(b->data(), 0, b->bytes());
    }
    ASSERT_TRUE(side.Upload(lengths.data(), host.lengths, len_bytes));
    ASSERT_TRUE(side.Upload(values.data(), host.values, val_bytes));
    if (w_bytes > 0) {
      ASSERT_TRUE(side.Upload(weights.data(), host.weights, w_bytes));
    }
    shardrec_kjt_view_t dev = host;
    dev.lengths = static_cast<const int32_t*>(lengths.data());
    dev.values = values.data();
    dev.weights = static_cast<const float*>(weights.data());
    dev.device_type = SHARDREC_DEVICE_CUDA;
    dev.device_index = 0;
    std::vector<float> out_d(n, -1.0f);
    if (call == 0) {
      ASSERT_EQ(shardrec_embedding_forward(cd.get(), &dev, out_d.data(), n, side.get()),
                SHARDREC_OK)
          << shardrec_last_error();
    } else {
      ASSERT_EQ(shardrec_embedding_input_dist_start(cd.get(), &dev, side.get()), SHARDREC_OK)
          << shardrec_last_error();
      ASSERT_EQ(shardrec_embedding_input_dist_wait(cd.get(), side.get()), SHARDREC_OK)
          << shardrec_last_error();
      ASSERT_EQ(shardrec_embedding_forward_distributed(cd.get(), out_d.data(), n, side.get()),
                SHARDREC_OK)
          << shardrec_last_error();
    }
    EXPECT_TRUE(BitEqual(out_h, out_d));
  }
}

// A GPU collection's pinned staging is allocated with its device made current (the plugin's
// host_alloc_on): on a thread with no current device a plain cudaMallocHost would create a
// context on device 0. Creation, a forward and a backward allocate none without a device.
TEST(EmbeddingGpuCollection, PinnedMemoryIsAllocatedOnTheCollectionsDevice) {
  REQUIRE_FAKE();
  if (FakeHostAllocsWithoutDevice() < 0) GTEST_SKIP() << "needs the fake's allocation counter";
  Scenario s = StandardScenario(1, kRW, kSum);
  s.steps = 1;
  const TrainingSetup ts(s);
  ASSERT_NE(ts.plan, nullptr);
  const int64_t before = FakeHostAllocsWithoutDevice();
  const shardrec_embedding_options_t od = Options(s, true);
  shardrec_embedding_t* c = nullptr;
  ASSERT_EQ(shardrec_embedding_create(&c, ts.plan.get(), GroupComm(1, 0), &ts.opt, &od),
            SHARDREC_OK)
      << shardrec_last_error();
  CollPtr cd(c);
  int64_t dim = 0;
  shardrec_embedding_output_dim(c, &dim);
  const RefBatch& rb = ts.batches[0][0];
  KjtHolder kjt(rb, s.num_features, false);
  std::vector<float> out(OutputLen(rb, false, dim));
  ASSERT_EQ(shardrec_embedding_forward(c, kjt.view(), out.data(), out.size(), nullptr), SHARDREC_OK)
      << shardrec_last_error();
  std::vector<float> g = ts.grads[0][0];
  ASSERT_EQ(shardrec_embedding_backward(c, g.data(), g.size(), nullptr), SHARDREC_OK)
      << shardrec_last_error();
  EXPECT_EQ(FakeHostAllocsWithoutDevice(), before);
}

// A Gloo communicator over CUDA buffers stages them through pinned host memory allocated with its
// device made current (host_alloc_on), never by a bare host_alloc, and gives the sum.
TEST(EmbeddingGpuCollection, GlooStagingOfDeviceBuffersIsPinnedOnItsDevice) {
  REQUIRE_FAKE();
  if (FakeHostAllocsWithoutDevice() < 0) GTEST_SKIP() << "needs the fake's allocation counter";
  shardrec_comm_options_t o = SHARDREC_COMM_OPTIONS_INIT;
  o.backend = SHARDREC_BACKEND_GLOO;
  o.device_type = SHARDREC_DEVICE_CUDA;
  o.device_index = 0;
  o.timeout_ms = 20000;
  shardrec_comm_t* comms[2] = {nullptr, nullptr};
  ASSERT_EQ(shardrec_comm_create_local_group(comms, 2, &o), SHARDREC_OK) << shardrec_last_error();
  const int64_t before = FakeHostAllocsWithoutDevice();
  std::vector<std::vector<float>> got(2);
  SpawnRanks(2, [&](int r) {
    const std::vector<float> mine = {1.0f + r, 2.0f, 3.0f * r, -4.0f};
    FakeDeviceCopy send(mine);
    FakeDeviceFloats recv(mine.size());
    ASSERT_EQ(shardrec_comm_allreduce(comms[r], send.data(), recv.data(), mine.size(),
                                      SHARDREC_DTYPE_FLOAT32, SHARDREC_REDUCE_SUM, nullptr),
              SHARDREC_OK)
        << shardrec_last_error();
    got[static_cast<size_t>(r)] = recv.ToVector();
  });
  EXPECT_EQ(FakeHostAllocsWithoutDevice(), before);
  const std::vector<float> want = {3.0f, 4.0f, 3.0f, -8.0f};
  EXPECT_TRUE(BitEqual(got[0], want));
  EXPECT_TRUE(BitEqual(got[1], want));
  for (shardrec_comm_t* c : comms) shardrec_comm_destroy(c);
}

}  // namespace
}  // namespace shardrec::testing
