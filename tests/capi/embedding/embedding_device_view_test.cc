// CUDA output and gradient views on a host collection, staged through pinned memory. Runs with
// SHARDREC_CUDA_PLUGIN set to a fake plugin whose "device" is host memory with one device and
// whose copies and stream waits follow the plugin contract, so the staging is exercised without a
// GPU: a collection fed CUDA views must give the bits of one fed host views, and a view that
// cannot be used (a device that does not exist) must change nothing on any rank.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "shardrec/device.h"
#include "tests/capi/embedding/embedding_test_util.h"
#include "tests/support/spawn_ranks.h"

namespace shardrec::testing {
namespace {

bool BitEqual(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

shardrec_tensor_view_t View(std::vector<float>* data, int64_t dim, int32_t device_type,
                            int32_t device_index) {
  shardrec_tensor_view_t v{};
  v.data = data->data();
  v.dtype = SHARDREC_DTYPE_FLOAT32;
  v.device_type = device_type;
  v.device_index = device_index;
  v.ndim = 2;
  v.shape[0] = dim == 0 ? 0 : static_cast<int64_t>(data->size()) / dim;
  v.shape[1] = dim;
  return v;
}

TEST(EmbeddingDeviceView, TheFakePluginIsLoaded) {
  // Guards the rest: without the plugin every CUDA view would be refused as ENODEVICE.
  ASSERT_EQ(shardrec_device_check(SHARDREC_DEVICE_CUDA, 0), SHARDREC_OK) << shardrec_last_error();
}

class EmbeddingDeviceView : public ::testing::TestWithParam<int32_t> {};

// Two collections of one plan trained side by side, one through host views, one through CUDA
// views (the pipelined forward included): same outputs and same parameters, bit for bit.
TEST_P(EmbeddingDeviceView, CudaViewsGiveTheBitsOfHostViews) {
  Scenario s = StandardScenario(2, SHARDREC_SHARDING_TABLE_WISE, GetParam());
  s.sharding = {SHARDREC_SHARDING_DATA_PARALLEL, SHARDREC_SHARDING_ROW_WISE,
                SHARDREC_SHARDING_COLUMN_WISE};
  s.optimizer.type = SHARDREC_OPTIMIZER_ROWWISE_ADAGRAD;
  s.weighted = true;
  s.steps = 4;
  s.batch_sizes = {3, 0};
  ReferenceModel ref(s.num_features, s.tables, s.optimizer, s.seed, s.world);
  const auto batches = MakeBatches(s, ref);
  const auto grads = MakeGrads(s, batches, ref.output_dim());
  PlanPtr plan = MakePlan(s);
  const shardrec_optimizer_config_t opt = ToCOptimizer(s.optimizer);
  SpawnRanks(s.world, [&](int r) {
    shardrec_embedding_options_t o;
    shardrec_embedding_options_init(&o, SHARDREC_EMBEDDING_OPTIONS_VERSION);
    o.seed = s.seed;
    shardrec_embedding_t* a = nullptr;
    shardrec_embedding_t* b = nullptr;
    ASSERT_EQ(shardrec_embedding_create(&a, plan.get(), GroupComm(s.world, r), &opt, &o),
              SHARDREC_OK);
    CollPtr ca(a);
    ASSERT_EQ(shardrec_embedding_create(&b, plan.get(), GroupComm(s.world, r), &opt, &o),
              SHARDREC_OK);
    CollPtr cb(b);
    int64_t dim = 0;
    shardrec_embedding_output_dim(a, &dim);
    const bool seq = GetParam() == SHARDREC_POOLING_NONE;
    for (int step = 0; step < s.steps; ++step) {
      const RefBatch& rb = batches[step][r];
      KjtHolder kjt(rb, s.num_features, false);
      const size_t n =
          static_cast<size_t>(seq ? static_cast<int64_t>(rb.ids.size()) : rb.batch_size) *
          static_cast<size_t>(dim);
      std::vector<float> out_a(n), out_b(n, -7.0f);
      shardrec_tensor_view_t va = View(&out_a, dim, SHARDREC_DEVICE_HOST, 0);
      ASSERT_EQ(shardrec_embedding_forward_tensor(a, kjt.view(), &va, nullptr), SHARDREC_OK)
          << shardrec_last_error();
      shardrec_tensor_view_t vb = View(&out_b, dim, SHARDREC_DEVICE_CUDA, 0);
      if (step % 2 == 0) {
        ASSERT_EQ(shardrec_embedding_forward_tensor(b, kjt.view(), &vb, nullptr), SHARDREC_OK)
            << shardrec_last_error();
      } else {
        ASSERT_EQ(shardrec_embedding_input_dist_start(b, kjt.view(), nullptr), SHARDREC_OK);
        ASSERT_EQ(shardrec_embedding_input_dist_wait(b, nullptr), SHARDREC_OK);
        ASSERT_EQ(shardrec_embedding_forward_distributed_tensor(b, &vb, nullptr), SHARDREC_OK)
            << shardrec_last_error();
      }
      EXPECT_TRUE(BitEqual(out_a, out_b)) << "rank " << r << " step " << step;
      std::vector<float> g = grads[step][r];
      shardrec_tensor_view_t ga = View(&g, dim, SHARDREC_DEVICE_HOST, 0);
      shardrec_tensor_view_t gb = View(&g, dim, SHARDREC_DEVICE_CUDA, 0);
      ASSERT_EQ(shardrec_embedding_backward_tensor(a, &ga, nullptr), SHARDREC_OK);
      ASSERT_EQ(shardrec_embedding_backward_tensor(b, &gb, nullptr), SHARDREC_OK)
          << shardrec_last_error();
    }
    const auto snap_a = Snapshot(a, s);
    const auto snap_b = Snapshot(b, s);
    ASSERT_EQ(snap_a.size(), snap_b.size());
    for (size_t i = 0; i < snap_a.size(); ++i)
      EXPECT_TRUE(BitEqual(snap_a[i], snap_b[i])) << "rank " << r << " tensor " << i;
  });
}

INSTANTIATE_TEST_SUITE_P(Pooling, EmbeddingDeviceView,
                         ::testing::Values(SHARDREC_POOLING_SUM, SHARDREC_POOLING_MEAN,
                                           SHARDREC_POOLING_NONE));

// A view on a device that does not exist (the fake has one) is a rejected input: ENODEVICE on
// its rank, EINVAL on the peer, no step taken and no parameter changed; the next call works.
TEST(EmbeddingDeviceViewRejected, AMissingDeviceChangesNothingOnAnyRank) {
  Scenario s = StandardScenario(2, SHARDREC_SHARDING_ROW_WISE, SHARDREC_POOLING_SUM);
  s.steps = 1;
  ReferenceModel ref(s.num_features, s.tables, s.optimizer, s.seed, s.world);
  const auto batches = MakeBatches(s, ref);
  const auto grads = MakeGrads(s, batches, ref.output_dim());
  PlanPtr plan = MakePlan(s);
  const shardrec_optimizer_config_t opt = ToCOptimizer(s.optimizer);
  SpawnRanks(s.world, [&](int r) {
    shardrec_embedding_t* c = nullptr;
    ASSERT_EQ(shardrec_embedding_create(&c, plan.get(), GroupComm(s.world, r), &opt, nullptr),
              SHARDREC_OK);
    CollPtr cc(c);
    int64_t dim = 0;
    shardrec_embedding_output_dim(c, &dim);
    const RefBatch& rb = batches[0][r];
    KjtHolder kjt(rb, s.num_features, false);
    std::vector<float> out(static_cast<size_t>(rb.batch_size * dim));
    const int32_t bad_device = r == 1 ? 3 : 0;
    shardrec_tensor_view_t v = View(&out, dim, SHARDREC_DEVICE_CUDA, bad_device);
    const shardrec_status_t fwd = shardrec_embedding_forward_tensor(c, kjt.view(), &v, nullptr);
    EXPECT_EQ(fwd, r == 1 ? SHARDREC_ENODEVICE : SHARDREC_EINVAL) << shardrec_last_error();
    // No forward happened, so a backward has nothing to differentiate.
    std::vector<float> g = grads[0][r];
    shardrec_tensor_view_t gv = View(&g, dim, SHARDREC_DEVICE_CUDA, 0);
    EXPECT_EQ(shardrec_embedding_backward_tensor(c, &gv, nullptr), SHARDREC_EUSAGE);

    v.device_index = 0;
    ASSERT_EQ(shardrec_embedding_forward_tensor(c, kjt.view(), &v, nullptr), SHARDREC_OK);
    const auto before = Snapshot(c, s);
    gv.device_index = bad_device;
    const shardrec_status_t bwd = shardrec_embedding_backward_tensor(c, &gv, nullptr);
    EXPECT_EQ(bwd, r == 1 ? SHARDREC_ENODEVICE : SHARDREC_EINVAL) << shardrec_last_error();
    int64_t steps = -1;
    ASSERT_EQ(shardrec_embedding_num_steps(c, &steps), SHARDREC_OK);
    EXPECT_EQ(steps, 0);
    const auto after = Snapshot(c, s);
    for (size_t i = 0; i < before.size(); ++i)
      EXPECT_TRUE(BitEqual(before[i], after[i])) << "rank " << r << " tensor " << i;
    gv.device_index = 0;
    EXPECT_EQ(shardrec_embedding_backward_tensor(c, &gv, nullptr), SHARDREC_OK)
        << shardrec_last_error();
    ASSERT_EQ(shardrec_embedding_num_steps(c, &steps), SHARDREC_OK);
    EXPECT_EQ(steps, 1);
  });
}

}  // namespace
}  // namespace shardrec::testing
