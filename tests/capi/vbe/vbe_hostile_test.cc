// Hostile VBE views at world 2 (docs/variable-batch.md, "Validation"): NULL arrays with nonzero
// counts and sizes whose sums or products overflow, given by one rank while its peer's view is
// good, through forward_vbe and through the pipelined input_dist_start_vbe. Each is SHARDREC_EINVAL
// on both ranks, the refusing rank's message says what is wrong and the peer's names that rank,
// nothing changes (weights, states, step count), and the next good step trains. "weights_null" is
// the regression test of a defect fuzz_vbe found: with inverse indices that skip a bag holding
// ids, a NULL weights array with a nonzero count was trained as an unweighted batch.
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tests/capi/vbe/vbe_test_util.h"
#include "tests/support/spawn_ranks.h"

namespace shardrec::testing {
namespace {

constexpr int64_t kHuge = int64_t{1} << 62;

struct HostileCase {
  std::string name;
  std::function<void(VbeBatchData*, shardrec_kjt_vbe_view_t*)> spoil;
  std::string message;  // in the refusing rank's error
};

std::vector<HostileCase> Cases() {
  return {
      {"lengths_null", [](VbeBatchData*, shardrec_kjt_vbe_view_t* v) { v->kjt.lengths = nullptr; },
       "lengths is NULL"},
      {"values_null",
       [](VbeBatchData* d, shardrec_kjt_vbe_view_t* v) {
         d->lengths.assign(d->lengths.size(), 0);  // one id, so that num_values is not 0
         d->lengths[0] = 1;
         v->kjt.values = nullptr;
         v->kjt.num_values = 1;
       },
       "values is NULL but num_values is 1"},
      {"weights_null", [](VbeBatchData*, shardrec_kjt_vbe_view_t* v) { v->kjt.num_weights = 1; },
       "weights is NULL but num_weights is 1"},
      {"inverse_null",
       [](VbeBatchData*, shardrec_kjt_vbe_view_t* v) { v->inverse_indices = nullptr; },
       "inverse_indices is NULL but num_inverse_indices is"},
      {"sizes_null",
       [](VbeBatchData*, shardrec_kjt_vbe_view_t* v) {
         v->feature_batch_sizes = nullptr;
         v->inverse_indices = nullptr;
         v->num_inverse_indices = 0;
       },
       "feature_batch_sizes is NULL"},
      // Four sizes of 2^62: their sum wraps to 0 in 64 bits, which num_lengths 0 would match.
      {"sizes_sum_wraps",
       [](VbeBatchData* d, shardrec_kjt_vbe_view_t* v) {
         d->sizes.assign(d->sizes.size(), kHuge);
         v->kjt.lengths = nullptr;
         v->kjt.num_lengths = 0;
         v->inverse_indices = nullptr;
         v->num_inverse_indices = 0;
         v->kjt.batch_size = kHuge;
       },
       "sum overflows"},
      {"size_huge_lengths_null",
       [](VbeBatchData* d, shardrec_kjt_vbe_view_t* v) {
         d->sizes.assign(d->sizes.size(), 0);
         d->sizes[1] = kHuge;
         v->kjt.lengths = nullptr;
         v->kjt.num_lengths = static_cast<size_t>(kHuge);
         v->inverse_indices = nullptr;
         v->num_inverse_indices = 0;
         v->kjt.batch_size = kHuge;
       },
       "overflows"},
      // F x B wraps: four features of 2^62 samples each.
      {"inverse_count_wraps",
       [](VbeBatchData*, shardrec_kjt_vbe_view_t* v) {
         v->kjt.batch_size = kHuge;
         v->num_inverse_indices = 0;
       },
       "num_features * batch_size overflows"},
  };
}

// A good batch with inverse indices, every feature with bags.
VbeBatchData GoodBatch(const Scenario& s, int rank) {
  for (uint64_t seed = 40 + static_cast<uint64_t>(rank) * 100;; ++seed) {
    VbeBatchData v = MakeVbeBatch(seed, IdRanges(s), VbeMode::kInverse, false, 2);
    bool bags = v.batch_size >= 2;
    for (int64_t b : v.sizes) bags = bags && b >= 1;
    if (bags) return v;
  }
}

shardrec_status_t Forward(shardrec_embedding_t* c, const shardrec_kjt_vbe_view_t* v, float* out,
                          size_t len, bool pipelined) {
  if (!pipelined) return shardrec_embedding_forward_vbe(c, v, out, len, nullptr);
  shardrec_status_t rc = shardrec_embedding_input_dist_start_vbe(c, v, nullptr);
  if (rc != SHARDREC_OK) return rc;
  rc = shardrec_embedding_input_dist_wait(c, nullptr);
  if (rc != SHARDREC_OK) return rc;
  return shardrec_embedding_forward_distributed(c, out, len, nullptr);
}

TEST(VbeHostile, NullArraysAndOverflowingSizesAreRefusedOnBothRanks) {
  for (const int32_t pooling : {SHARDREC_POOLING_SUM, SHARDREC_POOLING_NONE}) {
    Scenario s = StandardScenario(2, SHARDREC_SHARDING_ROW_WISE, pooling);
    PlanPtr plan = MakePlan(s);
    ASSERT_NE(plan, nullptr);
    const shardrec_optimizer_config_t opt = ToCOptimizer(s.optimizer);
    int round = 0;
    for (const HostileCase& c : Cases()) {
      for (const bool pipelined : {false, true}) {
        const int bad = round++ % 2;  // the refusing rank alternates
        SCOPED_TRACE(c.name + (pipelined ? " pipelined" : "") + " pooling " +
                     std::to_string(pooling) + " bad rank " + std::to_string(bad));
        SpawnRanks(2, [&](int r) {
          shardrec_embedding_t* cc = nullptr;
          ASSERT_EQ(shardrec_embedding_create(&cc, plan.get(), GroupComm(2, r), &opt, nullptr),
                    SHARDREC_OK);
          CollPtr coll(cc);
          const auto before = Snapshot(cc, s);
          const VbeBatchData good = GoodBatch(s, r);
          const shardrec_kjt_vbe_view_t good_view = good.View();
          size_t len = 0;
          ASSERT_EQ(shardrec_embedding_vbe_output_len(cc, &good_view, &len), SHARDREC_OK);
          VbeBatchData hostile = good;
          shardrec_kjt_vbe_view_t view = hostile.View();
          if (r == bad) {
            c.spoil(&hostile, &view);
            if (view.feature_batch_sizes != nullptr)
              view.feature_batch_sizes = hostile.sizes.data();
            if (view.kjt.lengths != nullptr) view.kjt.lengths = hostile.lengths.data();
            // What vbe_output_len refuses, the forward refuses too.
            size_t hostile_len = 0;
            if (shardrec_embedding_vbe_output_len(cc, &view, &hostile_len) == SHARDREC_OK)
              len = hostile_len <= len ? hostile_len : len;
          }
          std::vector<float> out(len);
          // (SCOPED_TRACE does not reach the rank threads: the case is named in each check.)
          const std::string what = c.name + (pipelined ? " pipelined" : "") + " pooling " +
                                   std::to_string(pooling) + " rank " + std::to_string(r);
          const shardrec_status_t rc = Forward(cc, &view, out.data(), len, pipelined);
          const std::string err = shardrec_last_error();
          EXPECT_EQ(rc, SHARDREC_EINVAL) << what << ": " << err;
          if (r == bad)
            EXPECT_NE(err.find(c.message), std::string::npos) << what << ": " << err;
          else
            EXPECT_NE(err.find("rank " + std::to_string(bad)), std::string::npos)
                << what << ": " << err;
          EXPECT_EQ(shardrec_embedding_backward(cc, out.data(), out.size(), nullptr),
                    SHARDREC_EUSAGE);
          int64_t steps = -1;
          ASSERT_EQ(shardrec_embedding_num_steps(cc, &steps), SHARDREC_OK);
          EXPECT_EQ(steps, 0) << what;
          EXPECT_TRUE(before == Snapshot(cc, s)) << what;
          // The next good step trains, on the same path.
          ASSERT_EQ(shardrec_embedding_vbe_output_len(cc, &good_view, &len), SHARDREC_OK);
          out.assign(len, 0.0f);
          ASSERT_EQ(Forward(cc, &good_view, out.data(), len, pipelined), SHARDREC_OK)
              << shardrec_last_error();
          std::vector<float> grad(len, 0.5f);
          ASSERT_EQ(shardrec_embedding_backward(cc, grad.data(), len, nullptr), SHARDREC_OK)
              << shardrec_last_error();
        });
      }
    }
  }
}

}  // namespace
}  // namespace shardrec::testing
