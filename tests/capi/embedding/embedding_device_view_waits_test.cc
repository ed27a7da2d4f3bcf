// CUDA output and gradient views on a HOST collection (impl/core/device_view_staging.h), counted
// through the fake embedding plugin: each call makes its one copy through the pinned staging
// block and waits once (on the caller's stream, bounded by the collection's timeout), the block
// is allocated once and reused, and host views touch the device not at all. Fake-only (the
// counters are the fake's); the bits are compared with host views.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "tests/capi/embedding/embedding_test_util.h"
#include "tests/capi/embedding/gpu_test_util.h"

namespace shardrec::testing {
namespace {

TEST(EmbeddingDeviceViewWaits, OneCopyAndOneWaitPerCall) {
  REQUIRE_FAKE();
  for (const int32_t pooling : {kSum, kNone}) {
    SCOPED_TRACE(pooling == kSum ? "pooled" : "sequence");
    Scenario s = StandardScenario(1, kRW, pooling);
    s.steps = 3;
    s.batch_sizes = {4};
    const TrainingSetup ts(s);
    ASSERT_NE(ts.plan, nullptr);
    // Two host collections: one fed host views, one fed CUDA views.
    const shardrec_embedding_options_t o = Options(s, false);
    shardrec_embedding_t* ca = nullptr;
    shardrec_embedding_t* cb = nullptr;
    ASSERT_EQ(shardrec_embedding_create(&ca, ts.plan.get(), GroupComm(1, 0), &ts.opt, &o),
              SHARDREC_OK);
    CollPtr a(ca);
    ASSERT_EQ(shardrec_embedding_create(&cb, ts.plan.get(), GroupComm(1, 0), &ts.opt, &o),
              SHARDREC_OK);
    CollPtr b(cb);
    int64_t dim = 0;
    shardrec_embedding_output_dim(a.get(), &dim);
    for (int step = 0; step < s.steps; ++step) {
      const RefBatch& rb = ts.batches[step][0];
      KjtHolder kjt(rb, s.num_features, false);
      const size_t n = OutputLen(rb, pooling == kNone, dim);
      ASSERT_GT(n, 0u);
      std::vector<float> out_a(n);
      shardrec_tensor_view_t va = View(&out_a, dim, SHARDREC_DEVICE_HOST);
      Counts before = Runtime();
      ASSERT_EQ(shardrec_embedding_forward_tensor(a.get(), kjt.view(), &va, nullptr), SHARDREC_OK)
          << shardrec_last_error();
      EXPECT_EQ(Delta(before, Runtime()), Counts{}) << "host views touch no device";

      FakeDeviceFloats out_b(n);
      ASSERT_NE(out_b.data(), nullptr);
      std::fill(out_b.data(), out_b.data() + n, -7.0f);
      shardrec_tensor_view_t vb = DeviceView(out_b.data(), n, dim);
      before = Runtime();
      if (step == 1) {  // the pipelined forward stages the same way
        ASSERT_EQ(shardrec_embedding_input_dist_start(b.get(), kjt.view(), nullptr), SHARDREC_OK);
        ASSERT_EQ(shardrec_embedding_input_dist_wait(b.get(), nullptr), SHARDREC_OK);
        ASSERT_EQ(shardrec_embedding_forward_distributed_tensor(b.get(), &vb, nullptr), SHARDREC_OK)
            << shardrec_last_error();
      } else {
        ASSERT_EQ(shardrec_embedding_forward_tensor(b.get(), kjt.view(), &vb, nullptr), SHARDREC_OK)
            << shardrec_last_error();
      }
      Counts d = Delta(before, Runtime());
      EXPECT_EQ(d[kSync], 1) << "forward waits, step " << step;
      EXPECT_EQ(d[kUp], 1) << "forward uploads, step " << step;
      EXPECT_EQ(d[kDown], 0) << "step " << step;
      EXPECT_EQ(d[kDeviceAlloc], 0) << "step " << step;
      EXPECT_EQ(d[kHostAlloc], step == 0 ? 1 : 0) << "the pinned block is reused, step " << step;
      EXPECT_TRUE(BitEqual(out_a, out_b.ToVector())) << "step " << step;

      std::vector<float> g = ts.grads[step][0];
      shardrec_tensor_view_t ga = View(&g, dim, SHARDREC_DEVICE_HOST);
      before = Runtime();
      ASSERT_EQ(shardrec_embedding_backward_tensor(a.get(), &ga, nullptr), SHARDREC_OK);
      EXPECT_EQ(Delta(before, Runtime()), Counts{}) << "host views touch no device";
      FakeDeviceCopy g_dev(g);
      ASSERT_NE(g_dev.data(), nullptr);
      shardrec_tensor_view_t gb = DeviceView(static_cast<float*>(g_dev.data()), g.size(), dim);
      before = Runtime();
      ASSERT_EQ(shardrec_embedding_backward_tensor(b.get(), &gb, nullptr), SHARDREC_OK)
          << shardrec_last_error();
      d = Delta(before, Runtime());
      EXPECT_EQ(d[kSync], 1) << "backward waits, step " << step;
      EXPECT_EQ(d[kUp], 0) << "step " << step;
      EXPECT_EQ(d[kDown], 1) << "backward downloads, step " << step;
      EXPECT_EQ(d[kDeviceAlloc] + d[kHostAlloc], 0) << "step " << step;
    }
    ExpectSameTensors(Snapshot(a.get(), s), Snapshot(b.get(), s), "after training");
  }
}

}  // namespace
}  // namespace shardrec::testing
