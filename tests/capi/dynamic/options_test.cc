// Dynamic tables with the collection's and tables' options through the C API: per-table
// optimizers (each table equal to the reference run with its own optimizer), quantized
// communication (inserts, admissions and evictions exactly as in the exact run, values within
// 16-bit rounding of it, data-parallel copies bit-identical), the non-finite policy (CHECK
// refuses a NaN per-id weight on every rank with nothing inserted or counted; ALLOW admits it
// like a finite one), and admission counts that a refused batch leaves untouched.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "tests/capi/dynamic/test_util.h"
#include "tests/support/spawn_ranks.h"

namespace shardrec::testing {
namespace {

constexpr float kRtol = 1e-5f, kAtol = 1e-6f;

// The stats summed over ranks, per table.
std::vector<RefCounts> Summed(const DynRun& run, size_t tables) {
  std::vector<RefCounts> sum(tables);
  for (const auto& per_rank : run.stats)
    for (size_t t = 0; t < tables; ++t) {
      sum[t].size += per_rank[t].size;
      sum[t].inserted += per_rank[t].total_inserted;
      sum[t].evicted += per_rank[t].total_evicted;
      sum[t].rejected_admission += per_rank[t].total_rejected_admission;
      sum[t].rejected_full += per_rank[t].total_rejected_full;
    }
  return sum;
}

void ExpectSameCounts(const RefCounts& got, const RefCounts& want, const std::string& what) {
  EXPECT_EQ(got.size, want.size) << what;
  EXPECT_EQ(got.inserted, want.inserted) << what;
  EXPECT_EQ(got.evicted, want.evicted) << what;
  EXPECT_EQ(got.rejected_admission, want.rejected_admission) << what;
  EXPECT_EQ(got.rejected_full, want.rejected_full) << what;
}

// MakeDynScenario's output columns of table t: t0 (dim 8) is read by f0, t1 (dim 12) by f1 and
// f2, so each sample's row is t0's 8 columns, then t1's 24.
bool ColumnOfTable(int64_t col, size_t t) { return (col < 8) == (t == 0); }

// Rank r trains s's steps on `c`, each forward equal to the reference's; `before(step)` runs
// before each forward (a refused call in between must change nothing).
template <typename Before>
void FollowReference(shardrec_embedding_t* c, const DynScenario& s,
                     const std::vector<std::vector<RefBatch>>& batches,
                     const std::vector<std::vector<std::vector<float>>>& grads, const RefRun& want,
                     int r, Before&& before) {
  const int64_t dim = DynOutputDim(s);
  for (int32_t step = 0; step <= s.base.steps; ++step) {
    before(step);
    const RefBatch& batch = batches[std::min(step, s.base.steps - 1)][r];
    KjtHolder kjt(batch, s.base.num_features, false);
    std::vector<float> y(static_cast<size_t>(batch.batch_size * dim));
    ASSERT_EQ(shardrec_embedding_forward(c, kjt.view(), y.data(), y.size(), nullptr), SHARDREC_OK)
        << shardrec_last_error();
    std::string first;
    EXPECT_EQ(CountMismatches(y, want.out[step][r], kRtol, kAtol, &first), 0u)
        << "rank " << r << " forward " << step << ": " << first;
    if (step == s.base.steps) break;
    ASSERT_EQ(shardrec_embedding_backward(c, grads[step][r].data(), grads[step][r].size(), nullptr),
              SHARDREC_OK)
        << shardrec_last_error();
  }
}

// Each table trains with its own optimizer (the table config's `optimizer`), the collection's
// default being a third: every forward equals, column by column, the reference run with that
// table's optimizer, and the stats equal the reference's counts. Admission 2 and a capacity the
// ids fill at world 1 (LRU), so rows come and go with their optimizer state.
TEST(DynamicTableOptions, PerTableOptimizersEachEqualTheirReference) {
  struct Case {
    int32_t world, sharding, a, b;
  };
  for (const Case& k :
       {Case{1, SHARDREC_SHARDING_TABLE_WISE, 0, 3}, Case{2, SHARDREC_SHARDING_ROW_WISE, 2, 5},
        Case{4, SHARDREC_SHARDING_COLUMN_WISE, 1, 4},
        Case{3, SHARDREC_SHARDING_DATA_PARALLEL, 3, 2}}) {
    SCOPED_TRACE("world " + std::to_string(k.world) + " sharding " + std::to_string(k.sharding) +
                 " optimizers " + std::to_string(k.a) + ", " + std::to_string(k.b));
    const bool evicting = k.world == 1;
    DynScenario s = MakeDynScenario(k.world, k.sharding, 0, evicting ? 12 : 96, 24);
    s.base.steps = 4;
    for (auto& d : s.dynamic) {
      d.admission_threshold = 2;
      if (evicting) d.eviction = SHARDREC_EVICTION_LRU;
    }
    RefOptimizer oa = s.base.optimizer, ob = s.base.optimizer;
    oa.type = k.a;
    ob.type = k.b;
    s.table_optimizers = {oa, ob};
    const auto batches = MakeDynBatches(s);
    const auto grads = MakeGrads(s.base, batches, DynOutputDim(s));
    DynScenario ra = s, rb = s;
    ra.base.optimizer = oa;
    rb.base.optimizer = ob;
    ra.table_optimizers.clear();
    rb.table_optimizers.clear();
    const RefRun want_a = RunReference(ra, batches, grads);
    const RefRun want_b = RunReference(rb, batches, grads);
    const DynRun got = RunDynamic(s, batches, grads);
    const int64_t dim = DynOutputDim(s);
    ASSERT_EQ(dim, 32);
    ASSERT_EQ(got.out.size(), want_a.out.size());
    size_t compared = 0;
    for (size_t step = 0; step < got.out.size(); ++step)
      for (size_t r = 0; r < got.out[step].size(); ++r) {
        const std::vector<float>& g = got.out[step][r];
        ASSERT_EQ(g.size(), want_a.out[step][r].size());
        size_t bad = 0;
        for (size_t i = 0; i < g.size(); ++i) {
          const bool in_a = ColumnOfTable(static_cast<int64_t>(i) % dim, 0);
          const float w = in_a ? want_a.out[step][r][i] : want_b.out[step][r][i];
          if (!(std::fabs(g[i] - w) <= kAtol + kRtol * std::fabs(w)) && bad++ == 0)
            ADD_FAILURE() << "rank " << r << " forward " << step << " element " << i << ": " << g[i]
                          << " against " << w << " (table " << (in_a ? "t0" : "t1") << ")";
          ++compared;
        }
      }
    EXPECT_GT(compared, 0u);
    // The optimizers differ, so the two references must too (the case tests something).
    EXPECT_NE(want_a.out.back(), want_b.out.back());
    const std::vector<RefCounts> counts = Summed(got, 2);
    ExpectSameCounts(counts[0], want_a.counts[0], "t0");
    ExpectSameCounts(counts[1], want_b.counts[1], "t1");
    EXPECT_GT(want_a.counts[0].rejected_admission + want_b.counts[1].rejected_admission, 0);
    if (evicting) {
      EXPECT_GT(want_a.counts[0].evicted + want_b.counts[1].evicted, 0);
    }
  }
}

// Quantized communication changes values, not decisions: with FP16 or BF16 on the wire the
// stats (inserts, admission refusals, evictions) equal the exact run's and the reference's, the
// forwards stay within 16-bit rounding of the reference, and data-parallel copies answer alike
// bit for bit.
TEST(DynamicTableOptions, QuantizedCommunicationKeepsEveryDecision) {
  for (int32_t encoding : {SHARDREC_COMM_ENCODING_FP16, SHARDREC_COMM_ENCODING_BF16})
    for (int32_t sharding : {SHARDREC_SHARDING_ROW_WISE, SHARDREC_SHARDING_COLUMN_WISE,
                             SHARDREC_SHARDING_DATA_PARALLEL}) {
      const int32_t world = sharding == SHARDREC_SHARDING_COLUMN_WISE ? 4 : 2;
      SCOPED_TRACE("encoding " + std::to_string(encoding) + " sharding " +
                   std::to_string(sharding) + " world " + std::to_string(world));
      DynScenario s = MakeDynScenario(world, sharding, SHARDREC_OPTIMIZER_ADAM, 96, 24);
      for (auto& d : s.dynamic) d.admission_threshold = 2;
      s.probe = true;
      const auto batches = MakeDynBatches(s);
      const auto grads = MakeGrads(s.base, batches, DynOutputDim(s));
      const RefRun want = RunReference(s, batches, grads);
      const DynRun exact = RunDynamic(s, batches, grads);
      s.comm_encoding = encoding;
      const DynRun got = RunDynamic(s, batches, grads);
      size_t differ = 0;
      for (size_t step = 0; step < got.out.size(); ++step)
        for (size_t r = 0; r < got.out[step].size(); ++r) {
          std::string first;
          EXPECT_EQ(CountMismatches(got.out[step][r], want.out[step][r], 1e-2f, 1e-2f, &first), 0u)
              << "rank " << r << " forward " << step << ": " << first;
          EXPECT_EQ(CountMismatches(exact.out[step][r], want.out[step][r], kRtol, kAtol, &first),
                    0u)
              << "exact run, rank " << r << " forward " << step << ": " << first;
          differ += got.out[step][r] != exact.out[step][r];
        }
      EXPECT_GT(differ, 0u) << "the encoding changed nothing";
      const std::vector<RefCounts> enc_counts = Summed(got, 2), exact_counts = Summed(exact, 2);
      for (size_t t = 0; t < 2; ++t) {
        ExpectSameCounts(enc_counts[t], exact_counts[t], "table " + std::to_string(t));
        ExpectSameCounts(enc_counts[t], want.counts[t], "table " + std::to_string(t));
      }
      if (sharding == SHARDREC_SHARDING_DATA_PARALLEL) {
        for (size_t r = 1; r < got.probe.size(); ++r)
          EXPECT_EQ(got.probe[r], got.probe[0]) << "data-parallel copy of rank " << r;
      }
    }
}

// One rank's batch carries a NaN per-id weight. CHECK (the default; admission threshold 2, ids
// of a later step's batch) refuses the forward on every rank: no stat moves, the sketch counts
// none of its sightings, and training then goes on exactly as the reference that never saw the
// batch. ALLOW (threshold 0) runs it: the NaN reaches the poisoned bag's output alone, and the
// batch's ids get rows exactly as they do with the weight finite.
TEST(DynamicTableOptions, NonFinitePolicyOnDynamicTables) {
  for (int32_t world : {1, 2})
    for (int32_t policy : {SHARDREC_NON_FINITE_CHECK, SHARDREC_NON_FINITE_ALLOW}) {
      SCOPED_TRACE("world " + std::to_string(world) + " policy " + std::to_string(policy));
      const bool check = policy == SHARDREC_NON_FINITE_CHECK;
      DynScenario s = MakeDynScenario(world, SHARDREC_SHARDING_ROW_WISE, 3, 96, 24);
      s.base.weighted = true;
      s.non_finite = policy;
      for (auto& d : s.dynamic) d.admission_threshold = check ? 2 : 0;
      const auto batches = MakeDynBatches(s);
      const auto grads = MakeGrads(s.base, batches, DynOutputDim(s));
      const RefRun want = RunReference(s, batches, grads);
      PlanPtr plan = MakeDynPlan(s);
      ASSERT_NE(plan, nullptr);
      const int64_t dim = DynOutputDim(s);
      SpawnRanks(world, [&](int r) {
        CollPtr coll = CreateDynCollection(s, plan.get(), world, r);
        ASSERT_NE(coll, nullptr);
        const RefBatch& clean = batches[1][r];
        ASSERT_FALSE(clean.weights.empty());
        ASSERT_GT(clean.lengths[0], 0);  // the first weight is sample 0's of f0 (t0)
        RefBatch odd = clean;
        const bool spoils = r == world - 1;
        if (spoils) odd.weights[0] = std::numeric_limits<float>::quiet_NaN();
        std::vector<float> out(static_cast<size_t>(odd.batch_size * dim));
        auto forward = [&](shardrec_embedding_t* c, const RefBatch& b) {
          KjtHolder kjt(b, s.base.num_features, false);
          return shardrec_embedding_forward(c, kjt.view(), out.data(), out.size(), nullptr);
        };
        const auto t0 = StatsOf(coll.get(), "t0"), t1 = StatsOf(coll.get(), "t1");
        const shardrec_status_t st = forward(coll.get(), odd);
        const auto a0 = StatsOf(coll.get(), "t0"), a1 = StatsOf(coll.get(), "t1");
        if (!check) {
          ASSERT_EQ(st, SHARDREC_OK) << shardrec_last_error();
          size_t nan = 0;
          for (float v : out) nan += std::isnan(v);
          EXPECT_EQ(nan, spoils ? 8u : 0u) << "rank " << r;  // t0's 8 columns of sample 0
          EXPECT_GT(a0.total_inserted + a1.total_inserted, 0);
          // The same batch with the weight finite, in a fresh collection: the same rows.
          coll.reset();
          coll = CreateDynCollection(s, plan.get(), world, r);
          ASSERT_NE(coll, nullptr);
          ASSERT_EQ(forward(coll.get(), clean), SHARDREC_OK) << shardrec_last_error();
          const auto f0 = StatsOf(coll.get(), "t0"), f1 = StatsOf(coll.get(), "t1");
          EXPECT_EQ(std::memcmp(&a0, &f0, sizeof(a0)), 0) << "rank " << r;
          EXPECT_EQ(std::memcmp(&a1, &f1, sizeof(a1)), 0) << "rank " << r;
          return;
        }
        EXPECT_EQ(st, SHARDREC_EINVAL) << "rank " << r;
        EXPECT_EQ(std::memcmp(&t0, &a0, sizeof(t0)), 0) << "rank " << r;
        EXPECT_EQ(std::memcmp(&t1, &a1, sizeof(t1)), 0) << "rank " << r;
        FollowReference(coll.get(), s, batches, grads, want, r, [](int32_t) {});
      });
    }
}

// A refused batch counts no sighting: between steps 0 and 1 the last rank refuses (a short
// output) a forward of step 1's own batch, whose ids the sketch would otherwise count twice. At
// admission thresholds 2 and 3 every forward then equals the reference that never saw the refused
// batch, and so do the stats (each admitted a step later than a counted sighting would allow).
TEST(DynamicTableOptions, RefusedBatchCountsNoAdmissionSighting) {
  for (int32_t threshold : {2, 3})
    for (int32_t sharding : {SHARDREC_SHARDING_ROW_WISE, SHARDREC_SHARDING_DATA_PARALLEL})
      for (int32_t world : {1, 3}) {
        SCOPED_TRACE("threshold " + std::to_string(threshold) + " world " + std::to_string(world) +
                     " sharding " + std::to_string(sharding));
        DynScenario s = MakeDynScenario(world, sharding, 1, 96, 24);
        s.base.steps = 4;
        for (auto& d : s.dynamic) d.admission_threshold = threshold;
        PlanPtr plan = MakeDynPlan(s);
        ASSERT_NE(plan, nullptr);
        const auto batches = MakeDynBatches(s);
        const auto grads = MakeGrads(s.base, batches, DynOutputDim(s));
        const RefRun want = RunReference(s, batches, grads);
        const int64_t dim = DynOutputDim(s);
        std::vector<std::vector<shardrec_dynamic_table_stats_t>> stats(world);
        SpawnRanks(world, [&](int r) {
          CollPtr coll = CreateDynCollection(s, plan.get(), world, r);
          ASSERT_NE(coll, nullptr);
          shardrec_embedding_t* c = coll.get();
          FollowReference(c, s, batches, grads, want, r, [&](int32_t step) {
            if (step != 1) return;
            const RefBatch& next = batches[1][r];
            KjtHolder kjt(next, s.base.num_features, false);
            std::vector<float> y(static_cast<size_t>(next.batch_size * dim));
            const size_t len = y.size() - (r == world - 1 ? 1 : 0);
            EXPECT_EQ(shardrec_embedding_forward(c, kjt.view(), y.data(), len, nullptr),
                      SHARDREC_EINVAL)
                << "rank " << r;
          });
          for (const char* t : {"t0", "t1"}) stats[r].push_back(StatsOf(c, t));
        });
        DynRun got;
        got.stats = stats;
        const std::vector<RefCounts> counts = Summed(got, 2);
        RefCounts all;
        for (size_t t = 0; t < 2; ++t) {
          ExpectSameCounts(counts[t], want.counts[t], "table " + std::to_string(t));
          all.inserted += want.counts[t].inserted;
          all.rejected_admission += want.counts[t].rejected_admission;
        }
        // The case exercises admission: some ids waited, some got in.
        EXPECT_GT(all.rejected_admission, 0);
        EXPECT_GT(all.inserted, 0);
      }
}

}  // namespace
}  // namespace shardrec::testing
