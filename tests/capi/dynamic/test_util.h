// Shared helpers of the dynamic-table tests: a scenario of raw 64-bit ids, the simple unsharded
// reference (an ordered map id -> row applying docs/dynamic-tables.md's admission and eviction
// rules in front of the fixed-table reference model), and the run of a collection through the
// C API.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "shardrec/config.h"
#include "shardrec/dynamic.h"
#include "shardrec/embedding.h"
#include "tests/capi/embedding/embedding_test_util.h"

namespace shardrec::testing {

// A Scenario whose tables are dynamic: tables[t].rows is the capacity, ids are drawn from
// pools[t] (a feature reads one table). base.ranks_per_node 0 (the default here) is one node of
// the whole world; a larger value than the world is taken as the world.
struct DynScenario {
  Scenario base;
  std::vector<shardrec_dynamic_table_config_t> dynamic;  // per table
  std::vector<std::vector<int64_t>> pools;               // per table: its ids
  bool pipelined = false;  // forward as input_dist_start / wait / forward_distributed
  // Evaluation forwards (docs/dynamic-tables.md, "Evaluation"): before each training forward
  // (and the last forward), one with training off on the same batch, whose backward is refused.
  bool eval = false;
  // SCORE eviction: after each backward, every rank sets score(id, step) for every id of each
  // SCORE table's pool (shardrec_embedding_dynamic_set_scores); null: no scores are set.
  double (*score)(int64_t id, int32_t step) = nullptr;
  // Data-parallel SCORE tables: after each backward, rank r sets rank_score(id, step, r) for the
  // ids of each SCORE table's pool where it is not NaN (lists differing per rank); the reference
  // applies every rank's list in rank order, so a later rank's score wins
  // (docs/dynamic-tables.md, "Scores"). Used instead of `score`.
  double (*rank_score)(int64_t id, int32_t step, int32_t rank) = nullptr;
  // After the run, every rank looks up every pool id in evaluation mode (DynRun::probe): a
  // data-parallel table's copies must answer alike, bit for bit.
  bool probe = false;
  // Per table, its own fused optimizer (the table config's `optimizer`); empty: every table
  // trains with base.optimizer. RunReference trains every table with base.optimizer.
  std::vector<RefOptimizer> table_optimizers;
  // shardrec_embedding_options_t's forward and backward encodings (both) and non-finite policy.
  int32_t comm_encoding = SHARDREC_COMM_ENCODING_FP32;
  int32_t non_finite = SHARDREC_NON_FINITE_CHECK;
  // Tiered tables (docs/disk-tier.md): each table named here keeps its rows on disk under
  // `dir` + "/r" + rank with a cache of `cache_bytes` on every rank; empty: all in memory.
  struct Tier {
    std::string table, dir;
    int64_t cache_bytes = 0;
  };
  std::vector<Tier> tiers;
  bool fixed = false;  // the same tables as fixed ones (no dynamic config; pools in [0, rows))
  int32_t fixed_table = -1;  // this table alone fixed (its pool in [0, rows)); -1: none
};

// Two dynamic tables: t0 (dim 8, SUM, feature f0) and t1 (dim 12, MEAN, features f1 and f2),
// capacity `capacity` each, uniform init, ids from pools of `distinct` raw 64-bit values
// (negative, huge and the int64 extremes among them).
DynScenario MakeDynScenario(int32_t world, int32_t sharding, int32_t optimizer, int64_t capacity,
                            int32_t distinct);

// The plan of s: every table restricted to its sharding type, dynamic as s.dynamic says.
PlanPtr MakeDynPlan(const DynScenario& s);

// batches[step][rank], ids from the pools.
std::vector<std::vector<RefBatch>> MakeDynBatches(const DynScenario& s);

// What a run leaves: per step, per rank, the forward output; per rank, per table, the stats.
struct DynRun {
  std::vector<std::vector<std::vector<float>>> out;
  std::vector<std::vector<std::vector<float>>> eval_out;  // s.eval: per forward, per rank
  std::vector<std::vector<shardrec_dynamic_table_stats_t>> stats;
  std::vector<std::vector<float>> probe;  // s.probe: per rank, the rows of every pool id
  // s.rank_score: per step, per rank, the num_set of its set_scores calls (summed over tables).
  std::vector<std::vector<int64_t>> scores_set;
};

// Trains a collection of s's plan through the C API for s.base.steps steps (forward + backward)
// and one more forward, which shows the last update.
DynRun RunDynamic(const DynScenario& s, const std::vector<std::vector<RefBatch>>& batches,
                  const std::vector<std::vector<std::vector<float>>>& grads);

// The reference of the same steps: per step, per rank, the output; and, summed over the
// table, the counts of the stats.
struct RefCounts {
  int64_t size = 0, inserted = 0, evicted = 0, rejected_admission = 0, rejected_full = 0;
};
struct RefRun {
  std::vector<std::vector<std::vector<float>>> out;
  std::vector<std::vector<std::vector<float>>> eval_out;  // s.eval: per forward, per rank
  std::vector<RefCounts> counts;                          // per table, since creation
  // s.rank_score: per step, per rank, how many of its entries named a row (summed over tables).
  std::vector<std::vector<int64_t>> scores_named;
};
RefRun RunReference(const DynScenario& s, const std::vector<std::vector<RefBatch>>& batches,
                    const std::vector<std::vector<std::vector<float>>>& grads);

// The output dim of s.
int64_t DynOutputDim(const DynScenario& s);

// s.tiers as rank `rank`'s tiers in `o` (which points into this object while it lives).
struct TierOptions {
  TierOptions(const DynScenario& s, int32_t rank, shardrec_embedding_options_t* o);
  std::vector<std::string> dirs;
  std::vector<shardrec_table_tier_t> tiers;
};

// Rank `rank`'s collection of `plan` over GroupComm(world, rank), with s's optimizer, seed,
// encodings and non-finite policy;
// null, with the failure recorded, when creation fails.
CollPtr CreateDynCollection(const DynScenario& s, const shardrec_plan_t* plan, int32_t world,
                            int32_t rank);

// This rank's stats of dynamic table `table` (struct version current); a test failure if the
// call fails.
shardrec_dynamic_table_stats_t StatsOf(shardrec_embedding_t* c, const char* table);

}  // namespace shardrec::testing
