// DDP through the C API: W ranks (threads over a local Gloo group) training an MLP with the
// bucketer equal one rank trained on the concatenated batch with the mean loss; the result does
// not depend on the bucket layout or on the order gradients are marked ready; no_sync steps
// accumulate locally and the next synced step averages the sums.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>

#include "tests/capi/dense/dense_test_util.h"
#include "tests/support/spawn_ranks.h"

namespace shardrec::testing {
namespace {

void MarkReady(size_t tensor, void* user) {
  EXPECT_EQ(shardrec_ddp_mark_ready(static_cast<shardrec_ddp_t*>(user), tensor), SHARDREC_OK)
      << LastError();
}

void Record(size_t tensor, void* user) {
  static_cast<std::vector<size_t>*>(user)->push_back(tensor);
}

struct DdpRun {
  int world = 2;
  shardrec_optimizer_config_t optimizer = SgdConfig(0.1f);
  int64_t first_bucket_bytes = 0;  // 0: the defaults (one bucket for these small MLPs)
  int64_t bucket_cap_bytes = 0;
  bool shuffled = false;  // mark ready after the backward, in a rank- and step-specific order
  int steps = 4;
  int64_t local_batch = 8;
};

struct DdpResult {
  std::vector<std::vector<std::vector<float>>> params;  // [rank][tensor][element]
  std::vector<double> loss;                             // per step, mean over ranks
  std::vector<int64_t> buckets_before, buckets_after;   // per rank
  std::vector<size_t> rank0_first_order;                // rank 0's ready order at step 0
  std::vector<std::vector<size_t>> layout_after;        // rank 0's buckets after the run
};

const MlpShape kShape;

DdpResult RunDdp(const DdpRun& run) {
  DdpResult res;
  res.params.resize(run.world);
  res.buckets_before.resize(run.world);
  res.buckets_after.resize(run.world);
  std::vector<std::vector<double>> losses(run.world, std::vector<double>(run.steps));
  auto comms = LocalGroup(run.world);
  SpawnRanks(run.world, [&](int r) {
    MlpPtr mlp = MakeMlp(kShape);
    const std::vector<int64_t> counts = TensorCounts(mlp.get());
    shardrec_ddp_options_t o;
    ASSERT_EQ(shardrec_ddp_options_init(&o, SHARDREC_DDP_OPTIONS_VERSION), SHARDREC_OK);
    o.first_bucket_bytes = run.first_bucket_bytes;
    o.bucket_cap_bytes = run.bucket_cap_bytes;
    shardrec_ddp_t* raw = nullptr;
    ASSERT_EQ(shardrec_ddp_create(&raw, comms[r].get(), counts.data(), counts.size(), &o),
              SHARDREC_OK)
        << LastError();
    DdpPtr ddp(raw);
    shardrec_ddp_stats_t st;
    ASSERT_EQ(shardrec_ddp_stats(ddp.get(), &st), SHARDREC_OK);
    res.buckets_before[r] = st.buckets;
    shardrec_dense_optimizer_t* oraw = nullptr;
    ASSERT_EQ(shardrec_dense_optimizer_create(&oraw, &run.optimizer), SHARDREC_OK) << LastError();
    OptPtr opt(oraw);
    std::mt19937 rng(1234 + r);
    for (int step = 0; step < run.steps; ++step) {
      // ddp.h: a gradient's address may change once, after the first synced step; rebinding
      // every step follows the contract whatever the implementation does.
      for (size_t i = 0; i < counts.size(); ++i) {
        float* g = nullptr;
        ASSERT_EQ(shardrec_ddp_grad(ddp.get(), i, &g), SHARDREC_OK);
        ASSERT_EQ(shardrec_mlp_bind_tensor(mlp.get(), i, nullptr, g), SHARDREC_OK);
      }
      ASSERT_EQ(shardrec_ddp_zero_grad(ddp.get()), SHARDREC_OK);
      const Batch b = MakeBatch(kShape.in, r * run.local_batch, run.local_batch, step);
      if (run.shuffled) {
        std::vector<size_t> order;
        losses[r][step] = ForwardBackward(mlp.get(), b, Record, &order);
        ASSERT_EQ(order.size(), counts.size());
        std::shuffle(order.begin(), order.end(), rng);
        if (r == 0 && step == 0) res.rank0_first_order = order;
        for (size_t i : order) ASSERT_EQ(shardrec_ddp_mark_ready(ddp.get(), i), SHARDREC_OK);
      } else {
        losses[r][step] = ForwardBackward(mlp.get(), b, MarkReady, ddp.get());
      }
      ASSERT_EQ(shardrec_ddp_finish(ddp.get()), SHARDREC_OK) << LastError();
      const auto ts = Tensors(mlp.get());
      ASSERT_EQ(shardrec_dense_optimizer_step(opt.get(), ts.data(), ts.size()), SHARDREC_OK)
          << LastError();
    }
    ASSERT_EQ(shardrec_ddp_stats(ddp.get(), &st), SHARDREC_OK);
    EXPECT_EQ(st.steps, run.steps);
    EXPECT_EQ(st.bytes_reduced, 4 * std::accumulate(counts.begin(), counts.end(), int64_t{0}));
    res.buckets_after[r] = st.buckets;
    res.params[r] = Params(mlp.get());
    if (r == 0) {
      for (size_t bk = 0; bk < static_cast<size_t>(st.buckets); ++bk) {
        size_t size = 0;
        ASSERT_EQ(shardrec_ddp_bucket(ddp.get(), bk, nullptr, 0, &size), SHARDREC_OK);
        std::vector<size_t> members(size);
        ASSERT_EQ(shardrec_ddp_bucket(ddp.get(), bk, members.data(), size, &size), SHARDREC_OK);
        res.layout_after.push_back(members);
      }
    }
  });
  for (int step = 0; step < run.steps; ++step) {
    double sum = 0;
    for (int r = 0; r < run.world; ++r) sum += losses[r][step];
    res.loss.push_back(sum / run.world);
  }
  return res;
}

// One rank, the W local batches concatenated in rank order, mean loss over all of them.
DdpResult RunReference(const DdpRun& run) {
  DdpResult res;
  MlpPtr mlp = MakeMlp(kShape);
  shardrec_dense_optimizer_t* oraw = nullptr;
  EXPECT_EQ(shardrec_dense_optimizer_create(&oraw, &run.optimizer), SHARDREC_OK);
  OptPtr opt(oraw);
  for (int step = 0; step < run.steps; ++step) {
    EXPECT_EQ(shardrec_mlp_zero_grad(mlp.get()), SHARDREC_OK);
    const Batch b = MakeBatch(kShape.in, 0, run.world * run.local_batch, step);
    res.loss.push_back(ForwardBackward(mlp.get(), b, nullptr, nullptr));
    const auto ts = Tensors(mlp.get());
    EXPECT_EQ(shardrec_dense_optimizer_step(opt.get(), ts.data(), ts.size()), SHARDREC_OK);
  }
  res.params.push_back(Params(mlp.get()));
  return res;
}

class CapiDdp : public ::testing::Test {
 protected:
  // Ranks are threads of this process: one BLAS thread each (dense.h), which also makes every
  // GEMM's summation order fixed.
  void SetUp() override { ASSERT_EQ(shardrec_dense_set_blas_threads(1), SHARDREC_OK); }
};

// Tolerance of DDP against the single-rank reference: the two differ only in fp32 summation
// order (each rank's GEMM sums its own b samples and the bucketer averages W partial means,
// where the reference sums W*b samples at once), a few ulps per gradient element. After 4 steps
// the parameters agree to 1e-6 absolute + 1e-5 relative (observed: at most 3e-8 absolute, SGD
// and Adam, W = 2 and 3; the figure is printed); the parameters move by >= 1e-2 meanwhile.
constexpr double kAtol = 1e-6, kRtol = 1e-5;

TEST_F(CapiDdp, WRanksEqualOneRankOnTheConcatenatedBatch) {
  for (int world : {2, 3}) {
    for (bool adam : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "world " << world << (adam ? " Adam" : " SGD"));
      DdpRun run;
      run.world = world;
      run.optimizer = adam ? AdamConfig(0.01f) : SgdConfig(0.1f);
      // Three buckets: {bias 2, weight 2} closes the 64-byte first bucket, then {bias 1,
      // weight 1} and {bias 0, weight 0} each pass 512 bytes.
      run.first_bucket_bytes = 64;
      run.bucket_cap_bytes = 512;
      const DdpResult ddp = RunDdp(run);
      const DdpResult ref = RunReference(run);
      for (int r = 0; r < world; ++r) {
        EXPECT_EQ(ddp.buckets_before[r], 3);
        // Every replica holds bit-identical parameters.
        for (size_t t = 0; t < ddp.params[0].size(); ++t) {
          ASSERT_EQ(ddp.params[r][t], ddp.params[0][t]) << "rank " << r << " tensor " << t;
        }
      }
      const double worst = WorstError(ddp.params[0], ref.params[0], kAtol, kRtol);
      EXPECT_LE(worst, 1.0) << "max abs diff " << MaxAbsDiff(ddp.params[0], ref.params[0]);
      std::printf("world %d %s: max |ddp - reference| = %.3g\n", world, adam ? "Adam" : "SGD",
                  MaxAbsDiff(ddp.params[0], ref.params[0]));
      // The test is not vacuous: training moved the parameters far beyond the tolerance.
      MlpPtr initial = MakeMlp(kShape);
      EXPECT_GT(MaxAbsDiff(ref.params[0], Params(initial.get())), 1e-2);
      for (int step = 0; step < run.steps; ++step) {
        EXPECT_NEAR(ddp.loss[step], ref.loss[step], 1e-6 * std::fabs(ref.loss[step]))
            << "step " << step;
      }
      EXPECT_LT(ref.loss.back(), ref.loss.front());
    }
  }
}

TEST_F(CapiDdp, BucketLayoutAndReadyOrderDoNotChangeTheResult) {
  DdpRun one;
  one.world = 3;
  one.optimizer = AdamConfig(0.01f);
  DdpRun many = one;
  many.first_bucket_bytes = 4;  // one tensor per bucket
  many.bucket_cap_bytes = 4;
  many.shuffled = true;
  const DdpResult a = RunDdp(one);
  const DdpResult b = RunDdp(many);
  EXPECT_EQ(a.buckets_before[0], 1);
  EXPECT_EQ(b.buckets_before[0], 6);
  // The average is rank-ordered whatever the layout: bit for bit.
  for (int r = 0; r < 3; ++r) {
    for (size_t t = 0; t < a.params[r].size(); ++t) {
      ASSERT_EQ(a.params[r][t], b.params[r][t]) << "rank " << r << " tensor " << t;
    }
  }
  // Rebuilt once, after the first step, in the order rank 0 marked its gradients.
  std::vector<size_t> flat;
  for (const auto& bucket : b.layout_after) flat.insert(flat.end(), bucket.begin(), bucket.end());
  EXPECT_EQ(flat, b.rank0_first_order);
  EXPECT_NE(b.rank0_first_order, std::vector<size_t>({5, 4, 3, 2, 1, 0}));
}

TEST_F(CapiDdp, NoSyncAccumulatesLocallyThenTheSyncedStepAveragesTheSums) {
  const int world = 2, k = 3;
  const int64_t b = 6;
  auto comms = LocalGroup(world);
  std::vector<std::vector<std::vector<float>>> plain(world), synced(world);
  SpawnRanks(world, [&](int r) {
    MlpPtr mlp = MakeMlp(kShape);
    MlpPtr local = MakeMlp(kShape);  // the same model, its own gradients, no communication
    const std::vector<int64_t> counts = TensorCounts(mlp.get());
    shardrec_ddp_options_t o = SHARDREC_DDP_OPTIONS_INIT;
    o.first_bucket_bytes = 256;
    o.bucket_cap_bytes = 1024;
    shardrec_ddp_t* raw = nullptr;
    ASSERT_EQ(shardrec_ddp_create(&raw, comms[r].get(), counts.data(), counts.size(), &o),
              SHARDREC_OK)
        << LastError();
    DdpPtr ddp(raw);
    for (size_t i = 0; i < counts.size(); ++i) {
      float* g = nullptr;
      ASSERT_EQ(shardrec_ddp_grad(ddp.get(), i, &g), SHARDREC_OK);
      ASSERT_EQ(shardrec_mlp_bind_tensor(mlp.get(), i, nullptr, g), SHARDREC_OK);
    }
    ASSERT_EQ(shardrec_ddp_zero_grad(ddp.get()), SHARDREC_OK);
    ASSERT_EQ(shardrec_mlp_zero_grad(local.get()), SHARDREC_OK);
    for (int step = 0; step <= k; ++step) {
      ASSERT_EQ(shardrec_ddp_set_sync(ddp.get(), step == k ? 1 : 0), SHARDREC_OK);
      const Batch batch = MakeBatch(kShape.in, r * b, b, step);
      ForwardBackward(mlp.get(), batch, MarkReady, ddp.get());
      ForwardBackward(local.get(), batch, nullptr, nullptr);
      ASSERT_EQ(shardrec_ddp_finish(ddp.get()), SHARDREC_OK) << LastError();
      shardrec_ddp_stats_t st;
      ASSERT_EQ(shardrec_ddp_stats(ddp.get(), &st), SHARDREC_OK);
      EXPECT_EQ(st.steps, step == k ? 1 : 0);
      if (step < k) {
        // Nothing was exchanged: the bucket holds exactly this rank's running sum.
        ASSERT_EQ(Grads(mlp.get()), Grads(local.get())) << "step " << step;
      }
    }
    plain[r] = Grads(local.get());
    synced[r] = Grads(mlp.get());
  });
  bool any_nonzero = false;
  for (size_t t = 0; t < plain[0].size(); ++t) {
    for (size_t e = 0; e < plain[0][t].size(); ++e) {
      const float mean = (plain[0][t][e] + plain[1][t][e]) / 2.0f;
      ASSERT_EQ(synced[0][t][e], mean) << "tensor " << t << " element " << e;
      ASSERT_EQ(synced[1][t][e], mean);
      any_nonzero |= plain[0][t][e] != plain[1][t][e];
    }
  }
  EXPECT_TRUE(any_nonzero);  // the ranks' sums differ, so the average did something
}

}  // namespace
}  // namespace shardrec::testing
