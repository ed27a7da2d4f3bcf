// The whole model through the public C API: the DLRM of examples/dlrm trained with SGD in 2D
// (4 ranks = 2 replica groups x 2-way sharding), in 1D and on one rank equals a plain,
// unsharded DLRM written here with loops in double precision, trained on the global batch; the
// DCN-v2 variant in 2D equals itself on one rank.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "dlrm_data.h"
#include "dlrm_model.h"
#include "dlrm_test_model.h"
#include "tests/support/spawn_ranks.h"

namespace {

using dlrm_test::kBottom;
using dlrm_test::kDense;
using dlrm_test::kDim;
using dlrm_test::kRows;
using dlrm_test::kSparse;
using dlrm_test::kTop;
constexpr int kLocal = 8, kSteps = 3;
constexpr float kLr = 0.1f;

dlrm_config_t Config(int shard, int interaction) {
  dlrm_config_t c = dlrm_test::SmallConfig(shard);
  c.interaction = interaction;
  c.dcn_layers = 2;
  c.dcn_rank = 3;
  c.sparse_optimizer.type = SHARDREC_OPTIMIZER_SGD;
  c.sparse_optimizer.learning_rate = kLr;
  c.dense_optimizer.type = SHARDREC_OPTIMIZER_SGD;
  c.dense_optimizer.learning_rate = kLr;
  c.seed = 11;
  c.first_bucket_bytes = 64;  // several buckets
  c.bucket_cap_bytes = 256;
  return c;
}

dlrm_synth_t Data() {
  dlrm_synth_t s;
  s.seed = 5;
  s.num_dense = kDense;
  s.num_sparse = kSparse;
  s.rows = kRows;
  return s;
}

// Everything a run ends with: dense tensors by name order and every table.
struct Snapshot {
  std::vector<std::vector<float>> dense;
  std::vector<std::vector<float>> tables;
  std::vector<double> losses;  // mean over the global batch, per step
};

// Trains the model on `world` ranks (threads) with sharding groups of `shard`; returns rank
// 0's view (the replicas are checked to agree on the dense side).
Snapshot Train(int world, int shard, int interaction, Snapshot* initial = nullptr) {
  std::vector<shardrec_comm_t*> comms(world);
  shardrec_comm_options_t o = SHARDREC_COMM_OPTIONS_INIT;
  EXPECT_EQ(shardrec_comm_create_local_group(comms.data(), world, &o), SHARDREC_OK);
  std::vector<Snapshot> snaps(world);
  std::vector<std::vector<double>> losses(world, std::vector<double>(kSteps));
  const int B = kLocal * 4 / world;  // the global batch is always 32 samples
  shardrec::testing::SpawnRanks(world, [&](int r) {
    dlrm_config_t c = Config(shard, interaction);
    c.local_batch = B;
    dlrm_t* m = nullptr;
    ASSERT_EQ(dlrm_create(&m, &c, comms[r]), SHARDREC_OK) << shardrec_last_error();
    auto snapshot = [&](Snapshot* s) {
      s->dense.clear();
      s->tables.clear();
      for (size_t i = 0; i < dlrm_num_dense_tensors(m); ++i) {
        shardrec_dense_param_t t;
        ASSERT_EQ(dlrm_dense_tensor(m, i, &t), SHARDREC_OK);
        s->dense.emplace_back(t.param, t.param + t.count);
      }
      for (int f = 0; f < kSparse; ++f) {
        std::vector<float> w(static_cast<size_t>(kRows[f] * kDim));
        ASSERT_EQ(shardrec_embedding_get_weights(dlrm_embedding(m), dlrm_table_name(m, f), w.data(),
                                                 w.size()),
                  SHARDREC_OK)
            << shardrec_last_error();
        s->tables.push_back(std::move(w));
      }
    };
    // Gathering a table is collective: every rank snapshots, rank 0's copy is kept.
    if (initial != nullptr) {
      Snapshot mine;
      snapshot(&mine);
      if (r == 0) *initial = std::move(mine);
    }
    const dlrm_synth_t data = Data();
    std::vector<float> dense(B * kDense), labels(B);
    std::vector<int64_t> ids(B * kSparse);
    for (int step = 0; step < kSteps; ++step) {
      dlrm_synth_fill(&data, static_cast<uint64_t>(step * 32 + r * B), B, dense.data(), ids.data(),
                      labels.data());
      double loss = 0;
      ASSERT_EQ(dlrm_train_step(m, dense.data(), ids.data(), labels.data(), &loss, nullptr),
                SHARDREC_OK)
          << shardrec_last_error();
      losses[r][step] = loss;
    }
    snapshot(&snaps[r]);
    dlrm_destroy(m);
  });
  for (auto* c : comms) shardrec_comm_destroy(c);
  for (int r = 1; r < world; ++r) EXPECT_EQ(snaps[r].dense, snaps[0].dense) << "rank " << r;
  for (int step = 0; step < kSteps; ++step) {
    double sum = 0;
    for (int r = 0; r < world; ++r) sum += losses[r][step];
    snaps[0].losses.push_back(sum / world);
  }
  return snaps[0];
}

// ---- The plain reference: one model, the global batch, double precision. ------------------

struct Layer {
  int in, out;
  bool relu;
  std::vector<double> w, b;
};

struct Ref {
  std::vector<Layer> bottom, top;
  std::vector<std::vector<double>> tables;
};

std::vector<double> ToDouble(const std::vector<float>& v) { return {v.begin(), v.end()}; }

Ref FromSnapshot(const Snapshot& s) {
  Ref ref;
  const int64_t bottom_in[] = {kDense, kBottom[0]};
  for (int l = 0; l < 2; ++l) {
    ref.bottom.push_back({static_cast<int>(bottom_in[l]), static_cast<int>(kBottom[l]), l == 0,
                          ToDouble(s.dense[2 * l]), ToDouble(s.dense[2 * l + 1])});
  }
  const int64_t inter = kDim + kSparse * (kSparse + 1) / 2;
  const int64_t top_in[] = {inter, kTop[0]};
  for (int l = 0; l < 2; ++l) {
    ref.top.push_back({static_cast<int>(top_in[l]), static_cast<int>(kTop[l]), l == 0,
                       ToDouble(s.dense[4 + 2 * l]), ToDouble(s.dense[4 + 2 * l + 1])});
  }
  for (const auto& t : s.tables) ref.tables.push_back(ToDouble(t));
  return ref;
}

// Forward of one layer for one sample; keeps the output.
std::vector<double> Apply(const Layer& L, const std::vector<double>& x) {
  std::vector<double> y(L.out);
  for (int o = 0; o < L.out; ++o) {
    double z = L.b[o];
    for (int i = 0; i < L.in; ++i) z += L.w[o * L.in + i] * x[i];
    y[o] = L.relu ? std::max(z, 0.0) : z;
  }
  return y;
}

// Backward of one layer for one sample: accumulates dw, db; returns dx.
std::vector<double> Back(const Layer& L, const std::vector<double>& x, const std::vector<double>& y,
                         std::vector<double> dy, std::vector<double>* dw, std::vector<double>* db) {
  std::vector<double> dx(L.in, 0.0);
  for (int o = 0; o < L.out; ++o) {
    if (L.relu && y[o] <= 0) dy[o] = 0;
    (*db)[o] += dy[o];
    for (int i = 0; i < L.in; ++i) {
      (*dw)[o * L.in + i] += dy[o] * x[i];
      dx[i] += dy[o] * L.w[o * L.in + i];
    }
  }
  return dx;
}

double RefStep(Ref* ref, const std::vector<float>& dense, const std::vector<int64_t>& ids,
               const std::vector<float>& labels, int n) {
  std::vector<std::vector<double>> dbw, dbb, dtw, dtb;
  for (auto& L : ref->bottom) {
    dbw.emplace_back(L.w.size(), 0.0);
    dbb.emplace_back(L.b.size(), 0.0);
  }
  for (auto& L : ref->top) {
    dtw.emplace_back(L.w.size(), 0.0);
    dtb.emplace_back(L.b.size(), 0.0);
  }
  std::vector<std::vector<double>> dtables;
  for (auto& t : ref->tables) dtables.emplace_back(t.size(), 0.0);
  double loss = 0;
  for (int s = 0; s < n; ++s) {
    std::vector<double> x(dense.begin() + s * kDense, dense.begin() + (s + 1) * kDense);
    auto h = Apply(ref->bottom[0], x);
    auto z0 = Apply(ref->bottom[1], h);
    std::vector<std::vector<double>> z = {z0};
    for (int f = 0; f < kSparse; ++f) {
      const int64_t id = ids[f * n + s];
      z.emplace_back(ref->tables[f].begin() + id * kDim, ref->tables[f].begin() + (id + 1) * kDim);
    }
    std::vector<double> inter(z0);
    for (int i = 1; i <= kSparse; ++i) {
      for (int j = 0; j < i; ++j) {
        double d = 0;
        for (int k = 0; k < kDim; ++k) d += z[i][k] * z[j][k];
        inter.push_back(d);
      }
    }
    auto t1 = Apply(ref->top[0], inter);
    auto logit = Apply(ref->top[1], t1);
    const double p = 1 / (1 + std::exp(-logit[0])), y = labels[s];
    loss += -(y * std::log(p) + (1 - y) * std::log(1 - p)) / n;
    auto dt1 = Back(ref->top[1], t1, logit, {(p - y) / n}, &dtw[1], &dtb[1]);
    auto dinter = Back(ref->top[0], inter, t1, dt1, &dtw[0], &dtb[0]);
    std::vector<std::vector<double>> dz(kSparse + 1, std::vector<double>(kDim, 0.0));
    for (int k = 0; k < kDim; ++k) dz[0][k] = dinter[k];
    int pos = kDim;
    for (int i = 1; i <= kSparse; ++i) {
      for (int j = 0; j < i; ++j, ++pos) {
        for (int k = 0; k < kDim; ++k) {
          dz[i][k] += dinter[pos] * z[j][k];
          dz[j][k] += dinter[pos] * z[i][k];
        }
      }
    }
    for (int f = 0; f < kSparse; ++f) {
      const int64_t id = ids[f * n + s];
      for (int k = 0; k < kDim; ++k) dtables[f][id * kDim + k] += dz[f + 1][k];
    }
    auto dh = Back(ref->bottom[1], h, z0, dz[0], &dbw[1], &dbb[1]);
    Back(ref->bottom[0], x, h, dh, &dbw[0], &dbb[0]);
  }
  auto sgd = [](std::vector<double>& p, const std::vector<double>& g) {
    for (size_t i = 0; i < p.size(); ++i) p[i] -= static_cast<double>(kLr) * g[i];
  };
  for (int l = 0; l < 2; ++l) {
    sgd(ref->bottom[l].w, dbw[l]);
    sgd(ref->bottom[l].b, dbb[l]);
    sgd(ref->top[l].w, dtw[l]);
    sgd(ref->top[l].b, dtb[l]);
  }
  for (int f = 0; f < kSparse; ++f) sgd(ref->tables[f], dtables[f]);
  return loss;
}

void ExpectClose(const std::vector<float>& got, const std::vector<double>& want,
                 const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], 2e-5 * (1 + std::fabs(want[i]))) << what << " [" << i << "]";
  }
}

void ExpectMatchesReference(int world, int shard) {
  Snapshot initial;
  const Snapshot got = Train(world, shard, DLRM_INTERACTION_DOT, &initial);
  Ref ref = FromSnapshot(initial);
  const dlrm_synth_t data = Data();
  std::vector<float> dense(32 * kDense), labels(32);
  std::vector<int64_t> ids(32 * kSparse);
  for (int step = 0; step < kSteps; ++step) {
    dlrm_synth_fill(&data, static_cast<uint64_t>(step * 32), 32, dense.data(), ids.data(),
                    labels.data());
    const double loss = RefStep(&ref, dense, ids, labels, 32);
    EXPECT_NEAR(got.losses[step], loss, 1e-5 * (1 + loss)) << "step " << step;
  }
  for (int l = 0; l < 2; ++l) {
    ExpectClose(got.dense[2 * l], ref.bottom[l].w, "bottom weight " + std::to_string(l));
    ExpectClose(got.dense[2 * l + 1], ref.bottom[l].b, "bottom bias " + std::to_string(l));
    ExpectClose(got.dense[4 + 2 * l], ref.top[l].w, "top weight " + std::to_string(l));
    ExpectClose(got.dense[4 + 2 * l + 1], ref.top[l].b, "top bias " + std::to_string(l));
  }
  for (int f = 0; f < kSparse; ++f)
    ExpectClose(got.tables[f], ref.tables[f], "table " + std::to_string(f));
  // The model moved: the comparison is not of initial values.
  EXPECT_NE(got.dense[0], initial.dense[0]);
  EXPECT_NE(got.tables[2], initial.tables[2]);
}

TEST(DlrmExact, TwoDimensionalFourRanksEqualsThePlainModelOnTheGlobalBatch) {
  ExpectMatchesReference(4, 2);
}

TEST(DlrmExact, OneDimensionalFourRanksEqualsThePlainModel) { ExpectMatchesReference(4, 4); }

TEST(DlrmExact, OneRankEqualsThePlainModel) { ExpectMatchesReference(1, 1); }

TEST(DlrmExact, DcnTwoDimensionalEqualsOneRank) {
  const Snapshot a = Train(4, 2, DLRM_INTERACTION_DCN);
  const Snapshot b = Train(1, 1, DLRM_INTERACTION_DCN);
  ASSERT_EQ(a.dense.size(), b.dense.size());
  for (size_t t = 0; t < a.dense.size(); ++t) {
    ExpectClose(a.dense[t], ToDouble(b.dense[t]), "dense tensor " + std::to_string(t));
  }
  for (int f = 0; f < kSparse; ++f) {
    ExpectClose(a.tables[f], ToDouble(b.tables[f]), "table " + std::to_string(f));
  }
  for (int s = 0; s < kSteps; ++s) EXPECT_NEAR(a.losses[s], b.losses[s], 1e-5);
}

}  // namespace
