// Held-out evaluation of the DLRM example through the public C API: evaluating leaves the model
// untouched (every dense tensor and table bit for bit, and the next training step equals the
// one of a run that never evaluated: optimizer state included), and every rank gets the same
// result.
#include "dlrm_eval.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "dlrm_data.h"
#include "dlrm_model.h"
#include "dlrm_test_model.h"
#include "tests/support/spawn_ranks.h"

namespace {

using dlrm_test::kDense;
using dlrm_test::kDim;
using dlrm_test::kRows;
using dlrm_test::kSparse;
constexpr int kWorld = 4, kShard = 2, kLocal = 16;

// Adam on the dense side and row-wise Adagrad on the tables (the defaults): both keep state
// that a stray step would change.
dlrm_config_t Config() {
  dlrm_config_t c = dlrm_test::SmallConfig(kShard);
  c.local_batch = kLocal;
  c.seed = 3;
  return c;
}

struct TrainedRun {
  std::vector<std::vector<float>> dense, tables;  // after the last step
  std::vector<double> losses;                     // rank 0's, per step
  std::vector<dlrm_eval_result_t> evals;          // per rank
  bool unchanged_by_eval = false;
};

std::vector<std::vector<float>> Dense(dlrm_t* m) {
  std::vector<std::vector<float>> out;
  for (size_t i = 0; i < dlrm_num_dense_tensors(m); ++i) {
    shardrec_dense_param_t t;
    EXPECT_EQ(dlrm_dense_tensor(m, i, &t), SHARDREC_OK);
    out.emplace_back(t.param, t.param + t.count);
  }
  return out;
}

// Collective: every rank gathers every table.
std::vector<std::vector<float>> Tables(dlrm_t* m) {
  std::vector<std::vector<float>> out;
  for (int f = 0; f < kSparse; ++f) {
    std::vector<float> w(static_cast<size_t>(kRows[f] * kDim));
    EXPECT_EQ(shardrec_embedding_get_weights(dlrm_embedding(m), dlrm_table_name(m, f), w.data(),
                                             w.size()),
              SHARDREC_OK)
        << shardrec_last_error();
    out.push_back(std::move(w));
  }
  return out;
}

// Three training steps; with `evaluate`, an evaluation between the second and the third.
TrainedRun Train(bool evaluate) {
  std::vector<shardrec_comm_t*> comms(kWorld);
  shardrec_comm_options_t o = SHARDREC_COMM_OPTIONS_INIT;
  EXPECT_EQ(shardrec_comm_create_local_group(comms.data(), kWorld, &o), SHARDREC_OK);
  TrainedRun run;
  run.evals.resize(kWorld);
  std::vector<int> unchanged(kWorld, 0);
  shardrec::testing::SpawnRanks(kWorld, [&](int r) {
    const dlrm_config_t c = Config();
    const dlrm_synth_t data = {5, kDense, kSparse, kRows};
    dlrm_t* m = nullptr;
    ASSERT_EQ(dlrm_create(&m, &c, comms[r]), SHARDREC_OK) << shardrec_last_error();
    dlrm_eval_set_t set;
    ASSERT_EQ(dlrm_eval_set_alloc(&set, 3, kLocal, kDense, kSparse, 1), 0);
    dlrm_eval_set_synth(&set, &data, DLRM_HELD_OUT_FIRST, r, kWorld);
    std::vector<float> dense(kLocal * kDense), labels(kLocal);
    std::vector<int64_t> ids(kLocal * kSparse);
    for (int step = 0; step < 3; ++step) {
      if (evaluate && step == 2) {
        const auto dense_before = Dense(m);
        const auto tables_before = Tables(m);
        const dlrm_timings_t timings_before = *dlrm_timings(m);
        ASSERT_EQ(dlrm_evaluate(m, comms[r], &set, &run.evals[r]), SHARDREC_OK)
            << shardrec_last_error();
        unchanged[r] = Dense(m) == dense_before && Tables(m) == tables_before &&
                       dlrm_timings(m)->steps == timings_before.steps &&
                       dlrm_timings(m)->input_dist == timings_before.input_dist;
      }
      dlrm_synth_fill(&data, static_cast<uint64_t>((step * kWorld + r) * kLocal), kLocal,
                      dense.data(), ids.data(), labels.data());
      double loss = 0;
      ASSERT_EQ(dlrm_train_step(m, dense.data(), ids.data(), labels.data(), &loss, nullptr),
                SHARDREC_OK)
          << shardrec_last_error();
      if (r == 0) run.losses.push_back(loss);
    }
    auto tables = Tables(m);
    if (r == 0) {
      run.dense = Dense(m);
      run.tables = std::move(tables);
    }
    dlrm_eval_set_free(&set);
    dlrm_destroy(m);
  });
  for (auto* c : comms) shardrec_comm_destroy(c);
  run.unchanged_by_eval = true;
  for (int u : unchanged) run.unchanged_by_eval = run.unchanged_by_eval && u != 0;
  return run;
}

TEST(DlrmEval, EvaluationChangesNothingAndTheNextStepIsTheSame) {
  const TrainedRun with = Train(true);
  const TrainedRun without = Train(false);
  EXPECT_TRUE(with.unchanged_by_eval);
  ASSERT_EQ(with.losses.size(), 3u);
  EXPECT_EQ(with.losses, without.losses);  // bit for bit, the step after the evaluation too
  EXPECT_EQ(with.dense, without.dense);
  EXPECT_EQ(with.tables, without.tables);
  // Every rank scored its slice; all got the whole set's result.
  const dlrm_eval_result_t& e = with.evals[0];
  EXPECT_EQ(e.samples, 3 * kLocal * kWorld);
  EXPECT_TRUE(std::isfinite(e.auc) && e.auc > 0 && e.auc < 1) << e.auc;
  EXPECT_TRUE(std::isfinite(e.logloss) && e.logloss > 0) << e.logloss;
  EXPECT_TRUE(std::isfinite(e.bayes_auc) && e.bayes_auc > 0.5) << e.bayes_auc;
  for (int r = 1; r < kWorld; ++r) {
    EXPECT_EQ(with.evals[r].auc, e.auc);
    EXPECT_EQ(with.evals[r].logloss, e.logloss);
    EXPECT_EQ(with.evals[r].bayes_auc, e.bayes_auc);
  }
}

TEST(DlrmEval, HeldOutSetIsTheWholeRangeSplitAcrossRanks) {
  const dlrm_synth_t data = {5, kDense, kSparse, kRows};
  const int batches = 2, world = 3;
  std::vector<float> all_labels(batches * kLocal * world), all_probs(all_labels.size());
  std::vector<float> all_dense(all_labels.size() * kDense);
  std::vector<int64_t> all_ids(all_labels.size() * kSparse);
  dlrm_synth_fill(&data, DLRM_HELD_OUT_FIRST, static_cast<int>(all_labels.size()), all_dense.data(),
                  all_ids.data(), all_labels.data());
  dlrm_synth_probability(&data, DLRM_HELD_OUT_FIRST, static_cast<int>(all_probs.size()),
                         all_probs.data());
  std::vector<int> seen(all_labels.size(), 0);
  for (int r = 0; r < world; ++r) {
    dlrm_eval_set_t set;
    ASSERT_EQ(dlrm_eval_set_alloc(&set, batches, kLocal, kDense, kSparse, 1), 0);
    dlrm_eval_set_synth(&set, &data, DLRM_HELD_OUT_FIRST, r, world);
    for (int k = 0; k < batches; ++k) {
      for (int i = 0; i < kLocal; ++i) {
        const size_t g = static_cast<size_t>((k * world + r) * kLocal + i);
        const size_t l = static_cast<size_t>(k * kLocal + i);
        seen[g] += 1;
        EXPECT_EQ(set.labels[l], all_labels[g]);
        EXPECT_EQ(set.probs[l], all_probs[g]);
        EXPECT_EQ(set.dense[l * kDense + 1], all_dense[g * kDense + 1]);
        EXPECT_EQ(set.ids[static_cast<size_t>(k * kSparse * kLocal + 2 * kLocal + i)],
                  all_ids[2 * all_labels.size() + g]);
      }
    }
    dlrm_eval_set_free(&set);
  }
  for (int s : seen) EXPECT_EQ(s, 1);
}

}  // namespace
