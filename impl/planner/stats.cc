// Planner statistics text. Fixed-width columns; numbers formatted with snprintf so the text
// is identical on every rank.
#include "impl/planner/stats.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>

#include "impl/planner/planner.h"
#include "impl/sharding/layout.h"

namespace shardrec::planner {
namespace {

std::string Fmt(const char* fmt, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), fmt, v);
  return buf;
}

std::string Pad(const std::string& s, size_t w, bool right = false) {
  if (s.size() >= w) return s;
  return right ? std::string(w - s.size(), ' ') + s : s + std::string(w - s.size(), ' ');
}

std::string Mib(int64_t bytes) {
  return Fmt("%.2f", static_cast<double>(bytes) / (1024.0 * 1024.0));
}

std::string Row(const std::vector<std::string>& cells, const std::vector<size_t>& widths) {
  std::string line;
  for (size_t i = 0; i < cells.size(); ++i) {
    line += (i ? " | " : "") + Pad(cells[i], widths[i], i > 0 && i + 1 < cells.size());
  }
  while (!line.empty() && line.back() == ' ') line.pop_back();
  return line + "\n";
}

std::string Table(const std::vector<std::string>& header,
                  const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> widths(header.size());
  for (size_t i = 0; i < header.size(); ++i) widths[i] = header[i].size();
  for (const auto& r : rows) {
    for (size_t i = 0; i < r.size(); ++i) widths[i] = std::max(widths[i], r[i].size());
  }
  std::string out = Row(header, widths);
  size_t total = 0;
  for (size_t w : widths) total += w + 3;
  out += std::string(total - 3, '-') + "\n";
  for (const auto& r : rows) out += Row(r, widths);
  return out;
}

}  // namespace

std::string FormatStats(const sharding::Plan& plan, const Topology& topo,
                        const std::vector<std::vector<float>>& pooling_factors,
                        const StatsInfo& info) {
  const PlanEstimate est = EstimatePlan(plan, topo, pooling_factors, &info.tiers);
  const auto tiered = [&](size_t t) {
    return t < info.tiers.size() && info.tiers[t].cache_bytes > 0;
  };
  bool any_tiered = false;
  for (size_t t = 0; t < plan.tables.size(); ++t) any_tiered = any_tiered || tiered(t);
  std::string out = "--- shardrec planner statistics ---\n";
  out +=
      StrCat("world_size ", plan.world_size, ", ranks_per_node ", plan.local_world_size,
             ", device ", topo.device == ComputeDevice::kCuda ? "cuda" : "host", ", batch_size ",
             topo.batch_size, " per rank, optimizer ", optim::OptimizerName(topo.optimizer), "\n");
  if (info.planned) {
    out += StrCat("evaluated ", info.proposals, " proposal(s), ", info.feasible,
                  " fit in memory; the cheapest was chosen\n");
  } else {
    out += "plan read from text: estimates assume this default topology\n";
  }
  // Bandwidths are stored in bytes/ms; printed in GiB/s.
  auto gibs = [](double bytes_per_ms) { return Fmt("%.3g GiB/s", bytes_per_ms * 1000.0 / kGiB); };
  out += StrCat("model: kernel memory ", gibs(topo.KernelBandwidth(false)), ", intra-node ",
                gibs(topo.intra_node_bw), ", inter-node ", gibs(topo.inter_node_bw),
                ", collective latency ", Fmt("%.3g ms", topo.collective_latency_ms), ", host work ",
                Fmt("%.3g ns/id", topo.per_id_ms * 1e6), "\n");
  if (any_tiered)
    out += StrCat("disk (tiered tables): ", gibs(topo.disk_read_bw), " and ",
                  Fmt("%.4g", topo.disk_read_iops * 1000.0), " random reads/s per rank, capacity ",
                  Mib(topo.disk_bytes), " MiB per rank\n");
  double max_perf = 0;
  for (const auto& p : est.rank_perf) max_perf = std::max(max_perf, p.total());
  out += "estimated step cost of the busiest rank: " + Fmt("%.6g", max_perf) + " ms\n\n";

  // Shards by type per rank.
  std::vector<std::map<int32_t, int>> by_type(plan.world_size);
  std::vector<std::set<size_t>> tables_on(plan.world_size);
  for (size_t t = 0; t < plan.tables.size(); ++t) {
    for (const auto& s : plan.table_plans[t].shards) {
      ++by_type[s.rank][static_cast<int32_t>(plan.table_plans[t].type)];
      tables_on[s.rank].insert(t);
    }
  }
  std::vector<std::vector<std::string>> rows;
  for (int32_t r = 0; r < plan.world_size; ++r) {
    const int64_t used = est.rank_storage[r].total();
    const int64_t cap = topo.UsableMemory(r);
    const Perf& p = est.rank_perf[r];
    std::string shards;
    for (const auto& [type, n] : by_type[r]) {
      shards += StrCat(shards.empty() ? "" : " ",
                       sharding::ShardingTypeShortName(static_cast<sharding::ShardingType>(type)),
                       ":", n);
    }
    rows.push_back({StrCat(r), Mib(used), Mib(cap),
                    Fmt("%.1f%%", cap > 0 ? 100.0 * static_cast<double>(used) / cap : 0.0),
                    Fmt("%.6g", p.total()),
                    Fmt("%.3g", p.fwd_compute) + "," + Fmt("%.3g", p.fwd_comms) + "," +
                        Fmt("%.3g", p.bwd_compute) + "," + Fmt("%.3g", p.bwd_comms) + "," +
                        Fmt("%.3g", p.overhead) +
                        (any_tiered ? "," + Fmt("%.3g", p.prefetch) : std::string()),
                    Mib(est.rank_storage[r].input), Mib(est.rank_storage[r].output),
                    StrCat(tables_on[r].size()), shards.empty() ? "-" : shards});
  }
  out += Table({"Rank", "Used (MiB)", "Capacity (MiB)", "Used %", "Cost (ms)",
                any_tiered ? "fwd_cmp,fwd_comm,bwd_cmp,bwd_comm,overhead,miss_reads (ms)"
                           : "fwd_cmp,fwd_comm,bwd_cmp,bwd_comm,overhead (ms)",
                "Input (MiB)", "Output (MiB)", "Tables", "Shards"},
               rows);
  out += "\n";

  rows.clear();
  for (size_t t = 0; t < plan.tables.size(); ++t) {
    const auto& tc = plan.tables[t];
    const auto& tp = plan.table_plans[t];
    std::set<int32_t> ranks;
    std::set<int32_t> widths;
    for (const auto& s : tp.shards) {
      ranks.insert(s.rank);
      widths.insert(s.cols);
    }
    std::string rank_text;
    for (int32_t r : ranks) rank_text += StrCat(rank_text.empty() ? "" : ",", r);
    std::string dim_text = StrCat(tc.dim);
    if (widths.size() == 1 && *widths.begin() != tc.dim)
      dim_text += StrCat(" (", *widths.begin(), ")");
    double pf = 0;
    for (float p : pooling_factors[t]) pf += p;
    // A dynamic table's rows are its capacity (docs/dynamic-tables.md).
    // Given in bytes: the figure the slots were resolved from, too.
    const std::string rows_text =
        !tc.dynamic.enabled ? StrCat(tc.rows)
        : tc.dynamic.capacity_bytes > 0
            ? StrCat(tc.rows, " (dynamic, ", tc.dynamic.capacity_bytes, " bytes)")
            : StrCat(tc.rows, " (dynamic)");
    rows.push_back({tc.name, sharding::ShardingTypeShortName(tp.type), rows_text, dim_text,
                    DTypeName(tc.dtype), StrCat(tp.shards.size()), rank_text,
                    Fmt("%.6g", est.table_perf[t].total()), Mib(est.table_storage[t].total()),
                    Fmt("%.3g", pf), StrCat(tc.features.size())});
    if (any_tiered) {
      // Tiered: the cache per rank, the records on disk, the expected hit rate of the largest
      // shard and the step's miss reads (ms, summed over shards).
      std::string tier = "-";
      if (tiered(t)) {
        int64_t rows_max = 0;
        int32_t cols = tc.dim;
        for (const auto& s : tp.shards)
          if (s.rows > rows_max) rows_max = s.rows, cols = s.cols;
        sharding::TableConfig c = tc;
        c.dim = cols;
        const auto optimizer = tc.has_optimizer ? tc.optimizer.type : topo.optimizer;
        const double slots = std::min<double>(
            static_cast<double>(rows_max),
            std::floor(static_cast<double>(info.tiers[t].cache_bytes) /
                       static_cast<double>(TierRecordBytes(c, optimizer) + kTierSlotOverhead)));
        tier = StrCat("cache ", Mib(info.tiers[t].cache_bytes), " MiB, disk ",
                      Mib(est.table_storage[t].disk), " MiB, hit ",
                      Fmt("%.2f", TierHitRate(info.tiers[t], slots, static_cast<double>(rows_max))),
                      ", miss reads ", Fmt("%.3g", est.table_perf[t].prefetch), " ms");
      }
      rows.back().push_back(tier);
    }
  }
  std::vector<std::string> header = {
      "Table",   "Sharding", "Rows",      "Dim (CW dim)",  "Weights",
      "Shards",  "Ranks",    "Cost (ms)", "Storage (MiB)", "Sum pooling (ids/sample)",
      "Features"};
  if (any_tiered) header.push_back("Tier (docs/disk-tier.md)");
  out += Table(header, rows);
  out +=
      "Cost: TorchRec's perf model per training step (ms), plus on each rank the overhead no "
      "shard owns (collective latency, per-id host work); storage: weights (in the table's "
      "Weights type; an FP8 row also holds its 4-byte scale) + optimizer state + "
      "dynamic tables' metadata + I/O buffers (MiB = 2^20 bytes, GiB = 2^30 bytes).\n";
  if (any_tiered)
    out +=
        "Tiered tables: storage is their memory (cache + write-back queue + the store's index); "
        "their rows and optimizer state are on disk (records in 4 KiB pages, x2 for compaction), "
        "and their cost includes the reads of the rows the cache misses per step.\n";
  // A column-wise table that stayed whole looks like table-wise: say so, and why.
  for (size_t t = 0; t < plan.tables.size(); ++t) {
    const auto& tc = plan.tables[t];
    const auto& tp = plan.table_plans[t];
    const bool column_split = tp.type == sharding::ShardingType::kColumnWise ||
                              tp.type == sharding::ShardingType::kTableColumnWise;
    if (!column_split || tp.shards.size() != 1) continue;
    const int32_t lower = t < info.min_partition.size() && info.min_partition[t] > 0
                              ? info.min_partition[t]
                              : sharding::kDefaultMinPartition;
    out += StrCat("note: column-wise table '", tc.name, "' was not split: its dim ", tc.dim,
                  " has no column block of at least min_partition = ", lower,
                  " that is a multiple of 4 and divides it (TorchRec's rule); set a smaller "
                  "min_partition in its constraints to split it\n");
  }
  // A plan read from text may carry any finite pooling factor; its estimates were capped.
  for (size_t t = 0; t < plan.tables.size() && t < pooling_factors.size(); ++t) {
    for (size_t k = 0; k < pooling_factors[t].size() && k < plan.tables[t].features.size(); ++k) {
      Status s =
          CheckPoolingFactor(plan.tables[t].name, plan.features[plan.tables[t].features[k]].name,
                             pooling_factors[t][k], topo.batch_size);
      if (!s.ok()) out += StrCat("note: ", s.message(), "; its estimates are saturated\n");
    }
  }
  return out;
}

}  // namespace shardrec::planner
