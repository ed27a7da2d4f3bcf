// A GPU collection given an NCCL communicator on its own device, through the public C API. On
// the CPU the fake embedding plugin's NCCL double (fake_nccl.h) stands in for NCCL: the ranks are
// threads of this process meeting on the one fake device, every collective a bounded rendezvous
// over fake device memory. Each case trains a host collection over Gloo (the reference) next to
// the GPU collection over NCCL and demands the same outputs every step and the same weights and
// optimizer states at the end, bit for bit. On a GPU (the real plugin) only world 1 runs: NCCL
// wants one GPU per rank.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <limits>
#include <memory>
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
constexpr int32_t kTRW = SHARDREC_SHARDING_TABLE_ROW_WISE;
constexpr int32_t kSum = SHARDREC_POOLING_SUM;
constexpr int32_t kMean = SHARDREC_POOLING_MEAN;
constexpr int32_t kNone = SHARDREC_POOLING_NONE;
constexpr int32_t kSgd = SHARDREC_OPTIMIZER_SGD;
constexpr int32_t kRowAdagrad = SHARDREC_OPTIMIZER_ROWWISE_ADAGRAD;
constexpr int32_t kAdam = SHARDREC_OPTIMIZER_ADAM;

struct Case {
  const char* name;
  int32_t world;
  std::vector<int32_t> sharding;  // per table of the standard scenario
  int32_t pooling;
  int32_t optimizer;
  bool weighted;
  int32_t encoding = SHARDREC_COMM_ENCODING_FP32;  // both directions, for both collections
  // The GPU collection's KJTs: in device memory on every rank (2), on the odd ranks only (1: the
  // ranks of one step route on different sides), or in host memory (0); int32 ids.
  int device_kjt = 0;
  bool int32_ids = false;
  // Bounds policy SKIP with every fifth id outside its table: sequence rows of skipped ids (and
  // gaps in a data-parallel pair's rows) stay zero.
  bool skip_bad_ids = false;
  // The GPU collection's output and gradient are CUDA views (written and read on the device).
  bool device_views = false;
};

std::string CaseName(const ::testing::TestParamInfo<Case>& i) { return i.param.name; }

class NcclVsGloo : public ::testing::TestWithParam<Case> {};

TEST_P(NcclVsGloo, TrainsBitIdenticallyToAHostCollectionOverGloo) {
  const Case& c = GetParam();
  REQUIRE_WORLD(c.world);
  if ((c.device_kjt != 0 || c.device_views) && !DeviceBuffersAvailable())
    GTEST_SKIP() << "no device buffers for device KJTs and views here";
  Scenario s = StandardScenario(c.world, c.sharding[0], c.pooling);
  s.sharding = c.sharding;
  s.optimizer.type = c.optimizer;
  s.weighted = c.weighted;
  s.ranks_per_node = c.world == 3 ? 3 : s.ranks_per_node;
  s.steps = 3;
  if (c.world == 2) s.batch_sizes = {5, 0};  // an empty batch on one rank too
  ReferenceModel ref(s.num_features, s.tables, s.optimizer, s.seed, s.world);
  auto batches = MakeBatches(s, ref);
  if (c.skip_bad_ids)
    for (auto& step : batches)
      for (RefBatch& b : step)
        for (size_t i = 0; i < b.ids.size(); i += 5) b.ids[i] = 1000000 + static_cast<int64_t>(i);
  const auto grads = MakeGrads(s, batches, ref.output_dim());
  PlanPtr plan = MakePlan(s);
  ASSERT_NE(plan, nullptr) << shardrec_last_error();
  const shardrec_optimizer_config_t opt = ToCOptimizer(s.optimizer);
  shardrec_unique_id_t id;
  ASSERT_EQ(shardrec_comm_unique_id_create(&id), SHARDREC_OK) << shardrec_last_error();
  const int64_t collectives_before = NcclCounter(0);
  const int64_t unpacks_before = FakeCalls()[kUnpack];
  const int64_t packs_before = FakeCalls()[kPackGrads];
  const int64_t dp_steps_before = FakeCalls()[kDpStep];
  const bool summed_dp =
      c.world >= 3 && std::find(c.sharding.begin(), c.sharding.end(), kDP) != c.sharding.end();
  SpawnRanks(s.world, [&](int r) {
    CommPtr nccl(NcclComm(id, s.world, r, 60000));
    ASSERT_NE(nccl, nullptr);
    shardrec_embedding_options_t oh = Options(s, false);
    shardrec_embedding_options_t od = Options(s, true);
    oh.forward_comm_encoding = od.forward_comm_encoding = c.encoding;
    oh.backward_comm_encoding = od.backward_comm_encoding = c.encoding;
    if (c.skip_bad_ids) oh.bounds_policy = od.bounds_policy = SHARDREC_BOUNDS_SKIP;
    shardrec_embedding_t* h = nullptr;
    shardrec_embedding_t* d = nullptr;
    ASSERT_EQ(shardrec_embedding_create(&h, plan.get(), GroupComm(s.world, r), &opt, &oh),
              SHARDREC_OK)
        << shardrec_last_error();
    CollPtr ch(h);
    ASSERT_EQ(shardrec_embedding_create(&d, plan.get(), nccl.get(), &opt, &od), SHARDREC_OK)
        << "rank " << r << ": " << shardrec_last_error();
    CollPtr cd(d);
    const auto init_d = Snapshot(d, s);
    int64_t dim = 0;
    shardrec_embedding_output_dim(h, &dim);
    const bool seq = c.pooling == kNone;
    for (int step = 0; step < s.steps; ++step) {
      const RefBatch& rb = batches[step][r];
      KjtHolder kjt(rb, s.num_features, c.int32_ids);
      const bool on_device = c.device_kjt == 2 || (c.device_kjt == 1 && r % 2 == 1);
      std::unique_ptr<DeviceKjt> dkjt;
      if (on_device) dkjt = std::make_unique<DeviceKjt>(*kjt.view());
      const shardrec_kjt_view_t* dview = on_device ? dkjt->view() : kjt.view();
      const size_t n =
          static_cast<size_t>(seq ? static_cast<int64_t>(rb.ids.size()) : rb.batch_size) *
          static_cast<size_t>(dim);
      std::vector<float> out_h(n), out_d(n, -7.0f);
      ASSERT_EQ(shardrec_embedding_forward(h, kjt.view(), out_h.data(), n, nullptr), SHARDREC_OK)
          << shardrec_last_error();
      // CUDA output and gradient views in the fake's device memory (c.device_views).
      FakeDeviceFloats dev_out(c.device_views ? n : 0);
      shardrec_tensor_view_t vout = DeviceView(dev_out.data(), n, dim);
      if (step == 1) {
        // The pipelined input distribution (its exchange on the worker's own communicator).
        ASSERT_EQ(shardrec_embedding_input_dist_start(d, dview, nullptr), SHARDREC_OK)
            << shardrec_last_error();
        ASSERT_EQ(shardrec_embedding_input_dist_wait(d, nullptr), SHARDREC_OK)
            << shardrec_last_error();
        if (c.device_views) {
          ASSERT_EQ(shardrec_embedding_forward_distributed_tensor(d, &vout, nullptr), SHARDREC_OK)
              << shardrec_last_error();
        } else {
          ASSERT_EQ(shardrec_embedding_forward_distributed(d, out_d.data(), n, nullptr),
                    SHARDREC_OK)
              << shardrec_last_error();
        }
      } else if (c.device_views) {
        ASSERT_EQ(shardrec_embedding_forward_tensor(d, dview, &vout, nullptr), SHARDREC_OK)
            << "rank " << r << " step " << step << ": " << shardrec_last_error();
      } else {
        ASSERT_EQ(shardrec_embedding_forward(d, dview, out_d.data(), n, nullptr), SHARDREC_OK)
            << "rank " << r << " step " << step << ": " << shardrec_last_error();
      }
      if (c.device_views) out_d = dev_out.ToVector();
      if (step > 0 && summed_dp) {
        // After a data-parallel update from three ranks (see the weights below): to rounding.
        std::string first;
        EXPECT_EQ(CountMismatches(out_d, out_h, 1e-5f, 1e-7f, &first), 0u)
            << "rank " << r << " step " << step << ": " << first;
      } else {
        EXPECT_TRUE(BitEqual(out_h, out_d)) << "rank " << r << " step " << step;
      }
      std::vector<float> g = grads[step][r];
      ASSERT_EQ(shardrec_embedding_backward(h, g.data(), g.size(), nullptr), SHARDREC_OK)
          << shardrec_last_error();
      if (c.device_views) {
        FakeDeviceCopy dev_g(g);
        shardrec_tensor_view_t vg = DeviceView(static_cast<float*>(dev_g.data()), g.size(), dim);
        ASSERT_EQ(shardrec_embedding_backward_tensor(d, &vg, nullptr), SHARDREC_OK)
            << "rank " << r << " step " << step << ": " << shardrec_last_error();
      } else {
        ASSERT_EQ(shardrec_embedding_backward(d, g.data(), g.size(), nullptr), SHARDREC_OK)
            << "rank " << r << " step " << step << ": " << shardrec_last_error();
      }
    }
    const auto snap_h = Snapshot(h, s);
    const auto snap_d = Snapshot(d, s);
    ASSERT_EQ(snap_h.size(), snap_d.size());
    size_t ns = 0;
    shardrec_embedding_num_states(d, &ns);
    for (size_t i = 0; i < snap_h.size(); ++i) {
      // A data-parallel table's gradients are all-reduced; from three ranks on, NCCL and Gloo
      // may add the ranks' terms in different orders (neither promises one), so its tensors
      // agree to rounding there. Everything else moves without arithmetic: bit for bit.
      const bool summed = c.world >= 3 && c.sharding[i / (1 + ns)] == kDP;
      if (!summed) {
        EXPECT_TRUE(BitEqual(snap_h[i], snap_d[i])) << "rank " << r << " tensor " << i;
        continue;
      }
      std::string first;
      EXPECT_EQ(CountMismatches(snap_d[i], snap_h[i], 1e-5f, 1e-7f, &first), 0u)
          << "rank " << r << " tensor " << i << ": " << first;
    }
    EXPECT_FALSE(BitEqual(init_d[0], snap_d[0]) && BitEqual(init_d.back(), snap_d.back()))
        << "training moved no weight";
  });
  // The exchanges went over the NCCL double (the host collection never calls it).
  if (FakeLoaded()) {
    EXPECT_GT(NcclCounter(0), collectives_before);
    // Pooled fp32 messages at world > 1: the ids travelled between device blocks and the device
    // unpacked them (a 16-bit encoding keeps the staged path).
    if (c.world > 1 && c.pooling != kNone && c.encoding == SHARDREC_COMM_ENCODING_FP32) {
      EXPECT_GT(FakeCalls()[kUnpack], unpacks_before);
    } else {
      EXPECT_EQ(FakeCalls()[kUnpack], unpacks_before);
    }
    // A gradient view is packed on the device (data-parallel tables train there too).
    const bool dp = std::find(c.sharding.begin(), c.sharding.end(), kDP) != c.sharding.end();
    if (c.device_views) {
      EXPECT_GT(FakeCalls()[kPackGrads], packs_before);
    } else {
      EXPECT_EQ(FakeCalls()[kPackGrads], packs_before);
    }
    // Data-parallel gradients are accumulated, all-reduced and applied on the device with fp32
    // messages (a 16-bit encoding at world > 1 keeps the host's accumulation and its staged
    // all-reduce).
    const bool host_dp = c.world > 1 && c.encoding != SHARDREC_COMM_ENCODING_FP32;
    if (dp && !host_dp) {
      EXPECT_GT(FakeCalls()[kDpStep], dp_steps_before);
    } else {
      EXPECT_EQ(FakeCalls()[kDpStep], dp_steps_before);
    }
  }
}

constexpr int32_t kFp32 = SHARDREC_COMM_ENCODING_FP32;

// clang-format off
const Case kCases[] = {
    {"W1_TW_RW_CW_Sum_RowAda_W", 1, {kTW, kRW, kCW}, kSum, kRowAdagrad, true},
    {"W1_DP_TW_RW_Mean_Adam", 1, {kDP, kTW, kRW}, kMean, kAdam, false},
    {"W2_TW_RW_CW_Sum_RowAda_W", 2, {kTW, kRW, kCW}, kSum, kRowAdagrad, true},
    {"W2_DP_TRW_CW_Mean_Adam", 2, {kDP, kTRW, kCW}, kMean, kAdam, false},
    {"W2_TW_RW_CW_Seq_Sgd_W", 2, {kTW, kRW, kCW}, kNone, kSgd, true},
    {"W3_RW_CW_DP_Sum_RowAda_W", 3, {kRW, kCW, kDP}, kSum, kRowAdagrad, true},
    {"W3_TRW_TW_CW_Mean_Sgd", 3, {kTRW, kTW, kCW}, kMean, kSgd, false},
    // KJTs in device memory: routed on the device, the messages written straight into the block
    // they leave from; on some ranks only; int32 ids.
    {"W2_TW_RW_CW_Sum_RowAda_W_DeviceKjt", 2, {kTW, kRW, kCW}, kSum, kRowAdagrad, true, kFp32, 2},
    {"W3_RW_CW_DP_Mean_Adam_DeviceKjtOdd_Int32", 3, {kRW, kCW, kDP}, kMean, kAdam, false, kFp32, 1,
     true},
    {"W2_TW_RW_CW_Seq_Sgd_W_DeviceKjt", 2, {kTW, kRW, kCW}, kNone, kSgd, true, kFp32, 2},
    {"W1_DP_TW_RW_Mean_Adam_DeviceKjt", 1, {kDP, kTW, kRW}, kMean, kAdam, false, kFp32, 2},
    // Sequence outputs combined on the device, data-parallel rows included; skipped ids.
    {"W2_DP_RW_CW_Seq_Sgd_W", 2, {kDP, kRW, kCW}, kNone, kSgd, true},
    {"W3_DP_TRW_TW_Seq_RowAda_SkipBadIds", 3, {kDP, kTRW, kTW}, kNone, kRowAdagrad, false, kFp32,
     0, false, true},
    {"W2_DP_RW_TW_Seq_Sgd_W_SkipBadIds_DeviceKjt", 2, {kDP, kRW, kTW}, kNone, kSgd, true, kFp32,
     2, false, true},
    // CUDA output and gradient views: the output combined into the view, the gradient checked,
    // packed and exchanged on the device (data-parallel tables stage theirs through the host).
    {"W2_TW_RW_CW_Mean_RowAda_W_DeviceViews", 2, {kTW, kRW, kCW}, kMean, kRowAdagrad, true, kFp32,
     2, false, false, true},
    {"W3_TRW_TW_CW_Sum_Adam_DeviceViews", 3, {kTRW, kTW, kCW}, kSum, kAdam, false, kFp32, 0,
     false, false, true},
    {"W2_TW_RW_CW_Seq_Sgd_W_DeviceViews", 2, {kTW, kRW, kCW}, kNone, kSgd, true, kFp32, 2, false,
     false, true},
    {"W2_DP_RW_TW_Mean_Sgd_DeviceViews", 2, {kDP, kRW, kTW}, kMean, kSgd, false, kFp32, 0, false,
     false, true},
    {"W1_TW_RW_CW_Mean_Adam_DeviceViews", 1, {kTW, kRW, kCW}, kMean, kAdam, true, kFp32, 0, false,
     false, true},
    // A 16-bit encoding: the GPU collection's messages take the staged encode / decode passes
    // (comm::EncodedAllToAllV), the host collection's are encoded by its lookups and gradient
    // packing and decoded by its combine (output_dist.h WireRows): the same bits.
    {"W2_TW_RW_CW_Sum_RowAda_W_Bf16Comms", 2, {kTW, kRW, kCW}, kSum, kRowAdagrad, true,
     SHARDREC_COMM_ENCODING_BF16},
    {"W2_TW_RW_CW_Seq_Sgd_W_Bf16Comms", 2, {kTW, kRW, kCW}, kNone, kSgd, true,
     SHARDREC_COMM_ENCODING_BF16},
    {"W3_TRW_CW_DP_Mean_Adam_Fp16Comms", 3, {kTRW, kCW, kDP}, kMean, kAdam, true,
     SHARDREC_COMM_ENCODING_FP16},
    // FP8 blocks: both collections take the staged passes.
    {"W2_TW_RW_CW_Sum_RowAda_W_Fp8Comms", 2, {kTW, kRW, kCW}, kSum, kRowAdagrad, true,
     SHARDREC_COMM_ENCODING_FP8_E4M3},
    {"W3_TRW_CW_DP_Mean_Adam_Fp8E5M2Comms", 3, {kTRW, kCW, kDP}, kMean, kAdam, true,
     SHARDREC_COMM_ENCODING_FP8_E5M2},
};
// clang-format on

INSTANTIATE_TEST_SUITE_P(Plans, NcclVsGloo, ::testing::ValuesIn(kCases), CaseName);

// A communicator on another device than the collection's is refused on every rank, naming both.
TEST(EmbeddingGpuNccl, ACommunicatorOnAnotherDeviceIsRefused) {
  REQUIRE_WORLD(1);
  Scenario s = StandardScenario(1, kTW, kSum);
  PlanPtr plan = MakePlan(s);
  const shardrec_optimizer_config_t opt = ToCOptimizer(s.optimizer);
  shardrec_unique_id_t id;
  ASSERT_EQ(shardrec_comm_unique_id_create(&id), SHARDREC_OK);
  CommPtr nccl(NcclComm(id, 1, 0, 10000));
  ASSERT_NE(nccl, nullptr);
  // A collection on cuda:1 with the communicator of cuda:0.
  shardrec_embedding_options_t od = Options(s, true, 1);
  shardrec_embedding_t* d = nullptr;
  EXPECT_NE(shardrec_embedding_create(&d, plan.get(), nccl.get(), &opt, &od), SHARDREC_OK);
  EXPECT_EQ(d, nullptr);
  // A host collection with an NCCL communicator stays refused.
  shardrec_embedding_options_t oh = Options(s, false);
  EXPECT_EQ(shardrec_embedding_create(&d, plan.get(), nccl.get(), &opt, &oh),
            SHARDREC_EUNSUPPORTED);
  EXPECT_NE(std::string(shardrec_last_error()).find("host communicators"), std::string::npos)
      << shardrec_last_error();
  EXPECT_EQ(d, nullptr);
}

// A batch that one rank rejects (an id outside its table) fails the step on every rank, and the
// next step trains on all of them: the communicator stays usable. Then the same through the
// pipelined entry points: over NCCL the exchange completes inside input_dist_start (no background
// exchange beside the caller's other collectives), so the peer's rejection comes back from that
// call on every rank and nothing is left in flight (wait: EUSAGE); a good batch then goes through
// start / wait (at once) / forward_distributed to the one-shot forward's bits.
TEST(EmbeddingGpuNccl, ARejectedBatchOnOneRankFailsEveryRank) {
  REQUIRE_WORLD(2);
  Scenario s = StandardScenario(2, kRW, kSum);
  s.steps = 2;
  ReferenceModel ref(s.num_features, s.tables, s.optimizer, s.seed, s.world);
  const auto batches = MakeBatches(s, ref);
  PlanPtr plan = MakePlan(s);
  const shardrec_optimizer_config_t opt = ToCOptimizer(s.optimizer);
  ForEachNcclRank(s, plan.get(), opt, 30000, [&](int r, shardrec_embedding_t* d, int64_t dim) {
    RefBatch bad = batches[0][r];
    ASSERT_FALSE(bad.ids.empty());
    if (r == 1) bad.ids[0] = 1000000;  // no table has that row
    KjtHolder kjt(bad, s.num_features, false);
    std::vector<float> out(static_cast<size_t>(bad.batch_size * dim));
    EXPECT_EQ(shardrec_embedding_forward(d, kjt.view(), out.data(), out.size(), nullptr),
              SHARDREC_EINVAL)
        << "rank " << r;
    KjtHolder good(batches[1][r], s.num_features, false);
    std::vector<float> out2(static_cast<size_t>(batches[1][r].batch_size * dim));
    EXPECT_EQ(shardrec_embedding_forward(d, good.view(), out2.data(), out2.size(), nullptr),
              SHARDREC_OK)
        << "rank " << r << ": " << shardrec_last_error();
    EXPECT_EQ(shardrec_embedding_input_dist_start(d, kjt.view(), nullptr), SHARDREC_EINVAL)
        << "rank " << r;
    EXPECT_EQ(shardrec_embedding_input_dist_wait(d, nullptr), SHARDREC_EUSAGE) << "rank " << r;
    ASSERT_EQ(shardrec_embedding_input_dist_start(d, good.view(), nullptr), SHARDREC_OK)
        << "rank " << r << ": " << shardrec_last_error();
    ASSERT_EQ(shardrec_embedding_input_dist_wait(d, nullptr), SHARDREC_OK);
    std::vector<float> out3(out2.size());
    EXPECT_EQ(shardrec_embedding_forward_distributed(d, out3.data(), out3.size(), nullptr),
              SHARDREC_OK)
        << "rank " << r << ": " << shardrec_last_error();
    EXPECT_TRUE(BitEqual(out2, out3)) << "rank " << r;
    if (!FakeLoaded()) return;
    // The same batch in device memory: the id outside its table is found by the device route,
    // and its status in the exchanged summary fails the peer; the rejecting rank says which id.
    DeviceKjt bad_on_device(*kjt.view());
    EXPECT_EQ(shardrec_embedding_forward(d, bad_on_device.view(), out.data(), out.size(), nullptr),
              SHARDREC_EINVAL)
        << "rank " << r;
    const std::string why = shardrec_last_error();
    EXPECT_NE(why.find(r == 1 ? "out of range" : "rank 1 rejected its batch"), std::string::npos)
        << "rank " << r << ": " << why;
    DeviceKjt good_on_device(*good.view());
    std::vector<float> out4(out2.size());
    EXPECT_EQ(
        shardrec_embedding_forward(d, good_on_device.view(), out4.data(), out4.size(), nullptr),
        SHARDREC_OK)
        << "rank " << r << ": " << shardrec_last_error();
    EXPECT_TRUE(BitEqual(out2, out4)) << "rank " << r;
  });
}

// A peer that never calls: the waiting rank's forward returns ETIMEOUT within (about) the
// communicator's timeout instead of hanging.
TEST(EmbeddingGpuNccl, ADeadPeerTimesOut) {
  REQUIRE_WORLD(2);
  Scenario s = StandardScenario(2, kRW, kSum);
  s.steps = 1;
  ReferenceModel ref(s.num_features, s.tables, s.optimizer, s.seed, s.world);
  const auto batches = MakeBatches(s, ref);
  PlanPtr plan = MakePlan(s);
  const shardrec_optimizer_config_t opt = ToCOptimizer(s.optimizer);
  constexpr int64_t kTimeoutMs = 1500;
  std::atomic<bool> rank0_done{false};
  ForEachNcclRank(s, plan.get(), opt, kTimeoutMs, [&](int r, shardrec_embedding_t* d, int64_t dim) {
    if (r == 1) {
      // Alive but silent until rank 0 has given up.
      while (!rank0_done.load()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      return;
    }
    KjtHolder kjt(batches[0][0], s.num_features, false);
    std::vector<float> out(static_cast<size_t>(batches[0][0].batch_size * dim));
    const auto t0 = std::chrono::steady_clock::now();
    EXPECT_EQ(shardrec_embedding_forward(d, kjt.view(), out.data(), out.size(), nullptr),
              SHARDREC_ETIMEOUT)
        << shardrec_last_error();
    const auto ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0)
            .count();
    EXPECT_LT(ms, 4 * kTimeoutMs) << "the wait was not bounded by the timeout";
    rank0_done.store(true);
  });
}

}  // namespace
}  // namespace shardrec::testing
