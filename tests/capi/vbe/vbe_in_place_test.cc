// Request-shaped VBE batches (docs/variable-batch.md): user features whose bags the candidates
// read several times (one bag read by no sample, one empty), item features read in sample order,
// one table read by a user and an item feature, dims that are not a multiple of a vector's width.
// The own gradient rows are read where they lie (the caller's gradient, or the user bags' sums),
// not copied first; training matches the expanded batch and the reference model, and a
// non-finite gradient element in an item's columns is refused on every rank with nothing changed.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "tests/capi/vbe/vbe_test_util.h"
#include "tests/support/spawn_ranks.h"

namespace shardrec::testing {
namespace {

// Features 0 and 1 are the user's, 2 and 3 the candidates'. Table t1 is read by features 1 and 2.
Scenario RequestScenario(int32_t world, int32_t sharding, int32_t pooling, bool weighted) {
  Scenario s = StandardScenario(world, sharding, pooling);
  s.tables[0].dim = 13;
  s.tables[1].dim = 5;
  s.tables[2].dim = 13;
  s.tables[2].rows = 17;
  s.weighted = weighted;
  s.optimizer.type = 2;  // row-wise Adagrad
  s.optimizer.lr = 0.05f;
  return s;
}

// `requests` requests of `candidates` candidates each: a user feature has requests + 1 bags (the
// last one read by no sample, bag 1 empty when there are two requests or more), sample b reading
// bag b / candidates; an item feature has a bag per sample, read in sample order, some empty,
// the others of one id (feature 3: its rows are read in place) or of one or two (feature 2: its
// rows are copied, as rows that several ids read are).
VbeBatchData RequestBatch(uint64_t seed, const std::vector<int64_t>& ranges, int64_t requests,
                          int64_t candidates, bool weighted) {
  std::mt19937_64 gen(seed);
  VbeBatchData v;
  v.has_inverse = true;
  v.batch_size = requests * candidates;
  for (int64_t f = 0; f < 4; ++f) {
    const bool user = f < 2;
    v.sizes.push_back(user ? requests + 1 : v.batch_size);
    for (int64_t b = 0; b < v.batch_size; ++b) v.inverse.push_back(user ? b / candidates : b);
  }
  for (int64_t f = 0; f < 4; ++f)
    for (int64_t j = 0; j < v.sizes[static_cast<size_t>(f)]; ++j) {
      int32_t len =
          f < 2 ? 1 + static_cast<int32_t>(gen() % 3) : (f == 2 && gen() % 5 == 0 ? 2 : 1);
      if ((f < 2 && j == 1 && requests >= 2) || (f >= 2 && gen() % 7 == 0)) len = 0;
      v.lengths.push_back(len);
      for (int32_t k = 0; k < len; ++k) {
        v.ids.push_back(static_cast<int64_t>(gen() % static_cast<uint64_t>(ranges[f])));
        if (weighted) v.weights.push_back(0.25f + static_cast<float>(gen() % 1000) / 500.0f);
      }
    }
  return v;
}

// One candidate per request: no bag is read twice, so the weights are the expanded batch's bit
// for bit; four: the user bags are read four times each, within the documented bound.
TEST(VbeInPlace, RequestShapedBatchMatchesTheExpandedBatch) {
  for (int32_t world : {1, 2})
    for (int32_t sharding : {SHARDREC_SHARDING_TABLE_WISE, SHARDREC_SHARDING_ROW_WISE})
      for (int32_t pooling : {SHARDREC_POOLING_SUM, SHARDREC_POOLING_MEAN})
        for (bool weighted : {false, true})
          for (int64_t candidates : {1, 4}) {
            SCOPED_TRACE("world " + std::to_string(world) + " sharding " +
                         std::to_string(sharding) + " pooling " + std::to_string(pooling) +
                         " weighted " + std::to_string(weighted) + " candidates " +
                         std::to_string(candidates));
            const Scenario s = RequestScenario(world, sharding, pooling, weighted);
            PlanPtr plan = MakePlan(s);
            ASSERT_NE(plan, nullptr);
            const std::vector<int64_t> ranges = IdRanges(s);
            VbeRunOptions o;
            o.mode = candidates == 1 ? VbeMode::kOnce : VbeMode::kInverse;
            o.mix_plain = false;
            o.batch = [&](size_t step, size_t rank) {
              return RequestBatch(31 * step + 7 * rank + 1, ranges, 3 + static_cast<int64_t>(rank),
                                  candidates, weighted);
            };
            RunVbeEquivalence(s, plan.get(), o);
          }
}

// A NaN or an infinity in an item feature's columns (read in place by the backward, never copied)
// is refused on every rank, its element named on the rank that gave it; no weight or state
// changes anywhere, and a finite gradient then trains the same forward.
TEST(VbeInPlace, NonFiniteItemGradientIsRefusedWithNothingChanged) {
  for (int32_t world : {1, 2})
    for (float bad : {std::nanf(""), -INFINITY}) {
      const Scenario s =
          RequestScenario(world, SHARDREC_SHARDING_TABLE_WISE, SHARDREC_POOLING_SUM, false);
      PlanPtr plan = MakePlan(s);
      ASSERT_NE(plan, nullptr);
      const shardrec_optimizer_config_t opt = ToCOptimizer(s.optimizer);
      const std::vector<int64_t> widths = FeatureWidths(s);
      int64_t D = 0;
      for (int64_t w : widths) D += w;
      const int64_t item_col = widths[0] + widths[1] + widths[2];  // feature 3's first column
      const int32_t bad_rank = world - 1;
      SpawnRanks(world, [&](int r) {
        shardrec_embedding_options_t o;
        shardrec_embedding_options_init(&o, SHARDREC_EMBEDDING_OPTIONS_VERSION);
        shardrec_embedding_t* cc = nullptr;
        ASSERT_EQ(shardrec_embedding_create(&cc, plan.get(), GroupComm(world, r), &opt, &o),
                  SHARDREC_OK);
        CollPtr coll(cc);
        const VbeBatchData v =
            RequestBatch(40 + static_cast<uint64_t>(r), IdRanges(s), 3, 4, false);
        const shardrec_kjt_vbe_view_t view = v.View();
        size_t len = 0;
        ASSERT_EQ(shardrec_embedding_vbe_output_len(cc, &view, &len), SHARDREC_OK);
        ASSERT_EQ(len, static_cast<size_t>(v.batch_size * D));
        std::vector<float> out(len);
        ASSERT_EQ(shardrec_embedding_forward_vbe(cc, &view, out.data(), len, nullptr), SHARDREC_OK)
            << shardrec_last_error();
        const auto before = Snapshot(cc, s);
        std::vector<float> grad(len, 0.25f);
        const auto at = static_cast<size_t>(5 * D + item_col + 12);  // sample 5, the last column
        if (r == bad_rank) grad[at] = bad;
        EXPECT_EQ(shardrec_embedding_backward(cc, grad.data(), len, nullptr), SHARDREC_EINVAL);
        const std::string err = shardrec_last_error();
        if (r == bad_rank)
          EXPECT_NE(
              err.find("grad[" + std::to_string(at) + "] is " + (std::isnan(bad) ? "nan" : "-inf")),
              std::string::npos)
              << err;
        else
          EXPECT_NE(err.find("rank " + std::to_string(bad_rank)), std::string::npos) << err;
        EXPECT_EQ(before, Snapshot(cc, s));
        // Nothing was trained: a finite gradient trains this forward's batch, and changes rows.
        grad[at] = 0.25f;
        EXPECT_EQ(shardrec_embedding_backward(cc, grad.data(), len, nullptr), SHARDREC_OK)
            << shardrec_last_error();
        EXPECT_NE(before, Snapshot(cc, s));
      });
    }
}

}  // namespace
}  // namespace shardrec::testing
