// VBE batches (docs/variable-batch.md) on dynamic tables (docs/dynamic-tables.md): raw 64-bit
// ids, rows created on first sight after admission, evicted when a shard is full. A collection
// fed VBE batches against one fed the expanded batches: every step's outputs, then every pool id
// looked up in evaluation, and each table's stats (size, inserted, evicted, rejected by admission
// or a full shard). Where the expanded batch reads every bag once (no inverse indices, or
// increasing injective ones: bags no sample reads leave the padded batch) the two see the same
// ids in the same order, so everything is bit for bit, with admission counts and LFU counts too.
// Bags read several times are counted once by VBE (each id of the batch once), by the expanded
// batch once per sample reading them, so that mode runs with admission at first sight and LRU, and
// its rows agree within the documented bound.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "tests/capi/dynamic/test_util.h"
#include "tests/capi/vbe/vbe_test_util.h"

namespace shardrec::testing {
namespace {

// Every pool id of t0 (feature f0) and t1 (feature f1) looked up in evaluation, one per sample.
std::vector<float> Probe(shardrec_embedding_t* c, const DynScenario& s, int64_t dim) {
  RefBatch probe;
  probe.batch_size = static_cast<int64_t>(std::max(s.pools[0].size(), s.pools[1].size()));
  probe.lengths.assign(static_cast<size_t>(s.base.num_features * probe.batch_size), 0);
  for (int32_t f = 0; f < 2; ++f)
    for (size_t i = 0; i < s.pools[f].size(); ++i) {
      probe.lengths[static_cast<size_t>(f * probe.batch_size) + i] = 1;
      probe.ids.push_back(s.pools[f][i]);
    }
  KjtHolder kjt(probe, s.base.num_features, false);
  std::vector<float> out(static_cast<size_t>(probe.batch_size * dim));
  EXPECT_EQ(shardrec_embedding_set_training(c, 0), SHARDREC_OK) << shardrec_last_error();
  EXPECT_EQ(shardrec_embedding_forward(c, kjt.view(), out.data(), out.size(), nullptr), SHARDREC_OK)
      << shardrec_last_error();
  return out;
}

void ExpectSameStats(shardrec_embedding_t* a, shardrec_embedding_t* b, int rank) {
  for (const char* t : {"t0", "t1"}) {
    const shardrec_dynamic_table_stats_t x = StatsOf(a, t);
    const shardrec_dynamic_table_stats_t y = StatsOf(b, t);
    EXPECT_EQ(x.size, y.size) << "rank " << rank << " table " << t;
    EXPECT_EQ(x.total_inserted, y.total_inserted) << "rank " << rank << " table " << t;
    EXPECT_EQ(x.total_evicted, y.total_evicted) << "rank " << rank << " table " << t;
    EXPECT_EQ(x.total_rejected_admission, y.total_rejected_admission)
        << "rank " << rank << " table " << t;
    EXPECT_EQ(x.total_rejected_full, y.total_rejected_full) << "rank " << rank << " table " << t;
  }
}

struct DynCase {
  int32_t world, sharding, eviction, admission;
  int64_t capacity;
};

// `tier_dir`: when not empty, both tables keep their rows on disk (a small cache), the VBE
// collection's under tier_dir/vbe, the expanded one's under tier_dir/expanded.
void RunDynamicVbe(const DynCase& c, VbeMode mode, bool weighted, const std::string& tier_dir,
                   bool fixed = false) {
  SCOPED_TRACE("world " + std::to_string(c.world) + " sharding " + std::to_string(c.sharding) +
               " eviction " + std::to_string(c.eviction) + " admission " +
               std::to_string(c.admission) + " capacity " + std::to_string(c.capacity) + " " +
               VbeModeName(mode) + (weighted ? " weighted" : "") +
               (tier_dir.empty() ? "" : " tiered") + (fixed ? " fixed" : ""));
  DynScenario s = MakeDynScenario(c.world, c.sharding, 2, c.capacity, 24);
  s.fixed = fixed;
  if (fixed)
    for (auto& pool : s.pools)
      for (size_t i = 0; i < pool.size(); ++i) pool[i] = static_cast<int64_t>(i);
  for (auto& d : s.dynamic) {
    d.eviction = c.eviction;
    d.admission_threshold = c.admission;
  }
  s.base.max_bag = 3;
  s.base.weighted = weighted;
  s.base.data_seed = 61;
  PlanPtr plan = MakeDynPlan(s);
  ASSERT_NE(plan, nullptr);
  DynScenario sv = s, sp = s;
  if (!tier_dir.empty()) {
    for (const char* t : {"t0", "t1"}) {
      sv.tiers.push_back({t, tier_dir + "/vbe_" + t, 1 << 20});
      sp.tiers.push_back({t, tier_dir + "/expanded_" + t, 1 << 20});
    }
  }
  const int64_t dim = DynOutputDim(s);
  const bool exact = mode != VbeMode::kInverse;
  VbeRunOptions o;
  o.mode = mode;
  o.check_reference = false;
  o.check_weights = fixed && tier_dir.empty();
  o.pools = {s.pools[0], s.pools[1], s.pools[1]};  // f0 reads t0, f1 and f2 read t1
  for (const auto& pool : o.pools) o.id_range.push_back(static_cast<int64_t>(pool.size()));
  o.create = [&](int r, int which, shardrec_embedding_t** out) {
    *out = CreateDynCollection(which == 0 ? sv : sp, plan.get(), c.world, r).release();
  };
  o.finish = [&](int r, shardrec_embedding_t* cv, shardrec_embedding_t* cp) {
    if (!fixed) {
      if (exact) ExpectSameStats(cv, cp, r);
      // Whatever was counted, the same ids hold rows when the tables never filled.
      if (!exact) {
        for (const char* t : {"t0", "t1"})
          EXPECT_EQ(StatsOf(cv, t).size, StatsOf(cp, t).size) << "rank " << r << " table " << t;
      }
    }
    const std::vector<float> a = Probe(cv, s, dim);
    const std::vector<float> b = Probe(cp, s, dim);
    if (exact) {
      EXPECT_TRUE(a.size() == b.size() &&
                  (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0))
          << "rank " << r << ": the rows differ from the expanded run's";
    } else {
      std::string first;
      EXPECT_EQ(CountMismatches(a, b, 1e-5f, 1e-6f, &first), 0u) << "rank " << r << ": " << first;
    }
  };
  // The harness reads the tables' widths and id ranges from the fixed-table scenario.
  RunVbeEquivalence(s.base, plan.get(), o);
}

TEST(VbeDynamic, AdmissionAndEvictionMatchTheExpandedBatch) {
  for (int32_t world : {1, 2, 4})
    for (int32_t sharding : {SHARDREC_SHARDING_TABLE_WISE, SHARDREC_SHARDING_ROW_WISE})
      for (VbeMode mode : {VbeMode::kNoInverse, VbeMode::kOnce}) {
        // Small shards: LRU and LFU evict, a full shard without eviction refuses ids.
        RunDynamicVbe({world, sharding, SHARDREC_EVICTION_LRU, 2, 8}, mode, false, "");
        RunDynamicVbe({world, sharding, SHARDREC_EVICTION_LFU, 0, 8}, mode, false, "");
        RunDynamicVbe({world, sharding, SHARDREC_EVICTION_NONE, 0, 8}, mode, false, "");
      }
}

TEST(VbeDynamic, OtherShardingTypesAndWeights) {
  for (int32_t sharding : {SHARDREC_SHARDING_DATA_PARALLEL, SHARDREC_SHARDING_COLUMN_WISE,
                           SHARDREC_SHARDING_TABLE_ROW_WISE, SHARDREC_SHARDING_GRID})
    for (VbeMode mode : {VbeMode::kNoInverse, VbeMode::kOnce})
      RunDynamicVbe({4, sharding, SHARDREC_EVICTION_LRU, 2, 16}, mode, false, "");
  for (VbeMode mode : {VbeMode::kNoInverse, VbeMode::kOnce})
    RunDynamicVbe({2, SHARDREC_SHARDING_ROW_WISE, SHARDREC_EVICTION_LFU, 2, 8}, mode, true, "");
}

TEST(VbeDynamic, BagsReadSeveralTimes) {
  // Room for every pool id: no eviction or refusal for the counts to change.
  for (int32_t world : {1, 2, 4})
    for (int32_t sharding : {SHARDREC_SHARDING_TABLE_WISE, SHARDREC_SHARDING_ROW_WISE})
      RunDynamicVbe({world, sharding, SHARDREC_EVICTION_LRU, 0, 64}, VbeMode::kInverse, false, "");
}

// Tiered dynamic tables (docs/disk-tier.md): rows on disk behind a cache, the same admission.
TEST(VbeDynamic, Tiered) {
  const std::string dir = ::testing::TempDir() + "vbe_dynamic_tiered_" + std::to_string(getpid());
  for (int32_t world : {1, 2})
    for (VbeMode mode : {VbeMode::kNoInverse, VbeMode::kOnce, VbeMode::kInverse}) {
      std::filesystem::remove_all(dir);
      // A tiered dynamic table's cache must hold a forward's distinct ids, so the shards are
      // not full: admission still refuses ids, the tier writes rows to disk.
      const int32_t admission = mode == VbeMode::kInverse ? 0 : 2;
      RunDynamicVbe({world, SHARDREC_SHARDING_ROW_WISE, SHARDREC_EVICTION_LRU, admission, 64}, mode,
                    false, dir);
    }
  std::filesystem::remove_all(dir);
}

// Admission counts a VBE batch's ids, so a bag read by two samples counts once: with a threshold
// of 2 its id gets no row, where the expanded batch (the bag twice) admits it.
TEST(VbeDynamic, AdmissionCountsABagOnce) {
  DynScenario s = MakeDynScenario(1, SHARDREC_SHARDING_TABLE_WISE, 2, 8, 8);
  for (auto& d : s.dynamic) d.admission_threshold = 2;
  PlanPtr plan = MakeDynPlan(s);
  ASSERT_NE(plan, nullptr);
  CollPtr vbe = CreateDynCollection(s, plan.get(), 1, 0);
  CollPtr expanded = CreateDynCollection(s, plan.get(), 1, 0);
  ASSERT_NE(vbe, nullptr);
  ASSERT_NE(expanded, nullptr);
  // Two samples; every feature has one bag of one id, which both read.
  VbeBatchData v;
  v.batch_size = 2;
  v.sizes.assign(3, 1);
  v.lengths.assign(3, 1);
  v.ids = {s.pools[0][3], s.pools[1][4], s.pools[1][5]};
  v.has_inverse = true;
  v.inverse.assign(6, 0);
  const shardrec_kjt_vbe_view_t view = v.View();
  const RefBatch e = Expand(v);
  KjtHolder kjt(e, 3, false);
  const int64_t dim = DynOutputDim(s);
  std::vector<float> out(static_cast<size_t>(2 * dim)), out_e(out.size());
  ASSERT_EQ(shardrec_embedding_forward_vbe(vbe.get(), &view, out.data(), out.size(), nullptr),
            SHARDREC_OK)
      << shardrec_last_error();
  ASSERT_EQ(
      shardrec_embedding_forward(expanded.get(), kjt.view(), out_e.data(), out_e.size(), nullptr),
      SHARDREC_OK)
      << shardrec_last_error();
  for (const char* t : {"t0", "t1"}) {
    EXPECT_EQ(StatsOf(vbe.get(), t).total_inserted, 0) << t;
    EXPECT_GT(StatsOf(vbe.get(), t).total_rejected_admission, 0) << t;
    EXPECT_GT(StatsOf(expanded.get(), t).total_inserted, 0) << t;
  }
}

}  // namespace
}  // namespace shardrec::testing
