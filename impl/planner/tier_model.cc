// The storage and miss cost of a tiered table's shards (tier_model.h).
#include "impl/planner/tier_model.h"

#include <algorithm>
#include <cmath>

namespace shardrec::planner {
namespace {

// The generalized harmonic number H(n, alpha) = sum_{k=1..n} k^-alpha, by its integral bound
// (1 + the integral from 1 to n): within a few percent from n = 10 on, which is what a hit-rate
// estimate needs, at O(1) for tables of billions of rows.
double Harmonic(double n, double alpha) {
  if (n <= 1) return std::max(n, 0.0);
  if (std::fabs(alpha - 1.0) < 1e-9) return 1.0 + std::log(n);
  return 1.0 + (std::pow(n, 1.0 - alpha) - 1.0) / (1.0 - alpha);
}

int64_t Saturate(double v) {
  if (!(v > 0)) return 0;
  return v >= static_cast<double>(kMaxEstimateBytes) ? kMaxEstimateBytes
                                                     : static_cast<int64_t>(std::ceil(v));
}

}  // namespace

int64_t TierRecordBytes(const sharding::TableConfig& table, optim::OptimizerType optimizer) {
  return static_cast<int64_t>(table.dim) * DTypeSize(table.dtype) +
         OptimizerStateBytes(optimizer, 1, table.dim);
}

double TierHitRate(const TierHint& hint, double cache_rows, double rows) {
  if (hint.hit_rate >= 0) return std::min(hint.hit_rate, 1.0);
  if (!(rows > 0) || cache_rows >= rows) return 1.0;
  if (!(cache_rows > 0)) return 0.0;
  if (!(hint.zipf_alpha > 0)) return cache_rows / rows;
  return std::min(1.0, Harmonic(cache_rows, hint.zipf_alpha) / Harmonic(rows, hint.zipf_alpha));
}

void ApplyTier(const Topology& topo, const sharding::TableConfig& table, const TierHint& hint,
               const sharding::Shard& s, double served_ids, ShardEstimate* e) {
  if (hint.cache_bytes <= 0 || s.rows <= 0) return;
  const auto optimizer = table.has_optimizer ? table.optimizer.type : topo.optimizer;
  // A column shard's record holds its columns only.
  sharding::TableConfig cols = table;
  cols.dim = s.cols;
  const double record = static_cast<double>(TierRecordBytes(cols, optimizer));
  const double rows = static_cast<double>(s.rows);
  const double slots = std::min(
      rows, std::floor(static_cast<double>(hint.cache_bytes) / (record + kTierSlotOverhead)));
  // Records never straddle a page: whole records per page, or whole pages per record.
  const double per_page = std::floor(static_cast<double>(kTierPageBytes) / (record + 16.0));
  const double pages = per_page >= 1 ? std::ceil(rows / per_page)
                                     : rows * std::ceil((record + 16.0) / kTierPageBytes);
  Storage& m = e->storage;
  m.disk = Saturate(pages * kTierPageBytes * kTierDiskSlack);
  // The cache, the write-back queue (as many records as slots) and the index, all counted as the
  // table's memory; the optimizer state is in the records.
  m.weights = Saturate(slots * (2 * record + kTierSlotOverhead) + rows * kTierIndexBytesPerRow);
  m.optimizer = 0;
  // Each distinct row of a step that the cache misses costs one page read.
  const double unique = ExpectedUniqueRows(served_ids, rows);
  const double misses = unique * (1.0 - TierHitRate(hint, slots, rows));
  e->perf.prefetch = misses / topo.disk_read_iops +
                     misses * static_cast<double>(kTierPageBytes) / topo.disk_read_bw;
}

}  // namespace shardrec::planner
