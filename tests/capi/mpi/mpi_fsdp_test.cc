// The fully sharded (FSDP) dense variant on the MPI backend, one rank per process: the same
// training on a Gloo group of threads inside this process gives the same bits, because FSDP
// only gathers (a copy) and reduce-scatters (rank-ordered on both backends, docs/mpi.md).
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "tests/capi/dense/dense_test_util.h"
#include "tests/capi/mpi/mpi_test_world.h"
#include "tests/support/spawn_ranks.h"

namespace shardrec::testing {
namespace {

const MlpShape kShape{24, {40, 40, 1}, 5};
// A first unit of 10923 x 25 floats (1.04 MiB): its gradient's reduce-scatter is large enough
// for the direct reads of same-host peers' memory (docs/mpi.md).
const MlpShape kWide{24, {10923, 1}, 5};
constexpr int kSteps = 3;
constexpr int64_t kLocalBatch = 4;

// Unit l = layer l's weight then bias, flattened.
std::vector<std::vector<float>> Units(const std::vector<std::vector<float>>& tensors) {
  std::vector<std::vector<float>> units;
  for (size_t t = 0; t + 1 < tensors.size(); t += 2) {
    units.push_back(tensors[t]);
    units.back().insert(units.back().end(), tensors[t + 1].begin(), tensors[t + 1].end());
  }
  return units;
}

// Trains `shape` one unit per layer through shardrec_fsdp_* as rank `rank` of `comm` (this rank
// reads samples [rank*b, (rank+1)*b) of each step) and returns every unit's full parameters.
std::vector<std::vector<float>> TrainFsdp(const MlpShape& shape, shardrec_comm_t* comm, int rank,
                                          const std::vector<std::vector<float>>& initial) {
  const int L = static_cast<int>(shape.outs.size());
  std::vector<MlpPtr> layers;
  std::vector<int64_t> unit_counts, weights;
  std::vector<const float*> init;
  int64_t in = shape.in;
  for (int l = 0; l < L; ++l) {
    const int64_t o = shape.outs[l];
    layers.push_back(
        MakeLayer(in, o, l + 1 < L ? SHARDREC_ACTIVATION_RELU : SHARDREC_ACTIVATION_NONE));
    weights.push_back(o * in);
    unit_counts.push_back(o * (in + 1));
    init.push_back(initial[l].data());
    in = o;
  }
  const shardrec_optimizer_config_t config = AdamConfig(0.01f);
  shardrec_fsdp_t* raw = nullptr;
  EXPECT_EQ(shardrec_fsdp_create(&raw, comm, unit_counts.data(), init.data(), init.size(), &config),
            SHARDREC_OK)
      << LastError();
  FsdpPtr fsdp(raw);
  std::vector<std::vector<float>> out;
  if (!fsdp) return out;
  auto bind = [&](int l, float* p, float* g) {
    EXPECT_EQ(shardrec_mlp_bind_tensor(layers[l].get(), 0, p, g), SHARDREC_OK);
    EXPECT_EQ(shardrec_mlp_bind_tensor(layers[l].get(), 1, p + weights[l],
                                       g != nullptr ? g + weights[l] : nullptr),
              SHARDREC_OK);
  };
  for (int step = 0; step < kSteps; ++step) {
    const Batch b = MakeBatch(shape.in, rank * kLocalBatch, kLocalBatch, step);
    std::vector<std::vector<float>> acts(L + 1);
    acts[0] = b.x;
    for (int l = 0; l < L; ++l) {
      float* p = nullptr;
      EXPECT_EQ(shardrec_fsdp_gather(fsdp.get(), l, l + 1 < L ? l + 1 : -1, &p), SHARDREC_OK)
          << LastError();
      bind(l, p, nullptr);
      acts[l + 1].resize(static_cast<size_t>(kLocalBatch * shape.outs[l]));
      EXPECT_EQ(shardrec_mlp_forward(layers[l].get(), acts[l].data(), kLocalBatch,
                                     acts[l + 1].data(), static_cast<int64_t>(acts[l + 1].size())),
                SHARDREC_OK);
      EXPECT_EQ(shardrec_fsdp_release(fsdp.get(), l), SHARDREC_OK);
    }
    std::vector<float> dy(static_cast<size_t>(kLocalBatch));
    EXPECT_EQ(shardrec_bce_with_logits(acts[L].data(), b.labels.data(), kLocalBatch,
                                       static_cast<double>(kLocalBatch), nullptr, dy.data()),
              SHARDREC_OK);
    for (int l = L - 1; l >= 0; --l) {
      float *p = nullptr, *g = nullptr;
      EXPECT_EQ(shardrec_fsdp_gather(fsdp.get(), l, l > 0 ? l - 1 : -1, &p), SHARDREC_OK);
      EXPECT_EQ(shardrec_fsdp_grad(fsdp.get(), l, &g), SHARDREC_OK);
      bind(l, p, g);
      std::vector<float> dx(l > 0 ? acts[l].size() : 0);
      EXPECT_EQ(shardrec_mlp_backward(layers[l].get(), dy.data(), l > 0 ? dx.data() : nullptr,
                                      nullptr, nullptr),
                SHARDREC_OK);
      EXPECT_EQ(shardrec_fsdp_reduce_grad(fsdp.get(), l), SHARDREC_OK) << LastError();
      EXPECT_EQ(shardrec_fsdp_release(fsdp.get(), l), SHARDREC_OK);
      dy.swap(dx);
    }
    EXPECT_EQ(shardrec_fsdp_step(fsdp.get()), SHARDREC_OK) << LastError();
  }
  for (int l = 0; l < L; ++l) {
    float* p = nullptr;
    EXPECT_EQ(shardrec_fsdp_gather(fsdp.get(), l, -1, &p), SHARDREC_OK) << LastError();
    out.emplace_back(p, p + unit_counts[l]);
    EXPECT_EQ(shardrec_fsdp_release(fsdp.get(), l), SHARDREC_OK);
  }
  return out;
}

void ExpectFsdpBitIdenticalToGloo(const MlpShape& shape) {
  const int32_t world = MpiSize(), r = MpiRank();
  ASSERT_EQ(shardrec_dense_set_blas_threads(1), SHARDREC_OK);
  MlpPtr model = MakeMlp(shape);  // the same seeded initial parameters on every rank
  const std::vector<std::vector<float>> initial = Units(Params(model.get()));
  const std::vector<std::vector<float>> on_mpi = TrainFsdp(shape, MpiWorld(), r, initial);

  // The reference: the whole world as threads of this process on Gloo; this rank's copy.
  auto group = LocalGroup(world);
  std::vector<std::vector<std::vector<float>>> on_gloo(world);
  SpawnRanks(world, [&](int q) { on_gloo[q] = TrainFsdp(shape, group[q].get(), q, initial); });

  ASSERT_EQ(on_mpi.size(), initial.size());
  ASSERT_EQ(on_gloo[r].size(), initial.size());
  for (size_t u = 0; u < initial.size(); ++u) {
    ASSERT_EQ(on_mpi[u].size(), on_gloo[r][u].size());
    EXPECT_EQ(0, std::memcmp(on_mpi[u].data(), on_gloo[r][u].data(), 4 * on_mpi[u].size()))
        << "rank " << r << " unit " << u;
    EXPECT_NE(on_mpi[u], initial[u]) << "unit " << u << " was not trained";
  }
}

TEST_F(MpiTest, FsdpTrainingIsBitIdenticalToTheSameRunOnGloo) {
  ExpectFsdpBitIdenticalToGloo(kShape);
}

TEST_F(MpiTest, FsdpWideUnitsAreBitIdenticalToTheSameRunOnGloo) {
  ExpectFsdpBitIdenticalToGloo(kWide);
}

}  // namespace
}  // namespace shardrec::testing
