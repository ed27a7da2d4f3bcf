// How a GPU collection moves data (step.h): every host <-> device copy of a phase goes
// through pinned staging and the phase waits once. Counted through the fake embedding plugin's
// runtime counters (shardrec_fake_runtime_calls): host synchronisations, copies by direction and
// allocations. The fake runs copies only when the stream gets there (SHARDREC_FAKE_DEFER_COPIES,
// set by ctest), so these runs also check that nothing reads a staging block before its wait;
// the results are compared bit for bit with a host collection. Fake-only: skipped elsewhere.
#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <string>
#include <vector>

#include "shardrec/device.h"
#include "tests/capi/embedding/embedding_test_util.h"
#include "tests/capi/embedding/gpu_test_util.h"
#include "tests/support/spawn_ranks.h"

namespace shardrec::testing {
namespace {

struct SyncCase {
  const char* name;
  std::vector<int32_t> sharding;
  int32_t pooling;
  int32_t optimizer;
  // Per forward and per backward, as step.h documents them for this plan.
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
  // Sized at creation for these batches: no buffer grows (a growth would wait) in any step.
  od.max_batch_size = 6;
  od.max_ids_per_batch = 6 * s.num_features * s.max_bag;
  // (A host collection creates no stream.)
  const int64_t streams_before = LiveStreams();
  CollPtr ch, cd;
  ASSERT_NO_FATAL_FAILURE(CreateHostAndGpu(plan.get(), 1, 0, opt, oh, od, &ch, &cd));
  shardrec_embedding_t* h = ch.get();
  shardrec_embedding_t* d = cd.get();
  // The collection queues on a stream of its own (the fake's waits drain only the stream they
  // name, so work left on another stream would show up as wrong bits).
  EXPECT_EQ(LiveStreams(), streams_before + 1);
  int64_t dim = 0;
  shardrec_embedding_output_dim(d, &dim);
  const bool seq = c.pooling == SHARDREC_POOLING_NONE;
  for (int step = 0; step < s.steps; ++step) {
    const RefBatch& rb = batches[step][0];
    KjtHolder kjt(rb, s.num_features, false);
    const size_t n = OutputLen(rb, seq, dim);
    std::vector<float> out_h(n), out_d(n);
    ASSERT_EQ(shardrec_embedding_forward(h, kjt.view(), out_h.data(), n, nullptr), SHARDREC_OK);
    const Counts f0 = Runtime();
    ASSERT_EQ(shardrec_embedding_forward(d, kjt.view(), out_d.data(), n, nullptr), SHARDREC_OK)
        << shardrec_last_error();
    const Counts fwd = Delta(f0, Runtime());
    EXPECT_EQ(fwd[kDeviceAlloc] + fwd[kHostAlloc], 0) << "forward allocations, step " << step;
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
    EXPECT_EQ(bwd[kDeviceAlloc] + bwd[kHostAlloc], 0) << "backward allocations, step " << step;
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
  ExpectSameTensors(a, b, "");
  cd.reset();
  EXPECT_EQ(LiveStreams(), streams_before) << "the collection's stream outlived it";
}

const SyncCase kSyncCases[] = {
    // Fused backward on every shard: one wait per call.
    {"Fused", {kTW, kRW, kTW}, kSum, kAdam, {1, 1, 1, 0, 0}, {1, 1, 0, 0, 0}},
    // A data-parallel table: looked up in the forward's one phase (its ids ride with the runs,
    // its columns are written into the device output); in backward accumulated, compacted and
    // applied on the device within the sharded tables' phase (its ids and the output gradient in
    // one more upload, no wait of its own).
    {"DataParallel", {kDP, kRW, kTW}, kSum, kSgd, {1, 1, 1, 0, 0}, {1, 2, 0, 0, 0}},
    // Sequence: aggregated, the unique-row counts left on the device for the updates (no row
    // statistics to exchange): one wait, as fused shards.
    {"Sequence", {kTW, kRW, kTW}, kNone, kSgd, {1, 1, 1, 0, 0}, {1, 1, 0, 0, 0}},
    // Column shards of row-wise Adagrad: their statistics summed on the device (the exchange
    // between this rank's own shards is a device copy), counts on the device: one wait.
    {"ColumnStats", {kCW, kCW, kCW}, kSum, kRowAdagrad, {1, 1, 1, 0, 0}, {1, 1, 0, 0, 0}},
};

INSTANTIATE_TEST_SUITE_P(Plans, GpuStaging, ::testing::ValuesIn(kSyncCases), SyncCaseName);

// Trains a world-2 plan with a GPU collection created with `hints` next to a host collection
// (given the same hints, which it ignores) and returns the fake's counts over the steps only
// (creation left out), summed over both ranks; the two must agree bit for bit every step.
Counts TrainWithHints(const Scenario& s, int64_t max_batch, int64_t max_ids) {
  const TrainingSetup ts(s);
  std::vector<Counts> created(s.world), done(s.world);
  SpawnRanks(s.world, [&](int r) {
    shardrec_embedding_options_t o;
    shardrec_embedding_options_init(&o, SHARDREC_EMBEDDING_OPTIONS_VERSION);
    o.seed = s.seed;
    o.max_batch_size = max_batch;
    o.max_ids_per_batch = max_ids;
    shardrec_embedding_options_t od = o;
    od.device_type = SHARDREC_DEVICE_CUDA;
    CollPtr ch, cd;
    ASSERT_NO_FATAL_FAILURE(CreateHostAndGpu(ts.plan.get(), s.world, r, ts.opt, o, od, &ch, &cd));
    shardrec_embedding_t* h = ch.get();
    shardrec_embedding_t* d = cd.get();
    int64_t dim = 0;
    shardrec_embedding_output_dim(d, &dim);
    // Both ranks have created before either counts (the creation's agreement is collective
    // and its last allocation precedes it), and both count after their last step.
    created[r] = Runtime();
    const bool seq = s.tables[0].pooling == SHARDREC_POOLING_NONE;
    for (int step = 0; step < s.steps; ++step) {
      const RefBatch& rb = ts.batches[step][r];
      KjtHolder kjt(rb, s.num_features, false);
      const size_t n = OutputLen(rb, seq, dim);
      std::vector<float> out_h(n), out_d(n);
      ASSERT_EQ(shardrec_embedding_forward(h, kjt.view(), out_h.data(), n, nullptr), SHARDREC_OK);
      ASSERT_EQ(shardrec_embedding_forward(d, kjt.view(), out_d.data(), n, nullptr), SHARDREC_OK)
          << shardrec_last_error();
      EXPECT_TRUE(BitEqual(out_h, out_d)) << "rank " << r << " step " << step;
      std::vector<float> g = ts.grads[step][r];
      ASSERT_EQ(shardrec_embedding_backward(h, g.data(), g.size(), nullptr), SHARDREC_OK);
      ASSERT_EQ(shardrec_embedding_backward(d, g.data(), g.size(), nullptr), SHARDREC_OK)
          << shardrec_last_error();
    }
    const auto a = Snapshot(h, s);
    const auto b = Snapshot(d, s);
    ExpectSameTensors(a, b, "");
    // Snapshot reads through the accessors, which allocate nothing on the device.
    done[r] = Runtime();
  });
  // The counters are per process. A rank's creation returns only after every rank's device
  // and pinned allocations (they precede the creation's collective agreement), so the window
  // from the earliest return to the latest end holds every step and no creation.
  Counts first = created[0], last = done[0];
  for (int r = 1; r < s.world; ++r)
    for (int i = 0; i < kNumCounters; ++i) {
      first[i] = std::min(first[i], created[r][i]);
      last[i] = std::max(last[i], done[r][i]);
    }
  return Delta(first, last);
}

// Every plan shape of the GPU collection test, with hints that hold its batches: after creation
// no step allocates device or pinned memory.
TEST(GpuStagingHints, NoAllocationWithinTheHints) {
  REQUIRE_FAKE();
  struct Shape {
    std::vector<int32_t> sharding;
    int32_t pooling;
    int32_t optimizer;
  };
  const Shape shapes[] = {
      {{kTW, kRW, kCW}, kSum, kRowAdagrad},
      {{kDP, kRW, kCW}, kSum, kRowAdagrad},
      {{kRW, kCW, kTW}, kNone, kRowAdagrad},
      {{kDP, kRW, kDP}, kNone, kAdam},
  };
  for (const Shape& sh : shapes) {
    Scenario s = StandardScenario(2, sh.sharding[0], sh.pooling);
    s.sharding = sh.sharding;
    s.optimizer.type = sh.optimizer;
    s.weighted = true;
    s.steps = 3;
    s.batch_sizes = {5, 3};
    const Counts c = TrainWithHints(s, 5, 5 * s.num_features * s.max_bag);
    EXPECT_EQ(c[kDeviceAlloc], 0) << "device allocations in the steps";
    EXPECT_EQ(c[kHostAlloc], 0) << "pinned allocations in the steps";
    EXPECT_GT(c[kSync], 0);
  }
}

// Hints smaller than the batches: the buffers grow on demand and the results stay exact.
TEST(GpuStagingHints, BeyondTheHintsBuffersGrow) {
  REQUIRE_FAKE();
  Scenario s = StandardScenario(2, kRW, kSum);
  s.sharding = {kTW, kDP, kCW};
  s.optimizer.type = kRowAdagrad;
  s.steps = 3;
  s.batch_sizes = {5, 4};
  const Counts c = TrainWithHints(s, 1, 1);
  EXPECT_GT(c[kDeviceAlloc] + c[kHostAlloc], 0);
}

// Hints the device cannot hold: creation fails on that rank with ENOMEM naming the bytes (its
// peer learns that a rank rejected the configuration), and nothing is left behind.
TEST(GpuStagingHints, HintsBeyondTheDeviceAreOutOfMemory) {
  REQUIRE_FAKE();
  Scenario s = StandardScenario(2, kRW, kSum);
  PlanPtr plan = MakePlan(s);
  const shardrec_optimizer_config_t opt = ToCOptimizer(s.optimizer);
  std::vector<std::string> errors(2);
  SpawnRanks(2, [&](int r) {
    shardrec_embedding_options_t o;
    shardrec_embedding_options_init(&o, SHARDREC_EMBEDDING_OPTIONS_VERSION);
    o.device_type = SHARDREC_DEVICE_CUDA;
    o.max_batch_size = r == 0 ? (int64_t{1} << 30) : 4;
    o.max_ids_per_batch = r == 0 ? (int64_t{1} << 30) : 64;
    shardrec_embedding_t* c = nullptr;
    EXPECT_EQ(shardrec_embedding_create(&c, plan.get(), GroupComm(2, r), &opt, &o),
              r == 0 ? SHARDREC_ENOMEM : SHARDREC_EINVAL);
    errors[r] = shardrec_last_error();
    EXPECT_EQ(c, nullptr);
  });
  EXPECT_NE(errors[0].find("bytes"), std::string::npos) << errors[0];
  EXPECT_NE(errors[0].find("max_ids_per_batch 1073741824"), std::string::npos) << errors[0];
}

// Negative hints are bad input, for host and GPU collections alike; hints overflowing the sizes
// are refused by a GPU collection.
TEST(GpuStagingHints, BadHintsAreRejected) {
  REQUIRE_FAKE();
  Scenario s = StandardScenario(1, kTW, kSum);
  PlanPtr plan = MakePlan(s);
  const shardrec_optimizer_config_t opt = ToCOptimizer(s.optimizer);
  for (int cuda = 0; cuda < 2; ++cuda) {
    shardrec_embedding_options_t o;
    shardrec_embedding_options_init(&o, SHARDREC_EMBEDDING_OPTIONS_VERSION);
    if (cuda == 1) o.device_type = SHARDREC_DEVICE_CUDA;
    o.max_batch_size = -1;
    shardrec_embedding_t* c = nullptr;
    EXPECT_EQ(shardrec_embedding_create(&c, plan.get(), GroupComm(1, 0), &opt, &o),
              SHARDREC_EINVAL);
    EXPECT_NE(std::string(shardrec_last_error()).find("max_batch_size"), std::string::npos);
    EXPECT_EQ(c, nullptr);
    // A version 3 caller has no hint fields: what lies there is not read.
    shardrec_embedding_options_t v3 = o;
    v3.version = 3;
    ASSERT_EQ(shardrec_embedding_create(&c, plan.get(), GroupComm(1, 0), &opt, &v3), SHARDREC_OK)
        << shardrec_last_error();
    shardrec_embedding_destroy(c);
    c = nullptr;
    o.max_batch_size = INT64_MAX;
    o.max_ids_per_batch = INT64_MAX;
    const shardrec_status_t st =
        shardrec_embedding_create(&c, plan.get(), GroupComm(1, 0), &opt, &o);
    if (cuda == 0) {
      // Ignored by a host collection.
      EXPECT_EQ(st, SHARDREC_OK) << shardrec_last_error();
      shardrec_embedding_destroy(c);
    } else {
      EXPECT_EQ(st, SHARDREC_EINVAL);
      EXPECT_NE(std::string(shardrec_last_error()).find("overflow"), std::string::npos)
          << shardrec_last_error();
      EXPECT_EQ(c, nullptr);
    }
  }
}

// A device copy that fails inside a forward (the phase's upload, the output's download) fails
// that forward with SHARDREC_ECUDA naming the injected failure and changes nothing: the same
// batch then trains to a host collection's bits (a pooled plan with a data-parallel table and
// MEAN pooling: the forward's one combined phase).
TEST(GpuStagingFailure, AFailedCopyInAForwardChangesNothing) {
  REQUIRE_FAKE();
  if (!FakeFailCopyAfter(-1)) GTEST_SKIP() << "needs the fake plugin's failure injection";
  Scenario s = StandardScenario(1, kRW, kMean);
  s.sharding = {kDP, kRW, kTW};
  s.optimizer.type = kRowAdagrad;
  s.steps = 2;
  const TrainingSetup ts(s);
  ASSERT_NE(ts.plan, nullptr);
  shardrec_embedding_options_t oh;
  shardrec_embedding_options_init(&oh, SHARDREC_EMBEDDING_OPTIONS_VERSION);
  oh.seed = s.seed;
  shardrec_embedding_options_t od = oh;
  od.device_type = SHARDREC_DEVICE_CUDA;
  CollPtr ch, cd;
  ASSERT_NO_FATAL_FAILURE(CreateHostAndGpu(ts.plan.get(), 1, 0, ts.opt, oh, od, &ch, &cd));
  shardrec_embedding_t* h = ch.get();
  shardrec_embedding_t* d = cd.get();
  int64_t dim = 0;
  shardrec_embedding_output_dim(d, &dim);
  for (int step = 0; step < s.steps; ++step) {
    const RefBatch& rb = ts.batches[step][0];
    KjtHolder kjt(rb, s.num_features, false);
    const size_t n = OutputLen(rb, false, dim);
    std::vector<float> out_h(n), out_d(n);
    for (int64_t after : {0, 1}) {
      ASSERT_TRUE(FakeFailCopyAfter(after));
      EXPECT_EQ(shardrec_embedding_forward(d, kjt.view(), out_d.data(), n, nullptr), SHARDREC_ECUDA)
          << "step " << step << " copy " << after;
      const std::string err = shardrec_last_error();
      FakeFailCopyAfter(-1);
      EXPECT_NE(err.find("injected device failure"), std::string::npos) << err;
      // No forward took place: there is nothing for a backward to apply to.
      if (step > 0) {
        std::vector<float> g = ts.grads[step][0];
        EXPECT_EQ(shardrec_embedding_backward(d, g.data(), g.size(), nullptr), SHARDREC_EUSAGE);
      }
    }
    ASSERT_EQ(shardrec_embedding_forward(h, kjt.view(), out_h.data(), n, nullptr), SHARDREC_OK);
    ASSERT_EQ(shardrec_embedding_forward(d, kjt.view(), out_d.data(), n, nullptr), SHARDREC_OK)
        << shardrec_last_error();
    EXPECT_TRUE(BitEqual(out_h, out_d)) << "step " << step;
    std::vector<float> g = ts.grads[step][0];
    ASSERT_EQ(shardrec_embedding_backward(h, g.data(), g.size(), nullptr), SHARDREC_OK);
    ASSERT_EQ(shardrec_embedding_backward(d, g.data(), g.size(), nullptr), SHARDREC_OK)
        << shardrec_last_error();
  }
  ExpectSameTensors(Snapshot(h, s), Snapshot(d, s), "");
}

// A CUDA output view on the collection's device, with a forward that combines on the device
// (world 1, pooled): the output is divided for MEAN on the device and copied device to device
// into the view within the phase, on the collection's stream ordered behind the caller's
// (stream_wait_stream), bit for bit a host collection's, the pipelined forward_distributed_tensor
// included. Stream-ordered: no wait at all (the caller's stream is ordered behind the write); the
// one copy down is the lookup status block's, checked when the next call's wait delivers it.
TEST(GpuStagingDeviceOutput, ACudaViewIsWrittenDeviceToDevice) {
  REQUIRE_FAKE();
  Scenario s = StandardScenario(1, kRW, kMean);
  s.sharding = {kDP, kRW, kTW};
  s.weighted = true;
  s.steps = 3;
  s.batch_sizes = {6};
  const TrainingSetup ts(s);
  ASSERT_NE(ts.plan, nullptr);
  shardrec_embedding_options_t oh;
  shardrec_embedding_options_init(&oh, SHARDREC_EMBEDDING_OPTIONS_VERSION);
  oh.seed = s.seed;
  shardrec_embedding_options_t od = oh;
  od.device_type = SHARDREC_DEVICE_CUDA;
  od.max_batch_size = 6;
  od.max_ids_per_batch = 6 * s.num_features * s.max_bag;
  CollPtr ch, cd;
  ASSERT_NO_FATAL_FAILURE(CreateHostAndGpu(ts.plan.get(), 1, 0, ts.opt, oh, od, &ch, &cd));
  shardrec_embedding_t* h = ch.get();
  shardrec_embedding_t* d = cd.get();
  int64_t dim = 0;
  shardrec_embedding_output_dim(d, &dim);
  for (int step = 0; step < s.steps; ++step) {
    const RefBatch& rb = ts.batches[step][0];
    KjtHolder kjt(rb, s.num_features, false);
    const size_t n = OutputLen(rb, false, dim);
    ASSERT_GT(n, 0u);
    std::vector<float> out_h(n);
    ASSERT_EQ(shardrec_embedding_forward(h, kjt.view(), out_h.data(), n, nullptr), SHARDREC_OK);
    FakeDeviceFloats dev_out(n);
    ASSERT_NE(dev_out.data(), nullptr);
    const shardrec_tensor_view_t vd = DeviceView(dev_out.data(), n, dim);
    const auto calls0 = FakeCalls();
    const Counts f0 = Runtime();
    if (step == 1) {
      ASSERT_EQ(shardrec_embedding_input_dist_start(d, kjt.view(), nullptr), SHARDREC_OK);
      ASSERT_EQ(shardrec_embedding_input_dist_wait(d, nullptr), SHARDREC_OK);
      ASSERT_EQ(shardrec_embedding_forward_distributed_tensor(d, &vd, nullptr), SHARDREC_OK)
          << shardrec_last_error();
    } else {
      ASSERT_EQ(shardrec_embedding_forward_tensor(d, kjt.view(), &vd, nullptr), SHARDREC_OK)
          << shardrec_last_error();
    }
    const Counts fwd = Delta(f0, Runtime());
    EXPECT_EQ(FakeCalls()[kMeanDivide], calls0[kMeanDivide] + 1) << "step " << step;
    EXPECT_EQ(fwd[kDown], 1) << "step " << step;
    EXPECT_EQ(fwd[kUp], 1) << "step " << step;
    EXPECT_EQ(fwd[kSync], 0) << "step " << step;
    EXPECT_EQ(fwd[kDeviceAlloc] + fwd[kHostAlloc], 0) << "step " << step;
    EXPECT_TRUE(BitEqual(out_h, dev_out.ToVector())) << "step " << step;
    std::vector<float> g = ts.grads[step][0];
    ASSERT_EQ(shardrec_embedding_backward(h, g.data(), g.size(), nullptr), SHARDREC_OK);
    ASSERT_EQ(shardrec_embedding_backward(d, g.data(), g.size(), nullptr), SHARDREC_OK)
        << shardrec_last_error();
  }
  ExpectSameTensors(Snapshot(h, s), Snapshot(d, s), "");
}

}  // namespace
}  // namespace shardrec::testing
