// The host synchronisations, copies and allocations of a GPU collection's steps over an NCCL
// communicator, counted by the fake embedding plugin's runtime counters (fake_nccl.h's NCCL
// double, ranks as threads of this process), through the public C API: what step.h and
// docs/gpu.md state per phase, and no allocation within the capacity hints. Split from
// embedding_gpu_nccl_test.cc, which holds the bit-exactness cases against Gloo.
#include <gtest/gtest.h>

#include <atomic>
#include <barrier>
#include <cmath>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "shardrec/comm.h"
#include "shardrec/device.h"
#include "tests/capi/embedding/embedding_test_util.h"
#include "tests/capi/embedding/gpu_test_util.h"
#include "tests/capi/embedding/nccl_test_util.h"
#include "tests/support/spawn_ranks.h"

namespace shardrec::testing {
namespace {

constexpr int32_t kDP = SHARDREC_SHARDING_DATA_PARALLEL;
constexpr int32_t kTW = SHARDREC_SHARDING_TABLE_WISE;
constexpr int32_t kRW = SHARDREC_SHARDING_ROW_WISE;
constexpr int32_t kCW = SHARDREC_SHARDING_COLUMN_WISE;
constexpr int32_t kSum = SHARDREC_POOLING_SUM;
constexpr int32_t kMean = SHARDREC_POOLING_MEAN;
constexpr int32_t kNone = SHARDREC_POOLING_NONE;
constexpr int32_t kSgd = SHARDREC_OPTIMIZER_SGD;
constexpr int32_t kRowAdagrad = SHARDREC_OPTIMIZER_ROWWISE_ADAGRAD;
constexpr int32_t kAdam = SHARDREC_OPTIMIZER_ADAM;

// The host synchronisations and copies of a forward and a backward over NCCL at world 2 (pooled,
// no data-parallel table, no row statistics: the counts step.h states), counted by the
// fake's runtime counters with both ranks' calls between barriers; a repeated batch, so no
// buffer grows. Forward: the counts exchange (which carries the verdicts and every unit's id
// and bag counts, so nothing else needs the host before the device work) and the lookup phase
// (the ids' exchange between device blocks, the unpack, the lookups, the return exchange and the
// combine on the device, data-parallel lookups included), one wait each; backward: ONE wait, the
// update phase's, which begins with the verdict (all-reduced between device blocks into the gate
// the updates read: no wait of its own) and takes the data-parallel tables' accumulation,
// all-reduce and updates too.
// With column shards of row-wise Adagrad the backward aggregates and exchanges row statistics:
// the unique-row counts' wait, then the statistics phase, whose exchange over NCCL travels
// between device blocks inside that phase (no wait of its own), then the updates' wait.
void CountWaits(std::vector<int32_t> sharding, int32_t optimizer, int64_t bwd_waits,
                int64_t bwd_down, bool device_kjt = false, int32_t pooling = kSum) {
  SCOPED_TRACE(::testing::Message() << "sharding " << ::testing::PrintToString(sharding)
                                    << (device_kjt ? " device KJT" : "") << " pooling " << pooling);
  Scenario s = StandardScenario(2, kTW, pooling);
  s.sharding = std::move(sharding);
  s.optimizer.type = optimizer;
  s.steps = 1;
  ReferenceModel ref(s.num_features, s.tables, s.optimizer, s.seed, s.world);
  const auto batches = MakeBatches(s, ref);
  const auto grads = MakeGrads(s, batches, ref.output_dim());
  PlanPtr plan = MakePlan(s);
  const shardrec_optimizer_config_t opt = ToCOptimizer(s.optimizer);
  std::barrier meet(2);
  int64_t fwd[3] = {};  // syncs, copies up, copies down (both ranks)
  int64_t bwd[3] = {};
  const auto read = [](int64_t* out) {
    for (int k = 0; k < 3; ++k) out[k] = RuntimeCounter(k);
  };
  ForEachNcclRank(s, plan.get(), opt, 30000, [&](int r, shardrec_embedding_t* d, int64_t) {
    KjtHolder host_kjt(batches[0][r], s.num_features, false);
    DeviceKjt dkjt(*host_kjt.view());
    const shardrec_kjt_view_t* kjt = device_kjt ? dkjt.view() : host_kjt.view();
    std::vector<float> g = grads[0][r];
    std::vector<float> out(g.size());
    for (int round = 0; round < 2; ++round) {
      int64_t a[3], b[3], c[3];
      meet.arrive_and_wait();
      if (r == 0) read(a);
      meet.arrive_and_wait();
      ASSERT_EQ(shardrec_embedding_forward(d, kjt, out.data(), out.size(), nullptr), SHARDREC_OK)
          << shardrec_last_error();
      meet.arrive_and_wait();
      if (r == 0) read(b);
      meet.arrive_and_wait();
      ASSERT_EQ(shardrec_embedding_backward(d, g.data(), g.size(), nullptr), SHARDREC_OK)
          << shardrec_last_error();
      meet.arrive_and_wait();
      if (r == 0 && round == 1) {
        read(c);
        for (int k = 0; k < 3; ++k) {
          fwd[k] = b[k] - a[k];
          bwd[k] = c[k] - b[k];
        }
      }
    }
  });
  // Per rank: forward 2 waits (the counts, which size everything and carry the verdicts, and the
  // lookup phase), 3 up (the counts; the routed messages, which travel device to device from
  // there; the combine's bags, the data-parallel ids and the unpack's tables in one copy) and 3
  // down (the counts, the unpack's status word, the combined output: the ids and the returned
  // rows stay on the device); backward `bwd_waits`, at most 1 + 2 up (+ the full statistics),
  // `bwd_down` down.
  // A KJT in device memory: the route's counting and the exchange share the first wait (its
  // read-back goes device to device into the exchange, 1 up: the summary's header), the fill
  // writes the messages straight into the block they leave from and takes the second wait (1
  // up: its destination table; 1 down: the return targets the host's combine and backward read;
  // MEAN divisors and data-parallel ids would come too), then the lookup phase as above less the
  // messages' upload.
  EXPECT_EQ(fwd[0], 2 * (device_kjt ? 3 : 2));
  EXPECT_EQ(fwd[1], 2 * 3);
  // (Sequence runs have no bag offsets to unpack: no status word comes down.)
  EXPECT_EQ(fwd[2], 2 * ((device_kjt ? 4 : 3) - (pooling == kNone ? 1 : 0)));
  EXPECT_EQ(bwd[0], 2 * bwd_waits);
  EXPECT_LE(bwd[2], 2 * bwd_down);
}

TEST(EmbeddingGpuNccl, WaitsAndCopiesPerPhaseAreAsDocumented) {
  REQUIRE_WORLD(2);
  if (!FakeLoaded()) GTEST_SKIP() << "counts the fake's calls";
  // Fused shards: the update phase's one wait (the verdict comes down with it).
  CountWaits({kTW, kRW, kTW}, kSgd, 1, 1);
  // Column shards with row statistics: their unique-row counts stay on the device, their partial
  // statistics travel between device blocks and are summed there in the update phase: its one
  // wait.
  // Down: the verdict alone.
  CountWaits({kCW, kCW, kCW}, kRowAdagrad, 1, 1);
  // A data-parallel table: no wait of its own in forward (was one more), none in backward either
  // (was two more: the staged all-reduce's and the updates'): its gradients are accumulated,
  // all-reduced between device blocks and applied in the update phase.
  CountWaits({kDP, kRW, kTW}, kSgd, 1, 1);
  // KJTs in device memory.
  CountWaits({kTW, kRW, kTW}, kSgd, 1, 1, true);
  // Sequence outputs: combined on the device like pooled ones (data-parallel rows included), so
  // the same forward; the backward aggregates, its unique-row counts left on the device (no row
  // statistics to exchange), the data-parallel tables in its first phase: one wait.
  CountWaits({kDP, kRW, kTW}, kSgd, 1, 1, false, kNone);
}

// With the capacity hints, every buffer of a step over NCCL (the batch slots, the summaries, the
// unpack's scans, the gradient pack's tables, the messages' blocks, the pinned block) is
// allocated at creation: the steps allocate neither device nor pinned memory, with host views
// and with CUDA views, pooled and sequence, fused and aggregated shards.
TEST(EmbeddingGpuNccl, NoAllocationWithinTheHints) {
  REQUIRE_WORLD(2);
  if (!FakeLoaded()) GTEST_SKIP() << "counts the fake's calls";
  struct Shape {
    std::vector<int32_t> sharding;
    int32_t pooling;
    int32_t optimizer;
    bool views;
  };
  const Shape shapes[] = {
      {{kTW, kRW, kCW}, kMean, kSgd, true},
      {{kTW, kRW, kCW}, kSum, kRowAdagrad, false},
      {{kRW, kCW, kTW}, kNone, kSgd, true},
      {{kDP, kRW, kCW}, kSum, kAdam, false},
  };
  for (const Shape& sh : shapes) {
    SCOPED_TRACE(::testing::Message() << "sharding " << ::testing::PrintToString(sh.sharding)
                                      << " pooling " << sh.pooling);
    Scenario s = StandardScenario(2, sh.sharding[0], sh.pooling);
    s.sharding = sh.sharding;
    s.optimizer.type = sh.optimizer;
    s.weighted = true;
    s.steps = 3;
    s.batch_sizes = {5, 3};
    ReferenceModel ref(s.num_features, s.tables, s.optimizer, s.seed, s.world);
    const auto batches = MakeBatches(s, ref);
    const auto grads = MakeGrads(s, batches, ref.output_dim());
    PlanPtr plan = MakePlan(s);
    const shardrec_optimizer_config_t opt = ToCOptimizer(s.optimizer);
    shardrec_unique_id_t id;
    ASSERT_EQ(shardrec_comm_unique_id_create(&id), SHARDREC_OK);
    std::barrier meet(2);
    std::atomic<int64_t> allocs{0};
    SpawnRanks(2, [&](int r) {
      CommPtr nccl(NcclComm(id, 2, r, 30000));
      ASSERT_NE(nccl, nullptr);
      shardrec_embedding_options_t od = Options(s, true);
      od.max_batch_size = 5;
      od.max_ids_per_batch = 5 * s.num_features * s.max_bag;
      shardrec_embedding_t* d = nullptr;
      ASSERT_EQ(shardrec_embedding_create(&d, plan.get(), nccl.get(), &opt, &od), SHARDREC_OK)
          << shardrec_last_error();
      CollPtr cd(d);
      int64_t dim = 0;
      shardrec_embedding_output_dim(d, &dim);
      for (int step = 0; step < s.steps; ++step) {
        const RefBatch& rb = batches[step][r];
        KjtHolder kjt(rb, s.num_features, false);
        std::vector<float> g = grads[step][r];
        FakeDeviceFloats out(sh.views ? g.size() : 0);
        FakeDeviceCopy dev_g(sh.views ? g : std::vector<float>());
        std::vector<float> host_out(g.size());
        meet.arrive_and_wait();
        const Counts c0 = Runtime();
        meet.arrive_and_wait();
        if (sh.views) {
          const shardrec_tensor_view_t vo = DeviceView(out.data(), g.size(), dim);
          const shardrec_tensor_view_t vg =
              DeviceView(static_cast<float*>(dev_g.data()), g.size(), dim);
          ASSERT_EQ(shardrec_embedding_forward_tensor(d, kjt.view(), &vo, nullptr), SHARDREC_OK)
              << shardrec_last_error();
          ASSERT_EQ(shardrec_embedding_backward_tensor(d, &vg, nullptr), SHARDREC_OK)
              << shardrec_last_error();
        } else {
          ASSERT_EQ(
              shardrec_embedding_forward(d, kjt.view(), host_out.data(), host_out.size(), nullptr),
              SHARDREC_OK)
              << shardrec_last_error();
          ASSERT_EQ(shardrec_embedding_backward(d, g.data(), g.size(), nullptr), SHARDREC_OK)
              << shardrec_last_error();
        }
        meet.arrive_and_wait();
        if (r == 0) {
          const Counts c = Delta(c0, Runtime());
          allocs += c[kDeviceAlloc] + c[kHostAlloc];
        }
        meet.arrive_and_wait();
      }
    });
    EXPECT_EQ(allocs.load(), 0) << "device or pinned allocations in the steps";
  }
}

// CUDA output and gradient views over NCCL at world 2 (fused shards), stream-ordered: ONE wait per
// step, the counts exchange's (it learns the received sizes); the lookup phase (the output copied
// into the view on the collection's stream behind the caller's) and the whole backward (the
// gradient checked on the device and the verdicts all-reduced there into the gate the updates
// read, the gradient packed and exchanged on the device: only the pack's tables go up) stay
// queued, their checks made at the next wait. Then a gradient with a NaN on one rank: the
// backward returns once queued, the next synchronising call fails on every rank (that rank naming
// the element), nothing changes, and the same backward with a good gradient trains.
TEST(EmbeddingGpuNccl, DeviceViewsWaitsAndANonFiniteGradient) {
  REQUIRE_WORLD(2);
  if (!FakeLoaded()) GTEST_SKIP() << "counts the fake's calls";
  Scenario s = StandardScenario(2, kTW, kSum);
  s.sharding = {kTW, kRW, kCW};
  s.optimizer.type = kSgd;
  s.steps = 1;
  ReferenceModel ref(s.num_features, s.tables, s.optimizer, s.seed, s.world);
  const auto batches = MakeBatches(s, ref);
  const auto grads = MakeGrads(s, batches, ref.output_dim());
  PlanPtr plan = MakePlan(s);
  const shardrec_optimizer_config_t opt = ToCOptimizer(s.optimizer);
  std::barrier meet(2);
  int64_t fwd[3] = {}, bwd[3] = {};
  const auto read = [](int64_t* out) {
    for (int k = 0; k < 3; ++k) out[k] = RuntimeCounter(k);
  };
  ForEachNcclRank(s, plan.get(), opt, 30000, [&](int r, shardrec_embedding_t* d, int64_t dim) {
    KjtHolder kjt(batches[0][r], s.num_features, false);
    std::vector<float> g = grads[0][r];
    FakeDeviceFloats out(g.size());
    const shardrec_tensor_view_t vout = DeviceView(out.data(), g.size(), dim);
    FakeDeviceCopy dev_g(g);
    const shardrec_tensor_view_t vg = DeviceView(static_cast<float*>(dev_g.data()), g.size(), dim);
    // Three rounds, the last counted: without capacity hints the pinned block grows in the first
    // steps to hold a lookup phase and an update phase in flight behind the next counts exchange.
    for (int round = 0; round < 3; ++round) {
      int64_t a[3], b[3], c[3];
      meet.arrive_and_wait();
      if (r == 0) read(a);
      meet.arrive_and_wait();
      ASSERT_EQ(shardrec_embedding_forward_tensor(d, kjt.view(), &vout, nullptr), SHARDREC_OK)
          << shardrec_last_error();
      meet.arrive_and_wait();
      if (r == 0) read(b);
      meet.arrive_and_wait();
      ASSERT_EQ(shardrec_embedding_backward_tensor(d, &vg, nullptr), SHARDREC_OK)
          << shardrec_last_error();
      meet.arrive_and_wait();
      if (r == 0 && round == 2) {
        read(c);
        for (int k = 0; k < 3; ++k) {
          fwd[k] = b[k] - a[k];
          bwd[k] = c[k] - b[k];
        }
      }
      meet.arrive_and_wait();  // the counters are read before rank 1 goes on
    }
    // A NaN in rank 1's gradient: the stream-ordered backward returns once queued on every rank;
    // shardrec_embedding_synchronize then fails on every rank (that rank naming the element),
    // nothing changed and the step is not counted; the same backward with a good gradient trains.
    ASSERT_EQ(shardrec_embedding_forward_tensor(d, kjt.view(), &vout, nullptr), SHARDREC_OK);
    const auto before = Snapshot(d, s);
    int64_t steps_before = -1, steps = -1;
    shardrec_embedding_num_steps(d, &steps_before);
    if (r == 1 && !g.empty()) static_cast<float*>(dev_g.data())[3] = std::nanf("");
    meet.arrive_and_wait();
    EXPECT_EQ(shardrec_embedding_backward_tensor(d, &vg, nullptr), SHARDREC_OK) << "rank " << r;
    shardrec_embedding_num_steps(d, &steps);
    EXPECT_EQ(steps, steps_before + 1) << "counted when queued";
    EXPECT_EQ(shardrec_embedding_synchronize(d), SHARDREC_EINVAL) << "rank " << r;
    std::string why = shardrec_last_error();
    EXPECT_NE(why.find(r == 1 ? "element 3" : "rank 1 rejected its last backward call"),
              std::string::npos)
        << "rank " << r << ": " << why;
    shardrec_embedding_num_steps(d, &steps);
    EXPECT_EQ(steps, steps_before) << "taken back";
    EXPECT_EQ(shardrec_embedding_synchronize(d), SHARDREC_OK) << "reported once";
    ExpectSameTensors(before, Snapshot(d, s), "rank " + std::to_string(r) + " after the NaN");
    if (r == 1 && !g.empty()) static_cast<float*>(dev_g.data())[3] = g[3];
    meet.arrive_and_wait();
    EXPECT_EQ(shardrec_embedding_backward_tensor(d, &vg, nullptr), SHARDREC_OK)
        << "rank " << r << ": " << shardrec_last_error();
    EXPECT_FALSE(BitEqual(before[0], Snapshot(d, s)[0]) && BitEqual(before[2], Snapshot(d, s)[2]))
        << "rank " << r << ": the good gradient moved no weight";
    // Again, learnt by the next forward instead: it fails on every rank without forwarding, the
    // rejected batch is still the one a backward trains, and the forward after that goes through.
    ASSERT_EQ(shardrec_embedding_forward_tensor(d, kjt.view(), &vout, nullptr), SHARDREC_OK);
    const auto before2 = Snapshot(d, s);
    if (r == 1 && !g.empty())
      static_cast<float*>(dev_g.data())[5] = -std::numeric_limits<float>::infinity();
    meet.arrive_and_wait();
    EXPECT_EQ(shardrec_embedding_backward_tensor(d, &vg, nullptr), SHARDREC_OK) << "rank " << r;
    EXPECT_EQ(shardrec_embedding_forward_tensor(d, kjt.view(), &vout, nullptr), SHARDREC_EINVAL)
        << "rank " << r;
    why = shardrec_last_error();
    EXPECT_NE(why.find(r == 1 ? "element 5" : "rank 1 rejected its last backward call"),
              std::string::npos)
        << "rank " << r << ": " << why;
    ExpectSameTensors(before2, Snapshot(d, s), "rank " + std::to_string(r) + " after the inf");
    if (r == 1 && !g.empty()) static_cast<float*>(dev_g.data())[5] = g[5];
    meet.arrive_and_wait();
    EXPECT_EQ(shardrec_embedding_backward_tensor(d, &vg, nullptr), SHARDREC_OK)
        << "rank " << r << ": " << shardrec_last_error();
    EXPECT_EQ(shardrec_embedding_forward_tensor(d, kjt.view(), &vout, nullptr), SHARDREC_OK)
        << "rank " << r << ": " << shardrec_last_error();
    EXPECT_EQ(shardrec_embedding_synchronize(d), SHARDREC_OK) << shardrec_last_error();
    EXPECT_FALSE(BitEqual(before2[0], Snapshot(d, s)[0]) && BitEqual(before2[2], Snapshot(d, s)[2]))
        << "rank " << r << ": the good gradient moved no weight";
  });
  // Forward: the counts exchange's wait alone (stream-ordered: the lookup phase stays queued); up
  // the counts, the routed messages, the combine's tables; down the counts, and, delivered at the
  // next wait, the unpack's word and the lookup status block.
  EXPECT_EQ(fwd[0], 2 * 1);
  EXPECT_EQ(fwd[1], 2 * 3);
  EXPECT_EQ(fwd[2], 2 * 3);
  // Backward: no wait (stream-ordered; the verdict checked and agreed on the device, gating the
  // updates, comes down with the next forward's wait); up only the pack's tables (an accepting
  // rank's flag is a memset), down the agreed verdict.
  EXPECT_EQ(bwd[0], 2 * 0);
  EXPECT_EQ(bwd[1], 2 * 1);
  EXPECT_EQ(bwd[2], 2 * 1);
}

}  // namespace
}  // namespace shardrec::testing
