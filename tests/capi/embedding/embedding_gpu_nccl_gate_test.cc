// A GPU collection over NCCL whose backward is gated on the device: the verdict of every rank is
// all-reduced between device blocks into a gate word at the start of the update phase, and every
// update (fused shards, aggregated shards, data-parallel tables) reads it, so no host waits for
// the verdict before the updates are queued. A call that one rank rejects must still fail on
// every rank with nothing changed anywhere (weights, optimizer states, the step counter), and the
// next call must train: checked here against a host collection over Gloo that takes the same
// calls, bit for bit.
#include <gtest/gtest.h>

#include <barrier>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "shardrec/comm.h"
#include "tests/capi/embedding/embedding_test_util.h"
#include "tests/capi/embedding/gpu_test_util.h"
#include "tests/capi/embedding/nccl_test_util.h"
#include "tests/support/spawn_ranks.h"

namespace shardrec::testing {
namespace {

// How rank 1 spoils one backward.
enum class Spoil {
  kGradLen,        // a gradient of the wrong length (host)
  kHostNaN,        // a NaN in its host gradient
  kDeviceNaN,      // a NaN in its CUDA gradient view
  kRefusedOutput,  // its forward_distributed refused its output buffer (a host collection's
                   // peers fail theirs too; a GPU collection's go on and fail the backward)
};

const char* SpoilName(Spoil s) {
  switch (s) {
    case Spoil::kGradLen:
      return "grad_len";
    case Spoil::kHostNaN:
      return "host NaN";
    case Spoil::kDeviceNaN:
      return "device NaN";
    case Spoil::kRefusedOutput:
      return "refused output";
  }
  return "?";
}

int64_t Steps(shardrec_embedding_t* c) {
  int64_t n = -1;
  EXPECT_EQ(shardrec_embedding_num_steps(c, &n), SHARDREC_OK);
  return n;
}

// World 2: a host collection over Gloo and a GPU collection over NCCL take the same calls; each
// spoil is one step whose backward rank 1 spoils (every rank fails it, nothing changes), then the
// same step's good backward and a further step train. The collections end bit-identical.
void RejectionsChangeNothing(const std::vector<int32_t>& sharding, int32_t pooling,
                             int32_t optimizer) {
  SCOPED_TRACE(::testing::Message() << "sharding " << ::testing::PrintToString(sharding)
                                    << " pooling " << pooling << " optimizer " << optimizer);
  const Spoil spoils[] = {Spoil::kGradLen, Spoil::kHostNaN, Spoil::kDeviceNaN,
                          Spoil::kRefusedOutput};
  Scenario s = StandardScenario(2, sharding[0], pooling);
  s.sharding = sharding;
  s.optimizer.type = optimizer;
  s.weighted = true;
  s.steps = 2 * static_cast<int>(std::size(spoils));
  ReferenceModel ref(s.num_features, s.tables, s.optimizer, s.seed, s.world);
  const auto batches = MakeBatches(s, ref);
  const auto grads = MakeGrads(s, batches, ref.output_dim());
  PlanPtr plan = MakePlan(s);
  ASSERT_NE(plan, nullptr) << shardrec_last_error();
  const shardrec_optimizer_config_t opt = ToCOptimizer(s.optimizer);
  shardrec_unique_id_t id;
  ASSERT_EQ(shardrec_comm_unique_id_create(&id), SHARDREC_OK);
  const int64_t gated_before = FakeCalls()[kGroupRowsGated];
  const bool seq = pooling == kNone;
  SpawnRanks(2, [&](int r) {
    CommPtr nccl(NcclComm(id, 2, r, 60000));
    ASSERT_NE(nccl, nullptr);
    shardrec_embedding_t* h = nullptr;
    shardrec_embedding_t* d = nullptr;
    const shardrec_embedding_options_t oh = Options(s, false), od = Options(s, true);
    ASSERT_EQ(shardrec_embedding_create(&h, plan.get(), GroupComm(2, r), &opt, &oh), SHARDREC_OK)
        << shardrec_last_error();
    CollPtr ch(h);
    ASSERT_EQ(shardrec_embedding_create(&d, plan.get(), nccl.get(), &opt, &od), SHARDREC_OK)
        << shardrec_last_error();
    CollPtr cd(d);
    int64_t dim = 0;
    shardrec_embedding_output_dim(d, &dim);
    for (size_t k = 0; k < std::size(spoils); ++k) {
      const Spoil spoil = spoils[k];
      SCOPED_TRACE(::testing::Message() << "rank " << r << ", " << SpoilName(spoil));
      for (int rep = 0; rep < 2; ++rep) {
        const int step = 2 * static_cast<int>(k) + rep;
        const RefBatch& rb = batches[step][r];
        KjtHolder kjt(rb, s.num_features, false);
        const size_t n = OutputLen(rb, seq, dim);
        std::vector<float> out_h(n), out_d(n);
        const bool refused_step = rep == 0 && spoil == Spoil::kRefusedOutput;
        const bool refuse = refused_step && r == 1;
        for (shardrec_embedding_t* c : {h, d}) {
          ASSERT_EQ(shardrec_embedding_input_dist_start(c, kjt.view(), nullptr), SHARDREC_OK)
              << shardrec_last_error();
          ASSERT_EQ(shardrec_embedding_input_dist_wait(c, nullptr), SHARDREC_OK);
          std::vector<float>& out = c == h ? out_h : out_d;
          // The host collection agrees on the output buffers; the GPU one adds no host wait.
          const bool fails = c == h ? refused_step : refuse;
          EXPECT_EQ(
              shardrec_embedding_forward_distributed(c, out.data(), n + (refuse ? 1 : 0), nullptr),
              fails ? SHARDREC_EINVAL : SHARDREC_OK)
              << shardrec_last_error();
        }
        if (!refused_step) {
          EXPECT_TRUE(BitEqual(out_h, out_d)) << "step " << step;
        }
        const std::vector<float>& g = grads[step][r];
        if (rep == 0) {
          // The spoiled backward: every rank fails, nothing changes, the step does not count.
          const auto before_h = Snapshot(h, s), before_d = Snapshot(d, s);
          const int64_t steps_h = Steps(h), steps_d = Steps(d);
          std::vector<float> bad = g;
          size_t len = g.size();
          if (r == 1 && spoil == Spoil::kGradLen) len += 1;
          if (r == 1 && (spoil == Spoil::kHostNaN || spoil == Spoil::kDeviceNaN) && !bad.empty())
            bad[bad.size() / 2] = std::nanf("");
          bad.resize(std::max(len, bad.size()), 0.0f);
          // (A rank whose forward failed has no batch to train: a usage error there. On the
          // host that is every rank after a refused output.)
          const shardrec_status_t want =
              r == 1 && spoil == Spoil::kRefusedOutput ? SHARDREC_EUSAGE : SHARDREC_EINVAL;
          EXPECT_EQ(shardrec_embedding_backward(h, bad.data(), len, nullptr),
                    spoil == Spoil::kRefusedOutput ? SHARDREC_EUSAGE : want);
          if (spoil == Spoil::kDeviceNaN) {
            // Stream-ordered: queued on every rank, the rejection learnt at the next
            // synchronising call, on every rank alike.
            FakeDeviceCopy dev(bad);
            const shardrec_tensor_view_t v = DeviceView(static_cast<float*>(dev.data()), len, dim);
            EXPECT_EQ(shardrec_embedding_backward_tensor(d, &v, nullptr), SHARDREC_OK);
            EXPECT_EQ(shardrec_embedding_synchronize(d), want);
          } else {
            EXPECT_EQ(shardrec_embedding_backward(d, bad.data(), len, nullptr), want);
          }
          const std::string why = shardrec_last_error();
          EXPECT_EQ(shardrec_embedding_synchronize(d), SHARDREC_OK) << "reported once";
          if (r == 0) {
            EXPECT_NE(why.find("rank 1 rejected"), std::string::npos) << why;
          }
          ExpectSameTensors(before_h, Snapshot(h, s), "host after the spoiled backward");
          ExpectSameTensors(before_d, Snapshot(d, s), "GPU after the spoiled backward");
          EXPECT_EQ(Steps(h), steps_h);
          EXPECT_EQ(Steps(d), steps_d);
          // A rank that refused its output cannot train that batch: the next forward goes on.
          if (spoil == Spoil::kRefusedOutput) continue;
        }
        ASSERT_EQ(shardrec_embedding_backward(h, g.data(), g.size(), nullptr), SHARDREC_OK)
            << shardrec_last_error();
        ASSERT_EQ(shardrec_embedding_backward(d, g.data(), g.size(), nullptr), SHARDREC_OK)
            << shardrec_last_error();
        EXPECT_EQ(Steps(h), Steps(d));
      }
    }
    ExpectSameTensors(Snapshot(h, s), Snapshot(d, s), "rank " + std::to_string(r));
  });
  // The updates went through the gated grouping.
  if (FakeLoaded()) {
    EXPECT_GT(FakeCalls()[kGroupRowsGated], gated_before);
  }
}

TEST(GatedBackward, ARejectionOnOneRankChangesNothingAnywhere) {
  REQUIRE_WORLD(2);
  if (!DeviceBuffersAvailable()) GTEST_SKIP() << "no device buffers for device views here";
  // Fused shards and a data-parallel table (MEAN, Adam: states that any update would move).
  RejectionsChangeNothing({kDP, kRW, kTW}, kMean, kAdam);
  // Column shards with row statistics (aggregated, statistics exchanged between device blocks).
  RejectionsChangeNothing({kTW, kRW, kCW}, kSum, kRowAdagrad);
  // Sequence outputs (aggregated) with a data-parallel table; LAMB's statistics phase advances
  // its moments, so it must be gated too.
  RejectionsChangeNothing({kDP, kRW, kCW}, kNone, kLamb);
}

}  // namespace
}  // namespace shardrec::testing
