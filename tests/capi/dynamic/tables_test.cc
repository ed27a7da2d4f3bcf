// Dynamic tables through the C API (docs/dynamic-tables.md) against the simple unsharded
// reference of test_util.h: raw 64-bit ids under every sharding type (the node-local ones
// with two ranks per node) and optimizer at worlds 1-4 while no shard is full; data-parallel
// tables at capacity with every eviction policy and admission at worlds 1-3; admission
// thresholds and decaying admission counts; LRU, LFU, TTL and no eviction at capacity; identical
// results across runs and thread counts; stats.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "tests/capi/dynamic/test_util.h"
#include "tests/support/spawn_ranks.h"

namespace shardrec::testing {
namespace {

constexpr float kRtol = 1e-5f, kAtol = 1e-6f;

// 16-bit storage compares at 1e-2, as the fixed-table equivalence tests do (a rounding may land
// one ulp apart after another summation order).
void ExpectMatches(const DynRun& got, const RefRun& want, const std::string& what,
                   bool wide = false) {
  const float rtol = wide ? 1e-2f : kRtol, atol = wide ? 1e-2f : kAtol;
  ASSERT_EQ(got.out.size(), want.out.size());
  for (size_t step = 0; step < got.out.size(); ++step)
    for (size_t r = 0; r < got.out[step].size(); ++r) {
      std::string first;
      EXPECT_EQ(CountMismatches(got.out[step][r], want.out[step][r], rtol, atol, &first), 0u)
          << what << ": rank " << r << " forward " << step << ": " << first;
    }
}

// The stats summed over ranks equal the reference's counts.
void ExpectCounts(const DynScenario& s, const DynRun& got, const RefRun& want) {
  for (size_t t = 0; t < s.base.tables.size(); ++t) {
    RefCounts sum;
    int64_t capacity = 0, admitted = 0;
    for (const auto& per_rank : got.stats) {
      const shardrec_dynamic_table_stats_t& st = per_rank[t];
      sum.size += st.size;
      sum.inserted += st.total_inserted;
      sum.evicted += st.total_evicted;
      sum.rejected_admission += st.total_rejected_admission;
      sum.rejected_full += st.total_rejected_full;
      admitted += st.total_admitted;
      // Every admitted id got a row or found no slot (stats version 3).
      EXPECT_EQ(st.last_admitted, st.last_inserted + st.last_rejected_full) << "table " << t;
      capacity += st.capacity;
      if (st.capacity > 0) {
        EXPECT_GT(st.metadata_bytes, 0u);
      }
    }
    EXPECT_EQ(capacity, s.base.tables[t].rows) << "table " << t;
    EXPECT_EQ(sum.size, want.counts[t].size) << "table " << t;
    EXPECT_EQ(sum.inserted, want.counts[t].inserted) << "table " << t;
    EXPECT_EQ(sum.evicted, want.counts[t].evicted) << "table " << t;
    EXPECT_EQ(sum.rejected_admission, want.counts[t].rejected_admission) << "table " << t;
    EXPECT_EQ(sum.rejected_full, want.counts[t].rejected_full) << "table " << t;
    EXPECT_EQ(admitted, want.counts[t].inserted + want.counts[t].rejected_full) << "table " << t;
  }
}

// Returns the reference's counts summed over the tables, so a case can check that it exercised
// what it is about.
RefCounts RunAndCompare(const DynScenario& s, bool counts = true) {
  const auto batches = MakeDynBatches(s);
  const auto grads = MakeGrads(s.base, batches, DynOutputDim(s));
  const RefRun want = RunReference(s, batches, grads);
  const DynRun got = RunDynamic(s, batches, grads);
  bool wide = false;
  for (const RefTable& t : s.base.tables) wide = wide || t.dtype != 0;
  ExpectMatches(got, want, "collection vs reference", wide);
  if (counts) ExpectCounts(s, got, want);
  RefCounts sum;
  for (const RefCounts& c : want.counts) {
    sum.inserted += c.inserted;
    sum.evicted += c.evicted;
    sum.rejected_admission += c.rejected_admission;
    sum.rejected_full += c.rejected_full;
  }
  return sum;
}

// Below capacity (4 x the distinct ids, so no shard of any plan fills): every supported
// sharding type and optimizer, worlds 1-4, equals the reference.
TEST(DynamicTable, BelowCapacityEveryTypeOptimizerAndWorld) {
  for (int32_t sharding :
       {SHARDREC_SHARDING_TABLE_WISE, SHARDREC_SHARDING_ROW_WISE, SHARDREC_SHARDING_COLUMN_WISE})
    for (int32_t world : {1, 2, 3, 4})
      for (int32_t opt = 0; opt <= 5; ++opt) {
        if (world == 3 && opt != 2 && opt != 3) continue;  // world 3: two optimizers suffice
        SCOPED_TRACE("sharding " + std::to_string(sharding) + " world " + std::to_string(world) +
                     " optimizer " + std::to_string(opt));
        DynScenario s = MakeDynScenario(world, sharding, opt, 96, 24);
        RunAndCompare(s);
      }
}

// The node-local types (ranks_per_node 2) and data-parallel, worlds 2 and 4, every optimizer,
// below capacity: equal to the reference, stats counted once per table.
TEST(DynamicTable, NodeLocalAndDataParallelBelowCapacity) {
  for (int32_t sharding : {SHARDREC_SHARDING_DATA_PARALLEL, SHARDREC_SHARDING_TABLE_ROW_WISE,
                           SHARDREC_SHARDING_TABLE_COLUMN_WISE, SHARDREC_SHARDING_GRID})
    for (int32_t world : {2, 4})
      for (int32_t opt = 0; opt <= 5; ++opt) {
        SCOPED_TRACE("sharding " + std::to_string(sharding) + " world " + std::to_string(world) +
                     " optimizer " + std::to_string(opt));
        DynScenario s = MakeDynScenario(world, sharding, opt, 96, 24);
        s.base.ranks_per_node = 2;
        RunAndCompare(s);
      }
}

// A data-parallel table is one shard of the whole capacity on every rank, so with admission and
// every eviction policy at capacity it equals the reference at any world size (the copies agree
// on the inserts of the whole global batch), stats included.
TEST(DynamicTable, DataParallelEvictionAndAdmissionAnyWorld) {
  for (int32_t policy : {SHARDREC_EVICTION_NONE, SHARDREC_EVICTION_LRU, SHARDREC_EVICTION_LFU,
                         SHARDREC_EVICTION_TTL})
    for (int32_t world : {1, 2, 3}) {
      SCOPED_TRACE("policy " + std::to_string(policy) + " world " + std::to_string(world));
      DynScenario s =
          MakeDynScenario(world, SHARDREC_SHARDING_DATA_PARALLEL, 2 + world % 3, 10, 24);
      s.base.steps = 5;
      for (auto& d : s.dynamic) {
        d.eviction = policy;
        d.ttl_steps = 1;
        d.admission_threshold = policy == SHARDREC_EVICTION_LFU ? 2 : 0;
      }
      if (world == 2) s.pipelined = true;
      if (world == 3) s.base.weighted = true;
      const RefCounts c = RunAndCompare(s);
      if (policy == SHARDREC_EVICTION_NONE) {
        EXPECT_GT(c.rejected_full, 0);
      } else {
        EXPECT_GT(c.evicted, 0);
      }
    }
}

// Hot ids: sixteen distinct ids, skewed, in bags of up to 8, so a rank's part often has fewer than
// half as many distinct ids as occurrences and the data-parallel gather sends distinct ids with
// their counts (docs/dynamic-tables.md, "Data-parallel tables"); the admission sketch and LFU
// counts must see the same totals as every occurrence would give: equal to the reference, and the
// copies answer alike on every rank.
TEST(DynamicTable, DataParallelHotIdsSentAsCounts) {
  for (int32_t world : {2, 3}) {
    SCOPED_TRACE("world " + std::to_string(world));
    DynScenario s = MakeDynScenario(world, SHARDREC_SHARDING_DATA_PARALLEL, 3, 8, 16);
    s.base.steps = 5;
    s.base.max_bag = 8;
    s.probe = true;
    for (auto& d : s.dynamic) {
      d.eviction = SHARDREC_EVICTION_LFU;
      d.admission_threshold = 3;
    }
    const auto batches = MakeDynBatches(s);
    const auto grads = MakeGrads(s.base, batches, DynOutputDim(s));
    const RefRun want = RunReference(s, batches, grads);
    const DynRun got = RunDynamic(s, batches, grads);
    ExpectMatches(got, want, "collection vs reference", false);
    ExpectCounts(s, got, want);
    ASSERT_FALSE(got.probe[0].empty());
    for (size_t r = 1; r < static_cast<size_t>(world); ++r)
      EXPECT_EQ(got.probe[r], got.probe[0]) << "rank " << r << "'s copy differs from rank 0's";
    int64_t evicted = 0, rejected = 0;
    for (const RefCounts& c : want.counts) {
      evicted += c.evicted;
      rejected += c.rejected_admission;
    }
    EXPECT_GT(evicted, 0);
    EXPECT_GT(rejected, 0);
  }
}

// 16-bit storage and the default init (whose bound is sqrt(1 / capacity)), with admission.
TEST(DynamicTable, HalfStorageAndDefaultInit) {
  for (int32_t dtype : {SHARDREC_DTYPE_FLOAT16, SHARDREC_DTYPE_BFLOAT16}) {
    SCOPED_TRACE("dtype " + std::to_string(dtype));
    DynScenario s = MakeDynScenario(2, SHARDREC_SHARDING_ROW_WISE, 1, 96, 24);
    for (RefTable& t : s.base.tables) {
      t.dtype = dtype;
      t.init_kind = SHARDREC_INIT_DEFAULT;
    }
    s.dynamic[1].admission_threshold = 2;
    RunAndCompare(s);
  }
}

// Per-id weights, sequence (NONE) tables, and the pipelined input distribution, with admission
// and LRU eviction at world 1 where the reference holds exactly.
TEST(DynamicTable, WeightedSequenceAndPipelined) {
  for (int variant = 0; variant < 3; ++variant) {
    SCOPED_TRACE("variant " + std::to_string(variant));
    const int32_t world = variant == 2 ? 2 : 1;
    DynScenario s = MakeDynScenario(world, SHARDREC_SHARDING_ROW_WISE, 4, world == 1 ? 12 : 96, 24);
    s.base.steps = 5;
    if (variant == 0) s.base.weighted = true;
    if (variant == 1)
      for (RefTable& t : s.base.tables) {
        t.pooling = SHARDREC_POOLING_NONE;
        t.dim = 8;
      }
    if (variant == 2) s.pipelined = true;
    for (auto& d : s.dynamic) {
      d.admission_threshold = 2;
      d.eviction = world == 1 ? SHARDREC_EVICTION_LRU : SHARDREC_EVICTION_NONE;
    }
    const RefCounts c = RunAndCompare(s);
    EXPECT_GT(c.rejected_admission, 0);
    if (world == 1) {
      EXPECT_GT(c.evicted, 0);
    }
  }
}

TEST(DynamicTable, Int32IdsAreWidened) {
  DynScenario s = MakeDynScenario(2, SHARDREC_SHARDING_ROW_WISE, 1, 96, 24);
  for (auto& pool : s.pools)
    for (int64_t& x : pool) x = static_cast<int32_t>(x);  // int32 values, some negative
  s.base.int32_ids = true;
  RunAndCompare(s);
}

// Admission: an id needs 2 (3) occurrences; before that it reads zeros and trains nothing.
TEST(DynamicTable, AdmissionThresholds) {
  for (int32_t threshold : {2, 3})
    for (int32_t world : {1, 2}) {
      SCOPED_TRACE("threshold " + std::to_string(threshold) + " world " + std::to_string(world));
      DynScenario s = MakeDynScenario(world, SHARDREC_SHARDING_ROW_WISE, 3, 96, 24);
      for (auto& d : s.dynamic) d.admission_threshold = threshold;
      const RefCounts c = RunAndCompare(s);
      EXPECT_GT(c.rejected_admission, 0);
      EXPECT_GT(c.inserted, 0);
    }
}

// Admission counts that decay (admission_decay_steps 1 and 2, threshold 3): row-wise and
// data-parallel at worlds 1 and 2 equal the reference, which halves its exact counts at the start
// of every forward whose number is a multiple of the decay; and the decay admits fewer ids than
// the same run without it.
TEST(DynamicTable, AdmissionCountsDecay) {
  for (int64_t decay : {1, 2})
    for (int32_t sharding : {SHARDREC_SHARDING_ROW_WISE, SHARDREC_SHARDING_DATA_PARALLEL})
      for (int32_t world : {1, 2}) {
        SCOPED_TRACE("decay " + std::to_string(decay) + " sharding " + std::to_string(sharding) +
                     " world " + std::to_string(world));
        DynScenario s = MakeDynScenario(world, sharding, 3, 96, 24);
        s.base.steps = 6;
        for (auto& d : s.dynamic) d.admission_threshold = 3;
        const auto batches = MakeDynBatches(s);
        const RefRun plain = RunReference(s, batches, MakeGrads(s.base, batches, DynOutputDim(s)));
        int64_t plain_inserted = 0;
        for (const RefCounts& c : plain.counts) plain_inserted += c.inserted;
        for (auto& d : s.dynamic) d.admission_decay_steps = decay;
        const RefCounts c = RunAndCompare(s);
        EXPECT_GT(c.inserted, 0);
        EXPECT_LT(c.inserted, plain_inserted);
      }
}

// At capacity, world 1: every eviction policy (and none), with every optimizer (a row leaves with
// its state, a new one starts at zero) and 16-bit storage, equals the reference, counts included.
TEST(DynamicTable, EvictionAtCapacityWorld1) {
  for (int32_t policy : {SHARDREC_EVICTION_NONE, SHARDREC_EVICTION_LRU, SHARDREC_EVICTION_LFU,
                         SHARDREC_EVICTION_TTL})
    for (int32_t sharding : {SHARDREC_SHARDING_TABLE_WISE, SHARDREC_SHARDING_COLUMN_WISE})
      for (int32_t opt = 0; opt <= 5; ++opt)
        for (int32_t dtype :
             {SHARDREC_DTYPE_FLOAT32, SHARDREC_DTYPE_FLOAT16, SHARDREC_DTYPE_BFLOAT16}) {
          if (dtype != SHARDREC_DTYPE_FLOAT32 && opt % 2 == sharding % 2) continue;  // half of them
          SCOPED_TRACE("policy " + std::to_string(policy) + " sharding " +
                       std::to_string(sharding) + " optimizer " + std::to_string(opt) + " dtype " +
                       std::to_string(dtype));
          DynScenario s = MakeDynScenario(1, sharding, opt, 10, 24);
          for (RefTable& t : s.base.tables) t.dtype = dtype;
          s.base.steps = 6;
          for (auto& d : s.dynamic) {
            d.eviction = policy;
            d.ttl_steps = 1;
            d.admission_threshold = policy == SHARDREC_EVICTION_LFU ? 2 : 0;
          }
          const RefCounts c = RunAndCompare(s);
          if (policy == SHARDREC_EVICTION_NONE) {
            EXPECT_EQ(c.evicted, 0);
            EXPECT_GT(c.rejected_full, 0);
          } else {
            EXPECT_GT(c.evicted, 0);
          }
        }
}

// With eviction at world 2 (row-wise: each shard fills on its own), two runs and two thread
// counts give bit-identical outputs and stats.
TEST(DynamicTable, EvictionIsDeterministicAcrossRunsAndThreads) {
  DynScenario s = MakeDynScenario(2, SHARDREC_SHARDING_ROW_WISE, 3, 8, 24);
  s.base.steps = 6;
  for (auto& d : s.dynamic) d.eviction = SHARDREC_EVICTION_LRU;
  const auto batches = MakeDynBatches(s);
  const auto grads = MakeGrads(s.base, batches, DynOutputDim(s));
  const DynRun a = RunDynamic(s, batches, grads);
  const DynRun b = RunDynamic(s, batches, grads);
  s.base.num_threads = 3;
  const DynRun c = RunDynamic(s, batches, grads);
  int64_t evicted = 0;
  for (size_t r = 0; r < a.stats.size(); ++r)
    for (size_t t = 0; t < a.stats[r].size(); ++t) {
      evicted += a.stats[r][t].total_evicted;
      EXPECT_EQ(std::memcmp(&a.stats[r][t], &b.stats[r][t], sizeof(a.stats[r][t])), 0);
      EXPECT_EQ(std::memcmp(&a.stats[r][t], &c.stats[r][t], sizeof(a.stats[r][t])), 0);
    }
  EXPECT_GT(evicted, 0) << "the scenario must evict";
  for (size_t step = 0; step < a.out.size(); ++step)
    for (size_t r = 0; r < a.out[step].size(); ++r) {
      EXPECT_EQ(a.out[step][r], b.out[step][r]) << "run 2, step " << step << " rank " << r;
      EXPECT_EQ(a.out[step][r], c.out[step][r]) << "3 threads, step " << step << " rank " << r;
    }
}

}  // namespace
}  // namespace shardrec::testing
