// A short run of the DLRM example's model learns: 2D training (4 ranks as threads = 2 replica
// groups x 2-way sharding) on the synthetic Criteo-shaped stream, with the example's default
// model, raises the held-out AUC above a threshold taken from the generator itself.
//
// The threshold: the generator's own click probabilities score the held-out set with the
// Bayes-optimal AUC (about 0.81 here); no model does better in expectation, and a model that
// learned nothing scores 0.5. A short run is asked to close 60% of that gap, 0.5 + 0.6 * (Bayes
// - 0.5) (about 0.68): 60 steps of 1024 samples reach about 0.71, while the untrained model
// scores about 0.53, so the check fails when training does not move the model the right way.
#include <gtest/gtest.h>

#include <cstdio>
#include <vector>

#include "dlrm_data.h"
#include "dlrm_eval.h"
#include "dlrm_model.h"
#include "tests/support/spawn_ranks.h"

namespace {

constexpr int kWorld = 4, kShard = 2, kBatch = 256, kSteps = 60, kEvalBatches = 8;

TEST(DlrmLearns, ShortTwoDimensionalRunReachesAFractionOfTheBayesOptimalAuc) {
  int64_t rows[26];
  for (int f = 0; f < 26; ++f) rows[f] = kCriteoRows[f] < 100000 ? kCriteoRows[f] : 100000;
  std::vector<shardrec_comm_t*> comms(kWorld);
  shardrec_comm_options_t o = SHARDREC_COMM_OPTIONS_INIT;
  ASSERT_EQ(shardrec_comm_create_local_group(comms.data(), kWorld, &o), SHARDREC_OK);
  shardrec_dense_set_blas_threads(1);
  std::vector<dlrm_eval_result_t> before(kWorld), after(kWorld);
  std::vector<double> first_loss(kWorld), last_loss(kWorld);
  shardrec::testing::SpawnRanks(kWorld, [&](int r) {
    dlrm_config_t c;
    dlrm_config_defaults(&c);
    c.rows = rows;
    c.shard_size = kShard;
    c.local_batch = kBatch;
    c.seed = 7;
    const dlrm_synth_t data = {7, 13, 26, rows};
    dlrm_t* m = nullptr;
    ASSERT_EQ(dlrm_create(&m, &c, comms[r]), SHARDREC_OK) << shardrec_last_error();
    dlrm_eval_set_t set;
    ASSERT_EQ(dlrm_eval_set_alloc(&set, kEvalBatches, kBatch, 13, 26, 1), 0);
    dlrm_eval_set_synth(&set, &data, DLRM_HELD_OUT_FIRST, r, kWorld);
    ASSERT_EQ(dlrm_evaluate(m, comms[r], &set, &before[r]), SHARDREC_OK) << shardrec_last_error();
    std::vector<float> dense(kBatch * 13), labels(kBatch);
    std::vector<int64_t> ids(kBatch * 26);
    for (int step = 0; step < kSteps; ++step) {
      dlrm_synth_fill(&data, static_cast<uint64_t>((step * kWorld + r) * kBatch), kBatch,
                      dense.data(), ids.data(), labels.data());
      double loss = 0;
      ASSERT_EQ(dlrm_train_step(m, dense.data(), ids.data(), labels.data(), &loss, nullptr),
                SHARDREC_OK)
          << shardrec_last_error();
      if (step == 0) first_loss[r] = loss;
      last_loss[r] = loss;
    }
    ASSERT_EQ(dlrm_evaluate(m, comms[r], &set, &after[r]), SHARDREC_OK) << shardrec_last_error();
    dlrm_eval_set_free(&set);
    dlrm_destroy(m);
  });
  for (auto* comm : comms) shardrec_comm_destroy(comm);
  const double bayes = after[0].bayes_auc;
  const double threshold = 0.5 + 0.6 * (bayes - 0.5);
  std::printf(
      "held-out AUC %.4f at step 0, %.4f after %d steps; Bayes-optimal %.4f; threshold %.4f\n"
      "held-out log loss %.4f -> %.4f (Bayes-optimal %.4f); %lld samples\n",
      before[0].auc, after[0].auc, kSteps, bayes, threshold, before[0].logloss, after[0].logloss,
      after[0].bayes_logloss, static_cast<long long>(after[0].samples));
  EXPECT_EQ(after[0].samples, kEvalBatches * kBatch * kWorld);
  // The generator has a signal worth learning, and the Bayes scores are the same set's.
  EXPECT_GT(bayes, 0.7);
  EXPECT_EQ(before[0].bayes_auc, bayes);
  EXPECT_GE(after[0].auc, threshold);
  EXPECT_GT(after[0].auc, before[0].auc);
  EXPECT_LT(after[0].logloss, before[0].logloss);
  // No model beats the generator's own probabilities by more than sampling noise.
  EXPECT_LT(after[0].auc, bayes + 0.01);
  EXPECT_GT(after[0].logloss, after[0].bayes_logloss - 0.01);
  for (int r = 0; r < kWorld; ++r) EXPECT_LT(last_loss[r], first_loss[r]) << "rank " << r;
}

}  // namespace
