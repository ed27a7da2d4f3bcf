// Stream-ordered calls of a GPU collection given CUDA views on its device: forward_tensor /
// forward_distributed_tensor and backward_tensor return with their device work queued on the
// collection's stream (ordered behind the caller's stream, the caller's stream ordered behind
// it), and what that work finds is returned by the next synchronising call. Checked here through
// the fake plugin (its copies deferred to the stream, its NCCL double): over NCCL one host wait per
// step (the counts exchange, which learns the received sizes) in the plain and the pipelined
// loop, bit for bit a host collection over Gloo; a peer lost after a queued step; a device copy
// that fails in a queued forward or backward changes nothing. The cases that need no counter, no
// failure injection and no second GPU also run on a real GPU (.ci/gpu-check), on managed memory.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "shardrec/comm.h"
#include "tests/capi/embedding/embedding_test_util.h"
#include "tests/capi/embedding/gpu_test_util.h"
#include "tests/capi/embedding/nccl_test_util.h"
#include "tests/support/spawn_ranks.h"

namespace shardrec::testing {
namespace {

struct Loop {
  const char* name;
  std::vector<int32_t> sharding;
  int32_t pooling;
  int32_t optimizer;
  bool pipelined;
  int64_t waits_per_step;  // host waits of one step, both calls, per rank
};

// World 2 over NCCL with capacity hints (nothing grows, so nothing waits but the step's phases):
// every step the GPU collection's forward writes a CUDA view and its backward reads one, next to
// a host collection over Gloo with host buffers; the waits of each step after the first are
// counted per rank, and outputs (read once the next synchronisation point passed) and the final
// weights and states are compared bit for bit.
void TrainStreamOrdered(const Loop& c) {
  SCOPED_TRACE(c.name);
  Scenario s = StandardScenario(2, c.sharding[0], c.pooling);
  s.sharding = c.sharding;
  s.optimizer.type = c.optimizer;
  s.weighted = true;
  s.steps = 4;
  ReferenceModel ref(s.num_features, s.tables, s.optimizer, s.seed, s.world);
  const auto batches = MakeBatches(s, ref);
  const auto grads = MakeGrads(s, batches, ref.output_dim());
  PlanPtr plan = MakePlan(s);
  ASSERT_NE(plan, nullptr) << shardrec_last_error();
  const shardrec_optimizer_config_t opt = ToCOptimizer(s.optimizer);
  shardrec_unique_id_t id;
  ASSERT_EQ(shardrec_comm_unique_id_create(&id), SHARDREC_OK);
  const bool seq = c.pooling == kNone;
  std::barrier meet(2);
  std::vector<int64_t> waits(static_cast<size_t>(s.steps), 0);
  SpawnRanks(2, [&](int r) {
    CommPtr nccl(NcclComm(id, 2, r, 60000));
    ASSERT_NE(nccl, nullptr);
    shardrec_embedding_options_t oh = Options(s, false), od = Options(s, true);
    od.max_batch_size = 8;
    od.max_ids_per_batch = 8 * s.num_features * s.max_bag;
    shardrec_embedding_t* h = nullptr;
    shardrec_embedding_t* d = nullptr;
    ASSERT_EQ(shardrec_embedding_create(&h, plan.get(), GroupComm(2, r), &opt, &oh), SHARDREC_OK)
        << shardrec_last_error();
    CollPtr ch(h);
    ASSERT_EQ(shardrec_embedding_create(&d, plan.get(), nccl.get(), &opt, &od), SHARDREC_OK)
        << shardrec_last_error();
    CollPtr cd(d);
    int64_t dim = 0;
    shardrec_embedding_output_dim(d, &dim);
    // The device views of every step stay alive until the end (a view is read or written by
    // queued work until a later synchronisation point).
    std::vector<std::unique_ptr<FakeDeviceFloats>> outs;
    std::vector<std::unique_ptr<FakeDeviceCopy>> gs;
    std::vector<std::vector<float>> host_outs;
    std::vector<KjtHolder> kjts;
    kjts.reserve(static_cast<size_t>(s.steps));
    for (int step = 0; step < s.steps; ++step)
      kjts.emplace_back(batches[step][r], s.num_features, false);
    const auto view_of = [&](int step) {
      const size_t n = OutputLen(batches[step][r], seq, dim);
      return DeviceView(outs[static_cast<size_t>(step)]->data(), n, dim);
    };
    for (int step = 0; step < s.steps; ++step) {
      const size_t n = OutputLen(batches[step][r], seq, dim);
      outs.push_back(std::make_unique<FakeDeviceFloats>(n));
      gs.push_back(std::make_unique<FakeDeviceCopy>(grads[step][r]));
      host_outs.emplace_back(n);
      ASSERT_EQ(
          shardrec_embedding_forward(h, kjts[step].view(), host_outs.back().data(), n, nullptr),
          SHARDREC_OK);
      std::vector<float> g = grads[step][r];
      ASSERT_EQ(shardrec_embedding_backward(h, g.data(), g.size(), nullptr), SHARDREC_OK);
    }
    // The pipelined loop starts the first batch's input distribution ahead.
    if (c.pipelined) {
      ASSERT_EQ(shardrec_embedding_input_dist_start(d, kjts[0].view(), nullptr), SHARDREC_OK);
      ASSERT_EQ(shardrec_embedding_input_dist_wait(d, nullptr), SHARDREC_OK);
    }
    for (int step = 0; step < s.steps; ++step) {
      meet.arrive_and_wait();
      const int64_t before = Runtime()[kSync];
      meet.arrive_and_wait();
      const shardrec_tensor_view_t vo = view_of(step);
      const shardrec_tensor_view_t vg = DeviceView(
          static_cast<float*>(gs[static_cast<size_t>(step)]->data()), grads[step][r].size(), dim);
      if (c.pipelined) {
        // TorchRec's order: this batch's lookup, the next batch's ids, this batch's backward.
        ASSERT_EQ(shardrec_embedding_forward_distributed_tensor(d, &vo, nullptr), SHARDREC_OK)
            << shardrec_last_error();
        if (step + 1 < s.steps) {
          ASSERT_EQ(shardrec_embedding_input_dist_start(d, kjts[step + 1].view(), nullptr),
                    SHARDREC_OK)
              << shardrec_last_error();
          ASSERT_EQ(shardrec_embedding_input_dist_wait(d, nullptr), SHARDREC_OK);
        }
      } else {
        ASSERT_EQ(shardrec_embedding_forward_tensor(d, kjts[step].view(), &vo, nullptr),
                  SHARDREC_OK)
            << shardrec_last_error();
      }
      ASSERT_EQ(shardrec_embedding_backward_tensor(d, &vg, nullptr), SHARDREC_OK)
          << shardrec_last_error();
      meet.arrive_and_wait();
      if (r == 0) waits[static_cast<size_t>(step)] = Runtime()[kSync] - before;
      meet.arrive_and_wait();
    }
    ASSERT_EQ(shardrec_embedding_synchronize(d), SHARDREC_OK) << shardrec_last_error();
    for (int step = 0; step < s.steps; ++step)
      EXPECT_TRUE(BitEqual(host_outs[static_cast<size_t>(step)],
                           outs[static_cast<size_t>(step)]->ToVector()))
          << "rank " << r << " step " << step;
    ExpectSameTensors(Snapshot(h, s), Snapshot(d, s), "rank " + std::to_string(r));
  });
  // Both ranks' waits from the second step on. (The pipelined loop's last step starts no next
  // batch; its backward then learns the previous one's verdict itself: the same one wait.)
  for (int step = 1; step < s.steps; ++step)
    EXPECT_EQ(waits[static_cast<size_t>(step)], 2 * c.waits_per_step) << "step " << step;
}

TEST(StreamOrdered, OneWaitPerStepOverNcclBitIdenticalToGloo) {
  REQUIRE_WORLD(2);
  if (!FakeLoaded()) GTEST_SKIP() << "device views are made through the fake plugin's hooks";
  // Pooled, fused shards and a data-parallel table: the counts exchange's wait alone. The
  // pipelined loop's wait comes with the next batch's input distribution, inside the step.
  TrainStreamOrdered({"pooled", {kDP, kRW, kTW}, kMean, kAdam, false, 1});
  TrainStreamOrdered({"pooled pipelined", {kDP, kRW, kTW}, kMean, kAdam, true, 1});
  // Sequence outputs aggregate with their unique-row counts left on the device: the same one wait.
  TrainStreamOrdered({"sequence", {kDP, kRW, kTW}, kNone, kSgd, true, 1});
  TrainStreamOrdered({"sequence row statistics", {kTW, kRW, kTW}, kNone, kRowAdagrad, false, 1});
  // Column shards with row statistics exchange them between device blocks within the update
  // phase, their counts on the device: the same one wait.
  TrainStreamOrdered({"column statistics", {kCW, kCW, kCW}, kSum, kRowAdagrad, false, 1});
  TrainStreamOrdered({"column statistics pipelined", {kCW, kTW, kCW}, kMean, kLamb, true, 1});
}

// A peer that stops after a queued step: the waiting rank's next call fails with ETIMEOUT within
// (about) the communicator's timeout, instead of hanging.
TEST(StreamOrdered, ADeadPeerTimesOutAtTheNextCall) {
  REQUIRE_WORLD(2);
  if (!FakeLoaded()) GTEST_SKIP() << "device views are made through the fake plugin's hooks";
  Scenario s = StandardScenario(2, kRW, kSum);
  s.steps = 2;
  ReferenceModel ref(s.num_features, s.tables, s.optimizer, s.seed, s.world);
  const auto batches = MakeBatches(s, ref);
  const auto grads = MakeGrads(s, batches, ref.output_dim());
  PlanPtr plan = MakePlan(s);
  const shardrec_optimizer_config_t opt = ToCOptimizer(s.optimizer);
  constexpr int64_t kTimeoutMs = 1500;
  std::atomic<bool> rank0_done{false};
  ForEachNcclRank(s, plan.get(), opt, kTimeoutMs, [&](int r, shardrec_embedding_t* d, int64_t dim) {
    KjtHolder kjt(batches[0][r], s.num_features, false);
    FakeDeviceFloats out(grads[0][r].size());
    FakeDeviceCopy g(grads[0][r]);
    const shardrec_tensor_view_t vo = DeviceView(out.data(), grads[0][r].size(), dim);
    const shardrec_tensor_view_t vg =
        DeviceView(static_cast<float*>(g.data()), grads[0][r].size(), dim);
    ASSERT_EQ(shardrec_embedding_forward_tensor(d, kjt.view(), &vo, nullptr), SHARDREC_OK);
    ASSERT_EQ(shardrec_embedding_backward_tensor(d, &vg, nullptr), SHARDREC_OK);
    if (r == 1) {
      // Alive but silent until rank 0 has given up.
      while (!rank0_done.load()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      return;
    }
    KjtHolder next(batches[1][0], s.num_features, false);
    const auto t0 = std::chrono::steady_clock::now();
    EXPECT_EQ(shardrec_embedding_forward_tensor(d, next.view(), &vo, nullptr), SHARDREC_ETIMEOUT)
        << shardrec_last_error();
    const auto ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0)
            .count();
    EXPECT_LT(ms, 4 * kTimeoutMs) << "the wait was not bounded by the timeout";
    rank0_done.store(true);
  });
}

// World 1: a device copy that fails in a stream-ordered forward or backward (each copy of the call
// in turn) fails that call with ECUDA and changes nothing (weights, states, the step counter); the
// same call then goes through, and the collection trains on to a host collection's bits.
TEST(StreamOrdered, AFailedCopyChangesNothing) {
  REQUIRE_FAKE();
  if (!FakeFailCopyAfter(-1)) GTEST_SKIP() << "needs the fake plugin's failure injection";
  Scenario s = StandardScenario(1, kRW, kMean);
  s.sharding = {kDP, kRW, kTW};
  s.optimizer.type = kAdam;
  s.weighted = true;
  s.steps = 2;
  const TrainingSetup ts(s);
  ASSERT_NE(ts.plan, nullptr);
  shardrec_embedding_options_t oh = Options(s, false), od = Options(s, true);
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
    std::vector<float> out_h(n);
    FakeDeviceFloats out(n);
    FakeDeviceCopy g(ts.grads[step][0]);
    const shardrec_tensor_view_t vo = DeviceView(out.data(), n, dim);
    const shardrec_tensor_view_t vg = DeviceView(static_cast<float*>(g.data()), n, dim);
    ASSERT_EQ(shardrec_embedding_forward(h, kjt.view(), out_h.data(), n, nullptr), SHARDREC_OK);
    std::vector<float> gh = ts.grads[step][0];
    ASSERT_EQ(shardrec_embedding_backward(h, gh.data(), gh.size(), nullptr), SHARDREC_OK);
    for (const bool backward : {false, true}) {
      const auto before = Snapshot(d, s);
      int64_t steps_before = -1, steps = -1;
      shardrec_embedding_num_steps(d, &steps_before);
      // The copies of the call in turn, until it has none left to fail.
      int failed = 0;
      for (int64_t after = 0; after < 64; ++after) {
        ASSERT_TRUE(FakeFailCopyAfter(after));
        const shardrec_status_t rc =
            backward ? shardrec_embedding_backward_tensor(d, &vg, nullptr)
                     : shardrec_embedding_forward_tensor(d, kjt.view(), &vo, nullptr);
        const std::string err = shardrec_last_error();
        FakeFailCopyAfter(-1);
        if (rc == SHARDREC_OK) break;
        ++failed;
        EXPECT_EQ(rc, SHARDREC_ECUDA) << (backward ? "backward" : "forward") << " copy " << after;
        EXPECT_NE(err.find("injected device failure"), std::string::npos) << err;
        EXPECT_EQ(shardrec_embedding_synchronize(d), SHARDREC_OK) << shardrec_last_error();
        ExpectSameTensors(before, Snapshot(d, s),
                          std::string(backward ? "backward" : "forward") + " after a failed copy");
        shardrec_embedding_num_steps(d, &steps);
        EXPECT_EQ(steps, steps_before);
      }
      EXPECT_GT(failed, 0) << (backward ? "backward" : "forward") << " had no copy to fail";
      ASSERT_EQ(shardrec_embedding_synchronize(d), SHARDREC_OK) << shardrec_last_error();
    }
    EXPECT_TRUE(BitEqual(out_h, out.ToVector())) << "step " << step;
    ExpectSameTensors(Snapshot(h, s), Snapshot(d, s), "step " + std::to_string(step));
  }
}

// World 1: a forward into a host buffer whose phase fails at a wait (each wait of the call in
// turn) returns ECUDA with its download possibly still queued. The caller owns its buffer again
// at once: the next synchronising call must deliver nothing into it, and the collection goes on
// to a host collection's output.
TEST(StreamOrdered, AFailedPhaseDeliversNothingLater) {
  REQUIRE_FAKE();
  if (!FakeFailWaitAfter(-1)) GTEST_SKIP() << "needs the fake plugin's failure injection";
  Scenario s = StandardScenario(1, kRW, kSum);
  s.sharding = {kDP, kRW, kTW};
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
  const size_t n = OutputLen(rb, false, dim);
  int failed = 0;
  for (int64_t after = 0; after < 16; ++after) {
    std::vector<float> out(n, 0.0f);
    ASSERT_TRUE(FakeFailWaitAfter(after));
    const shardrec_status_t rc =
        shardrec_embedding_forward(cd.get(), kjt.view(), out.data(), n, nullptr);
    FakeFailWaitAfter(-1);
    if (rc == SHARDREC_OK) break;
    ++failed;
    EXPECT_EQ(rc, SHARDREC_ECUDA) << "wait " << after << ": " << shardrec_last_error();
    std::fill(out.begin(), out.end(), -7.0f);  // the caller reuses its buffer
    EXPECT_EQ(shardrec_embedding_synchronize(cd.get()), SHARDREC_OK) << shardrec_last_error();
    for (size_t k = 0; k < n; ++k)
      ASSERT_EQ(out[k], -7.0f) << "wait " << after << ": a failed phase wrote element " << k
                               << " at the next synchronisation";
  }
  EXPECT_GT(failed, 0) << "the forward had no wait to fail";
  std::vector<float> out_h(n), out_d(n);
  ASSERT_EQ(shardrec_embedding_forward(ch.get(), kjt.view(), out_h.data(), n, nullptr),
            SHARDREC_OK);
  ASSERT_EQ(shardrec_embedding_forward(cd.get(), kjt.view(), out_d.data(), n, nullptr), SHARDREC_OK)
      << shardrec_last_error();
  EXPECT_TRUE(BitEqual(out_h, out_d));
}

// World 1, on real device memory where there is a GPU (and through the fake here): a
// stream-ordered forward whose device batch is rejected (an id outside its table) fails, and
// neither that call nor a later synchronisation writes its device output view; the backward that
// follows is refused (no batch to train) and changes nothing. The next good batch then goes
// through stream-ordered to a host collection's output and, after its backward, to its weights
// and states, bit for bit.
TEST(StreamOrdered, ARejectedDeviceBatchWritesNothingAndTheNextOneTrains) {
  REQUIRE_DEVICE();
  if (!DeviceBuffersAvailable()) GTEST_SKIP() << "no device buffers here";
  Scenario s = StandardScenario(1, kRW, kMean);
  s.sharding = {kDP, kRW, kTW};
  s.optimizer.type = kAdam;
  s.weighted = true;
  s.steps = 1;
  const TrainingSetup ts(s);
  ASSERT_NE(ts.plan, nullptr);
  shardrec_embedding_options_t oh = Options(s, false), od = Options(s, true);
  CollPtr ch, cd;
  ASSERT_NO_FATAL_FAILURE(CreateHostAndGpu(ts.plan.get(), 1, 0, ts.opt, oh, od, &ch, &cd));
  shardrec_embedding_t* h = ch.get();
  shardrec_embedding_t* d = cd.get();
  int64_t dim = 0;
  shardrec_embedding_output_dim(d, &dim);
  const RefBatch& good = ts.batches[0][0];
  ASSERT_GE(good.ids.size(), 2u);
  RefBatch bad = good;
  bad.ids[1] = 1000000;
  KjtHolder good_kjt(good, s.num_features, false), bad_kjt(bad, s.num_features, false);
  const DeviceKjt good_dev(*good_kjt.view()), bad_dev(*bad_kjt.view());
  const size_t n = OutputLen(good, false, dim);
  FakeDeviceFloats out(n);
  FakeDeviceCopy g(ts.grads[0][0]);
  ASSERT_NE(out.data(), nullptr);
  std::fill(out.data(), out.data() + n, -7.0f);
  const shardrec_tensor_view_t vo = DeviceView(out.data(), n, dim);
  const shardrec_tensor_view_t vg = DeviceView(static_cast<float*>(g.data()), n, dim);
  const auto before = Snapshot(d, s);
  EXPECT_EQ(shardrec_embedding_forward_tensor(d, bad_dev.view(), &vo, nullptr), SHARDREC_EINVAL);
  EXPECT_NE(std::string(shardrec_last_error()).find("1000000"), std::string::npos)
      << shardrec_last_error();
  EXPECT_EQ(shardrec_embedding_synchronize(d), SHARDREC_OK) << shardrec_last_error();
  EXPECT_NE(shardrec_embedding_backward_tensor(d, &vg, nullptr), SHARDREC_OK);
  EXPECT_EQ(shardrec_embedding_synchronize(d), SHARDREC_OK) << shardrec_last_error();
  const std::vector<float> untouched = out.ToVector();
  for (size_t k = 0; k < n; ++k)
    ASSERT_EQ(untouched[k], -7.0f) << "the rejected forward wrote element " << k;
  ExpectSameTensors(before, Snapshot(d, s), "after the rejected batch");
  std::vector<float> out_h(n);
  ASSERT_EQ(shardrec_embedding_forward(h, good_kjt.view(), out_h.data(), n, nullptr), SHARDREC_OK);
  std::vector<float> gh = ts.grads[0][0];
  ASSERT_EQ(shardrec_embedding_backward(h, gh.data(), gh.size(), nullptr), SHARDREC_OK);
  ASSERT_EQ(shardrec_embedding_forward_tensor(d, good_dev.view(), &vo, nullptr), SHARDREC_OK)
      << shardrec_last_error();
  ASSERT_EQ(shardrec_embedding_backward_tensor(d, &vg, nullptr), SHARDREC_OK)
      << shardrec_last_error();
  ASSERT_EQ(shardrec_embedding_synchronize(d), SHARDREC_OK) << shardrec_last_error();
  EXPECT_TRUE(BitEqual(out_h, out.ToVector()));
  ExpectSameTensors(Snapshot(h, s), Snapshot(d, s), "after the good batch");
}

}  // namespace
}  // namespace shardrec::testing
