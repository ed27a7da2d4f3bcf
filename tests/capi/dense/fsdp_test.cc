// The fully sharded variant through the C API, driven layer by layer as a host would (one
// single-layer MLP handle per unit, parameters gathered just in time with prefetch of the next
// unit): it equals DDP with the same optimizer bit for bit in fp32 (same rank-ordered average,
// element-wise optimizer), gathers exactly the parameters the shards hold, and each rank holds
// 1/W of the parameters, gradients and optimizer state.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>

#include "tests/capi/dense/dense_test_util.h"
#include "tests/support/spawn_ranks.h"

namespace shardrec::testing {
namespace {

void MarkReady(size_t tensor, void* user) {
  EXPECT_EQ(shardrec_ddp_mark_ready(static_cast<shardrec_ddp_t*>(user), tensor), SHARDREC_OK)
      << LastError();
}

// Eight units: deep enough that holding every unit's full gradient until the step (instead of
// freeing each once reduced) shows in the peak.
const MlpShape kFsdpShape{32, {64, 64, 64, 64, 64, 64, 64, 1}, 11};
constexpr int kSteps = 3;
constexpr int64_t kLocalBatch = 5;

// Unit l = layer l's weight then bias, flattened.
std::vector<std::vector<float>> Units(const std::vector<std::vector<float>>& tensors) {
  std::vector<std::vector<float>> units;
  for (size_t t = 0; t + 1 < tensors.size(); t += 2) {
    units.push_back(tensors[t]);
    units.back().insert(units.back().end(), tensors[t + 1].begin(), tensors[t + 1].end());
  }
  return units;
}

std::vector<std::vector<float>> TrainDdp(shardrec_comm_t* comm, int rank,
                                         const shardrec_optimizer_config_t& config) {
  MlpPtr mlp = MakeMlp(kFsdpShape);
  const std::vector<int64_t> counts = TensorCounts(mlp.get());
  shardrec_ddp_t* raw = nullptr;
  EXPECT_EQ(shardrec_ddp_create(&raw, comm, counts.data(), counts.size(), nullptr), SHARDREC_OK)
      << LastError();
  DdpPtr ddp(raw);
  shardrec_dense_optimizer_t* oraw = nullptr;
  EXPECT_EQ(shardrec_dense_optimizer_create(&oraw, &config), SHARDREC_OK);
  OptPtr opt(oraw);
  for (int step = 0; step < kSteps; ++step) {
    for (size_t i = 0; i < counts.size(); ++i) {
      float* g = nullptr;
      EXPECT_EQ(shardrec_ddp_grad(ddp.get(), i, &g), SHARDREC_OK);
      EXPECT_EQ(shardrec_mlp_bind_tensor(mlp.get(), i, nullptr, g), SHARDREC_OK);
    }
    EXPECT_EQ(shardrec_ddp_zero_grad(ddp.get()), SHARDREC_OK);
    ForwardBackward(mlp.get(), MakeBatch(kFsdpShape.in, rank * kLocalBatch, kLocalBatch, step),
                    MarkReady, ddp.get());
    EXPECT_EQ(shardrec_ddp_finish(ddp.get()), SHARDREC_OK) << LastError();
    const auto ts = Tensors(mlp.get());
    EXPECT_EQ(shardrec_dense_optimizer_step(opt.get(), ts.data(), ts.size()), SHARDREC_OK);
  }
  return Units(Params(mlp.get()));
}

struct FsdpRank {
  std::vector<std::vector<float>> initial_gathered, final_gathered;
  std::vector<int64_t> offset, count;
  int64_t memory = 0, peak = 0;
};

void TrainFsdp(shardrec_comm_t* comm, int rank, const shardrec_optimizer_config_t& config,
               const std::vector<std::vector<float>>& initial, FsdpRank* out) {
  const int L = static_cast<int>(kFsdpShape.outs.size());
  std::vector<MlpPtr> layers;
  std::vector<int64_t> unit_counts, weights;
  std::vector<const float*> init;
  int64_t in = kFsdpShape.in;
  for (int l = 0; l < L; ++l) {
    const int64_t o = kFsdpShape.outs[l];
    layers.push_back(
        MakeLayer(in, o, l + 1 < L ? SHARDREC_ACTIVATION_RELU : SHARDREC_ACTIVATION_NONE));
    weights.push_back(o * in);
    unit_counts.push_back(o * (in + 1));
    init.push_back(initial[l].data());
    in = o;
  }
  shardrec_fsdp_t* raw = nullptr;
  ASSERT_EQ(shardrec_fsdp_create(&raw, comm, unit_counts.data(), init.data(), init.size(), &config),
            SHARDREC_OK)
      << LastError();
  FsdpPtr fsdp(raw);
  auto gather_all = [&](std::vector<std::vector<float>>* into) {
    for (int l = 0; l < L; ++l) {
      float* p = nullptr;
      ASSERT_EQ(shardrec_fsdp_gather(fsdp.get(), l, l + 1 < L ? l + 1 : -1, &p), SHARDREC_OK)
          << LastError();
      into->emplace_back(p, p + unit_counts[l]);
      ASSERT_EQ(shardrec_fsdp_release(fsdp.get(), l), SHARDREC_OK);
    }
  };
  gather_all(&out->initial_gathered);
  for (int l = 0; l < L; ++l) {
    float* shard = nullptr;
    int64_t offset = -1, count = -1;
    ASSERT_EQ(shardrec_fsdp_shard(fsdp.get(), l, &shard, &offset, &count), SHARDREC_OK);
    out->offset.push_back(offset);
    out->count.push_back(count);
    ASSERT_TRUE(std::equal(shard, shard + count, out->initial_gathered[l].begin() + offset));
  }
  auto bind = [&](int l, float* p, float* g) {
    ASSERT_EQ(shardrec_mlp_bind_tensor(layers[l].get(), 0, p, g), SHARDREC_OK);
    ASSERT_EQ(shardrec_mlp_bind_tensor(layers[l].get(), 1, p + weights[l],
                                       g != nullptr ? g + weights[l] : nullptr),
              SHARDREC_OK);
  };
  for (int step = 0; step < kSteps; ++step) {
    const Batch b = MakeBatch(kFsdpShape.in, rank * kLocalBatch, kLocalBatch, step);
    // Forward: each layer's input stays alive until its backward (dense.h).
    std::vector<std::vector<float>> acts(L + 1);
    acts[0] = b.x;
    for (int l = 0; l < L; ++l) {
      float* p = nullptr;
      ASSERT_EQ(shardrec_fsdp_gather(fsdp.get(), l, l + 1 < L ? l + 1 : -1, &p), SHARDREC_OK);
      bind(l, p, nullptr);
      acts[l + 1].resize(static_cast<size_t>(kLocalBatch * kFsdpShape.outs[l]));
      ASSERT_EQ(shardrec_mlp_forward(layers[l].get(), acts[l].data(), kLocalBatch,
                                     acts[l + 1].data(), static_cast<int64_t>(acts[l + 1].size())),
                SHARDREC_OK);
      ASSERT_EQ(shardrec_fsdp_release(fsdp.get(), l), SHARDREC_OK);
    }
    std::vector<float> dy(static_cast<size_t>(kLocalBatch));
    ASSERT_EQ(shardrec_bce_with_logits(acts[L].data(), b.labels.data(), kLocalBatch,
                                       static_cast<double>(kLocalBatch), nullptr, dy.data()),
              SHARDREC_OK);
    for (int l = L - 1; l >= 0; --l) {
      float *p = nullptr, *g = nullptr;
      ASSERT_EQ(shardrec_fsdp_gather(fsdp.get(), l, l > 0 ? l - 1 : -1, &p), SHARDREC_OK);
      ASSERT_EQ(shardrec_fsdp_grad(fsdp.get(), l, &g), SHARDREC_OK);
      bind(l, p, g);
      std::vector<float> dx(l > 0 ? acts[l].size() : 0);
      ASSERT_EQ(shardrec_mlp_backward(layers[l].get(), dy.data(), l > 0 ? dx.data() : nullptr,
                                      nullptr, nullptr),
                SHARDREC_OK);
      ASSERT_EQ(shardrec_fsdp_reduce_grad(fsdp.get(), l), SHARDREC_OK) << LastError();
      ASSERT_EQ(shardrec_fsdp_release(fsdp.get(), l), SHARDREC_OK);
      dy.swap(dx);
    }
    ASSERT_EQ(shardrec_fsdp_step(fsdp.get()), SHARDREC_OK) << LastError();
  }
  ASSERT_EQ(shardrec_fsdp_memory(fsdp.get(), &out->memory, &out->peak), SHARDREC_OK);
  gather_all(&out->final_gathered);
}

class CapiFsdp : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(shardrec_dense_set_blas_threads(1), SHARDREC_OK); }
};

TEST_F(CapiFsdp, EqualsDdpBitForBitAndHoldsOneWthPerRank) {
  for (int world : {2, 3}) {
    SCOPED_TRACE(::testing::Message() << "world " << world);
    const shardrec_optimizer_config_t config = AdamConfig(0.01f);
    MlpPtr reference = MakeMlp(kFsdpShape);
    const std::vector<std::vector<float>> initial = Units(Params(reference.get()));
    auto comms = LocalGroup(world);
    std::vector<std::vector<std::vector<float>>> ddp(world);
    std::vector<FsdpRank> fsdp(world);
    SpawnRanks(world, [&](int r) {
      ddp[r] = TrainDdp(comms[r].get(), r, config);
      TrainFsdp(comms[r].get(), r, config, initial, &fsdp[r]);
    });
    int64_t total = 0, largest = 0;
    for (const auto& u : initial) {
      total += static_cast<int64_t>(u.size());
      largest = std::max(largest, static_cast<int64_t>(u.size()));
    }
    int64_t memory_sum = 0;
    for (int r = 0; r < world; ++r) {
      ASSERT_EQ(fsdp[r].initial_gathered, initial) << "rank " << r;
      ASSERT_EQ(fsdp[r].final_gathered.size(), ddp[r].size());
      for (size_t u = 0; u < ddp[r].size(); ++u) {
        ASSERT_EQ(fsdp[r].final_gathered[u].size(), ddp[r][u].size());
        EXPECT_EQ(0, std::memcmp(fsdp[r].final_gathered[u].data(), ddp[r][u].data(),
                                 4 * ddp[r][u].size()))
            << "rank " << r << " unit " << u;
        EXPECT_NE(ddp[r][u], initial[u]);  // trained
        // Blocks of ceil(n / W) in rank order.
        const int64_t n = static_cast<int64_t>(initial[u].size()), block = (n + world - 1) / world;
        EXPECT_EQ(fsdp[r].offset[u], std::min<int64_t>(r * block, n));
        EXPECT_EQ(fsdp[r].count[u], std::min<int64_t>(block, n - fsdp[r].offset[u]));
      }
      // Between steps a rank holds its shards of parameters and gradients and two Adam moments:
      // 16 bytes per element it owns, 1/W of the whole.
      int64_t owned = 0;
      for (int64_t c : fsdp[r].count) owned += c;
      EXPECT_EQ(fsdp[r].memory, 16 * owned);
      memory_sum += fsdp[r].memory;
      // Peak, in the backward: plus the unit in use and its prefetched neighbour (parameters),
      // its gradient and the previous unit's gradient still being reduced (the single worker
      // runs gathers and reductions in order, so gathering a unit waits out every reduction but
      // the last). Never the whole model's gradient.
      EXPECT_GE(fsdp[r].peak, fsdp[r].memory);
      EXPECT_LE(fsdp[r].peak, fsdp[r].memory + 4 * 4 * largest);
      EXPECT_LT(fsdp[r].peak, 16 * total);  // DDP's footprint of the same model and optimizer
    }
    EXPECT_EQ(memory_sum, 16 * total);
  }
}

}  // namespace
}  // namespace shardrec::testing
