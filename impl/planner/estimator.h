// Per-shard cost (TorchRec's EmbeddingPerfEstimator) and storage (EmbeddingStorageEstimator)
// estimates. Costs are milliseconds per training step; storage is bytes of one rank's memory.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "impl/planner/topology.h"
#include "impl/sharding/types.h"

namespace shardrec::planner {

struct TierHint;  // tier_model.h

// Byte estimates are capped here, so sums of many of them never overflow int64; a capped
// estimate fits no real memory.
inline constexpr int64_t kMaxEstimateBytes = int64_t{1} << 60;
// The largest expected id count per feature per batch (pooling factor x batch size) the
// estimates model; the planner refuses larger inputs, naming the feature.
inline constexpr double kMaxIdsPerBatch = 1099511627776.0;  // 2^40

// a + b for a, b >= 0, clamped to INT64_MAX.
int64_t SaturatingAdd(int64_t a, int64_t b);

// InvalidArgument naming table and feature when a pooling factor is not finite, negative, or
// times batch_size above kMaxIdsPerBatch.
Status CheckPoolingFactor(const std::string& table, const std::string& feature, double pooling,
                          int32_t batch_size);

struct Perf {
  double fwd_compute = 0;
  double fwd_comms = 0;
  double bwd_compute = 0;
  double bwd_comms = 0;
  double prefetch = 0;  // a tiered table's reads of the rows its cache misses (tier_model.h)
  // Per-rank costs no shard owns (collective latency, per-id host work); see StepOverhead.
  double overhead = 0;
  double total() const {
    return fwd_compute + fwd_comms + bwd_compute + bwd_comms + prefetch + overhead;
  }
  Perf& operator+=(const Perf& o);
};

struct Storage {
  int64_t weights = 0;
  int64_t optimizer = 0;
  int64_t input = 0;   // id buffers of the input all-to-all
  int64_t output = 0;  // pooled/sequence output buffers
  // A tiered table's records on the rank's disk (tier_model.h); not memory, not in total().
  int64_t disk = 0;
  // Memory, saturating (every field is >= 0 and at most kMaxEstimateBytes).
  int64_t total() const;
  Storage& operator+=(const Storage& o);
};

struct ShardEstimate {
  Perf perf;
  Storage storage;
};

// What one table sees per rank per step: I = sum_f P_f * B ids, O = sum_f B pooled outputs
// (I for sequence/NONE pooling).
struct TableLoad {
  double ids = 0;
  double outputs = 0;
};
TableLoad ComputeLoad(const sharding::TableConfig& table, const std::vector<float>& pooling_factors,
                      int32_t batch_size);

// Optimizer state bytes of a rows x cols shard (state is fp32; row-wise state is one float per
// row of every shard, since column shards keep full-row statistics).
int64_t OptimizerStateBytes(optim::OptimizerType type, int64_t rows, int32_t cols);
// Bytes a dynamic table's shard of `slots` slots keeps beside its rows and their state (its id
// index, per-slot metadata and admission sketch; docs/dynamic-tables.md); 0 for a fixed table.
int64_t DynamicMetadataBytes(const sharding::DynamicConfig& d, int64_t slots);
// Bytes of `slots` slots of dynamic table `table` as the storage model counts one shard of them:
// their rows at the storage dtype, their optimizer state (`optimizer`: the table's own or the
// topology's) and DynamicMetadataBytes; INT64_MAX on overflow.
int64_t DynamicSlotsBytes(const sharding::TableConfig& table, optim::OptimizerType optimizer,
                          int64_t slots);
// The capacity of a table given as `capacity_bytes` (docs/dynamic-tables.md, "Capacity in
// bytes"): the largest slot count whose DynamicSlotsBytes fits in it (at most the largest table
// the plan allows); 0 when not even one slot fits.
int64_t DynamicSlotsForBytes(const sharding::TableConfig& table, optim::OptimizerType optimizer,
                             int64_t capacity_bytes);

// Expected number of distinct rows among `ids` ids drawn uniformly from `rows` rows:
// rows * (1 - e^(-ids/rows)); 0 when either is not positive. Skewed ids touch fewer rows, so
// this is an upper bound for real inputs.
double ExpectedUniqueRows(double ids, double rows);

// Estimates of every shard of `shards` (only sizes are used; ranks are ignored) for a table
// sharded as `type`. Data-parallel uses the dense kernel's bandwidth, others the fused one. A
// tiered table (`tier` not null, cache_bytes > 0) is estimated by ApplyTier (tier_model.h).
std::vector<ShardEstimate> EstimateShards(const Topology& topo, const sharding::TableConfig& table,
                                          const std::vector<float>& pooling_factors,
                                          sharding::ShardingType type,
                                          const std::vector<sharding::Shard>& shards,
                                          const TierHint* tier = nullptr);

// What a rank pays per step whatever the placement: topo.collective_latency_ms per collective
// (kCollectivesPerStep, kCollectivesPerStepTwoRanks at world_size 2, +1 when a table is
// data-parallel, +1 when `any_row_stat_exchange`: a table's rows are split into column shards
// whose optimizer keeps row statistics, which the shards exchange; none at world_size 1) and
// topo.per_id_ms per id of its own batch
// (`ids_per_rank`, summed over tables). 0 on CUDA defaults. Proposals are ranked without it.
// `any_host_reduce`: a table-row-wise or grid table whose group spans hosts reduces inside each
// host first, two collectives more (forward and backward, host_reduce.h).
double StepOverhead(const Topology& topo, double ids_per_rank, bool any_data_parallel,
                    bool any_row_stat_exchange, bool any_host_reduce = false);

// A table whose return exchange the collection can reduce inside the owners' host before it
// crosses (host_reduce.h): table-row-wise and grid tables of host ranks whose hosts are not the
// whole world. The others of those types exchange flat (as row-wise does), which is how they are
// priced on host topologies, one host included.
bool CanReduceInsideHost(const Topology& topo, sharding::ShardingType type);

// Seconds of moving `bytes` of a sharded table's output exchange over collective `c` (see the
// definition for the host topologies' split between intra- and inter-node bandwidth).
double ExchangeSeconds(const Topology& topo, Collective c, double bytes);

// Whether the table's shards exchange row statistics each step: its rows are split into column
// shards (not data-parallel) and its optimizer (its own, else the topology's) keeps row
// statistics.
bool ExchangesRowStats(const Topology& topo, const sharding::TableConfig& table,
                       sharding::ShardingType type, const std::vector<sharding::Shard>& shards);

}  // namespace shardrec::planner
