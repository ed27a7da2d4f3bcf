// The planner's view of a tiered table (docs/disk-tier.md, "Planning"): its rows and optimizer
// state live on each rank's disk under a DRAM cache, so its shards take the cache, the store's
// index and the write-back queue in memory and their records on disk, and each step pays for the
// rows its cache misses at the disk's random-read rate.
#pragma once

#include <cstdint>

#include "impl/planner/estimator.h"
#include "impl/planner/topology.h"
#include "impl/sharding/types.h"

namespace shardrec::planner {

// What the planner knows of a tiered table (TableConstraints: tier_cache_bytes, tier_hit_rate,
// id_zipf_alpha). cache_bytes 0: the table is held in memory.
struct TierHint {
  int64_t cache_bytes = 0;  // DRAM of each rank's cache of the table
  double hit_rate = -1;     // the expected share of a step's distinct rows found in the cache;
                            // < 0: estimated from zipf_alpha
  double zipf_alpha = 0;    // the ids' Zipf exponent (0: uniform)
};

// Bytes of DRAM a cached row costs beyond its record (the cache's per-slot metadata).
inline constexpr int64_t kTierSlotOverhead = 32;
// Bytes of DRAM the store's in-memory index takes per row on disk (21-43 B, docs/disk-tier.md).
inline constexpr int64_t kTierIndexBytesPerRow = 32;
// The store reads whole 4 KiB pages; compaction lets a segment hold up to half dead records.
inline constexpr int64_t kTierPageBytes = 4096;
inline constexpr double kTierDiskSlack = 2.0;

// The record of one row: its weights at the table's dtype and its optimizer state (fp32).
int64_t TierRecordBytes(const sharding::TableConfig& table, optim::OptimizerType optimizer);

// The expected hit rate of a cache of `cache_rows` of `rows`: the hint's when given, else the
// share of the ids a cache of the hottest cache_rows rows sees under Zipf(alpha) ids (alpha 0:
// cache_rows / rows, uniform ids). A CLOCK cache holds about the hottest rows, so this is an
// upper estimate for it.
double TierHitRate(const TierHint& hint, double cache_rows, double rows);

// Rewrites the estimate `e` of shard `s` of tiered table `table` (hint.cache_bytes > 0), whose
// lookups serve `served_ids` ids a step: weights and optimizer state move to Storage::disk (the
// records in 4 KiB pages, times kTierDiskSlack); memory keeps the cache (its slots x (record +
// kTierSlotOverhead), at most the shard's rows), the write-back queue (one record per slot) and
// the index; Perf::prefetch becomes the step's misses (distinct rows x (1 - hit rate)) at the
// disk's IOPS and read bandwidth (a page each). Memory is all counted in Storage::weights.
void ApplyTier(const Topology& topo, const sharding::TableConfig& table, const TierHint& hint,
               const sharding::Shard& s, double served_ids, ShardEstimate* e);

}  // namespace shardrec::planner
