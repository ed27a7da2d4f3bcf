// Greedy partitioner. Order: fixed-rank options (DP, RW, even CW) first, then the rest by total
// storage descending (ties: table index), and again by total cost descending; the placement with
// the lower rating is kept. Node-level types (TWRW, TWCW, grid) pick nodes by
// summed cost; TW/CW shards go to the cheapest rank that fits, ties by (rank % L, rank).
#include "impl/planner/partitioner.h"

#include <algorithm>
#include <cstdio>
#include <numeric>

#include "impl/core/check.h"

namespace shardrec::planner {
namespace {

using sharding::ShardingType;

bool Allowed(const ShardingOption& opt, int32_t rank) {
  return std::binary_search(opt.allowed_ranks.begin(), opt.allowed_ranks.end(), rank);
}

class State {
 public:
  explicit State(const Topology& topo) : topo_(&topo) {
    for (int32_t r = 0; r < topo.world_size; ++r) free_.push_back(topo.UsableMemory(r));
    disk_free_.assign(static_cast<size_t>(topo.world_size), topo.disk_bytes);
    perf_.resize(topo.world_size);
    storage_.resize(topo.world_size);
  }

  // Memory, and for a tiered table's shard the rank's disk.
  bool Fits(int32_t rank, const ShardEstimate& e) const {
    return e.storage.total() <= free_[rank] && e.storage.disk <= disk_free_[rank];
  }
  void Place(int32_t rank, const ShardEstimate& e) {
    free_[rank] -= e.storage.total();
    disk_free_[rank] -= e.storage.disk;
    perf_[rank] += e.perf;
    storage_[rank] += e.storage;
  }
  double RankPerf(int32_t rank) const { return perf_[rank].total(); }
  double NodePerf(int32_t node) const {
    double s = 0;
    for (int32_t r = node * L(); r < node * L() + L(); ++r) s += RankPerf(r);
    return s;
  }
  int32_t L() const { return topo_->local_world_size; }
  int32_t Nodes() const { return topo_->world_size / topo_->local_world_size; }

  // Cheapest allowed rank that fits `e`, or -1.
  int32_t PickRank(const std::vector<int32_t>& allowed, const ShardEstimate& e) const {
    int32_t best = -1;
    for (int32_t r : allowed) {
      if (!Fits(r, e)) continue;
      if (best < 0) {
        best = r;
        continue;
      }
      const double pr = RankPerf(r), pb = RankPerf(best);
      if (pr < pb || (pr == pb && (r % L() < best % L() || (r % L() == best % L() && r < best))))
        best = r;
    }
    return best;
  }

  // Nodes in order of (summed cost, node index), limited to those that pass `ok`.
  template <typename Pred>
  std::vector<int32_t> NodesByPerf(Pred ok) const {
    std::vector<int32_t> nodes;
    for (int32_t n = 0; n < Nodes(); ++n) {
      if (ok(n)) nodes.push_back(n);
    }
    std::stable_sort(nodes.begin(), nodes.end(),
                     [&](int32_t a, int32_t b) { return NodePerf(a) < NodePerf(b); });
    return nodes;
  }

  void Fail(const ShardingOption& opt, int32_t shard, int64_t needed,
            const std::vector<int32_t>& allowed, FitFailure* f) const {
    f->table = opt.table;
    f->type = opt.type;
    f->shard = shard;
    f->needed = needed;
    f->largest_free = -1;
    for (int32_t r : allowed) {
      if (free_[r] > f->largest_free) {
        f->largest_free = free_[r];
        f->largest_free_rank = r;
      }
    }
    f->needed_disk = shard >= 0 && static_cast<size_t>(shard) < opt.estimates.size()
                         ? opt.estimates[static_cast<size_t>(shard)].storage.disk
                         : 0;
    f->largest_free_disk = 0;
    for (int32_t r : allowed) f->largest_free_disk = std::max(f->largest_free_disk, disk_free_[r]);
  }

  // Shards that must share one host (a table-row-wise group of row blocks, one per rank of the
  // host; or a table-column-wise table's shards, on any ranks of it): `needed` is the most one of
  // them needs (per_rank) or their sum. What the roomiest host offers is measured the same way:
  // the least free memory of its ranks (a host counts only when every one is allowed, as
  // TryNodeRowBlocks places), or the sum over its allowed ranks.
  void FailTogether(const ShardingOption& opt, int32_t shard, int64_t needed, int32_t together,
                    bool per_rank, FitFailure* f) const {
    Fail(opt, shard, needed, opt.allowed_ranks, f);
    f->together = together;
    f->per_rank = per_rank;
    f->host_free = -1;
    for (int32_t n = 0; n < Nodes(); ++n) {
      int64_t least = -1, sum = 0;
      bool every = true;
      for (int32_t r = n * L(); r < n * L() + L(); ++r) {
        if (!Allowed(opt, r)) {
          every = false;
          continue;
        }
        least = least < 0 ? free_[r] : std::min(least, free_[r]);
        sum += free_[r];
      }
      if (per_rank && !every) continue;
      const int64_t offered = per_rank ? least : sum;
      if (least >= 0 && offered > f->host_free) {
        f->host_free = offered;
        f->host = n;
      }
    }
  }

  const std::vector<Perf>& perf() const { return perf_; }
  const std::vector<Storage>& storage() const { return storage_; }

 private:
  const Topology* topo_;
  std::vector<int64_t> free_;
  std::vector<Perf> perf_;
  std::vector<int64_t> disk_free_;
  std::vector<Storage> storage_;
};

// Places L row blocks (shards [first, first+L)) on node `n` if every one fits.
bool TryNodeRowBlocks(State& st, const ShardingOption& opt, size_t first, int32_t n,
                      sharding::TablePlan* tp) {
  const int32_t L = st.L();
  for (int32_t i = 0; i < L; ++i) {
    if (!Allowed(opt, n * L + i) || !st.Fits(n * L + i, opt.estimates[first + i])) return false;
  }
  for (int32_t i = 0; i < L; ++i) {
    st.Place(n * L + i, opt.estimates[first + i]);
    tp->shards[first + i].rank = n * L + i;
  }
  return true;
}

bool PlaceOption(State& st, const ShardingOption& opt, sharding::TablePlan* tp, FitFailure* f) {
  const int32_t L = st.L();
  tp->type = opt.type;
  tp->shards = opt.shards;
  if (opt.fixed_ranks) {
    for (size_t i = 0; i < opt.shards.size(); ++i) {
      const int32_t r = opt.shards[i].rank;
      if (!st.Fits(r, opt.estimates[i])) {
        st.Fail(opt, static_cast<int32_t>(i), opt.estimates[i].storage.total(), {r}, f);
        return false;
      }
      st.Place(r, opt.estimates[i]);
    }
    return true;
  }
  switch (opt.type) {
    case ShardingType::kTableWise:
    case ShardingType::kColumnWise:
      for (size_t i = 0; i < opt.shards.size(); ++i) {
        const int32_t r = st.PickRank(opt.allowed_ranks, opt.estimates[i]);
        if (r < 0) {
          st.Fail(opt, static_cast<int32_t>(i), opt.estimates[i].storage.total(), opt.allowed_ranks,
                  f);
          return false;
        }
        st.Place(r, opt.estimates[i]);
        tp->shards[i].rank = r;
      }
      return true;
    case ShardingType::kTableRowWise:
    case ShardingType::kGrid:
      // TWRW is one group of L row blocks; grid is one group per column block, and each group
      // picks the cheapest node again, which spreads column blocks over nodes.
      for (size_t first = 0; first < opt.shards.size(); first += L) {
        bool placed = false;
        for (int32_t n : st.NodesByPerf([](int32_t) { return true; })) {
          if (TryNodeRowBlocks(st, opt, first, n, tp)) {
            placed = true;
            break;
          }
        }
        if (!placed) {
          int64_t most = 0;
          for (size_t i = first; i < first + static_cast<size_t>(L); ++i)
            most = std::max(most, opt.estimates[i].storage.total());
          st.FailTogether(opt, static_cast<int32_t>(first), most, L, /*per_rank=*/true, f);
          return false;
        }
      }
      return true;
    case ShardingType::kTableColumnWise: {
      // Try nodes in cost order; inside a node, shards go to its cheapest fitting ranks.
      for (int32_t n : st.NodesByPerf([&](int32_t node) {
             for (int32_t r = node * L; r < node * L + L; ++r)
               if (Allowed(opt, r)) return true;
             return false;
           })) {
        State trial = st;
        std::vector<int32_t> ranks;
        for (int32_t r = n * L; r < n * L + L; ++r)
          if (Allowed(opt, r)) ranks.push_back(r);
        bool ok = true;
        std::vector<int32_t> chosen;
        for (size_t i = 0; i < opt.shards.size() && ok; ++i) {
          const int32_t r = trial.PickRank(ranks, opt.estimates[i]);
          if (r < 0) {
            ok = false;
            break;
          }
          trial.Place(r, opt.estimates[i]);
          chosen.push_back(r);
        }
        if (ok) {
          st = trial;
          for (size_t i = 0; i < chosen.size(); ++i) tp->shards[i].rank = chosen[i];
          return true;
        }
      }
      st.FailTogether(opt, 0, opt.SumStorage(), static_cast<int32_t>(opt.shards.size()),
                      /*per_rank=*/false, f);
      return false;
    }
    case ShardingType::kDataParallel:
    case ShardingType::kRowWise:
      break;  // always fixed_ranks
  }
  SR_CHECK(false);
  return false;
}

// Places the fixed-rank options, then `rest` in its order.
bool PlaceInOrder(const std::vector<const ShardingOption*>& fixed,
                  const std::vector<const ShardingOption*>& rest, size_t tables,
                  const Topology& topo, Placement* out, FitFailure* failure) {
  State st(topo);
  Placement p;
  p.table_plans.resize(tables);
  for (const auto* list : {&fixed, &rest}) {
    for (const ShardingOption* opt : *list) {
      if (!PlaceOption(st, *opt, &p.table_plans[opt->table], failure)) return false;
    }
  }
  p.rank_perf = st.perf();
  p.rank_storage = st.storage();
  for (const Perf& rp : p.rank_perf) p.rating = std::max(p.rating, rp.total());
  *out = std::move(p);
  return true;
}

}  // namespace

bool Partition(const std::vector<std::vector<ShardingOption>>& options,
               const std::vector<int32_t>& proposal, const Topology& topo, Placement* out,
               FitFailure* failure) {
  SR_CHECK(options.size() == proposal.size());
  std::vector<const ShardingOption*> fixed, rest;
  for (size_t t = 0; t < options.size(); ++t) {
    const ShardingOption* opt = &options[t][proposal[t]];
    (opt->fixed_ranks ? fixed : rest).push_back(opt);
  }
  // TorchRec's order: largest storage first, which packs memory well but can leave the cost
  // lopsided (8 table-wise tables of two widths: three wide ones on one rank, one wide and four
  // narrow on the other). The largest cost first (longest-processing-time order) balances cost;
  // both are placed and the lower rating kept, ties and memory permitting TorchRec's.
  std::vector<const ShardingOption*> by_cost = rest;
  std::stable_sort(rest.begin(), rest.end(), [](const ShardingOption* a, const ShardingOption* b) {
    return a->SumStorage() > b->SumStorage();
  });
  std::stable_sort(
      by_cost.begin(), by_cost.end(),
      [](const ShardingOption* a, const ShardingOption* b) { return a->SumPerf() > b->SumPerf(); });
  const bool storage_fits = PlaceInOrder(fixed, rest, options.size(), topo, out, failure);
  if (by_cost == rest) return storage_fits;
  Placement alt;
  FitFailure alt_failure;
  if (!PlaceInOrder(fixed, by_cost, options.size(), topo, &alt, &alt_failure)) return storage_fits;
  if (!storage_fits || alt.rating < out->rating) *out = std::move(alt);
  return true;
}

std::string FormatBytes(int64_t bytes) {
  char buf[64];
  const double b = static_cast<double>(bytes);
  if (b >= kGiB)
    std::snprintf(buf, sizeof(buf), "%.2f GiB", b / kGiB);
  else if (b >= 1024.0 * 1024.0)
    std::snprintf(buf, sizeof(buf), "%.2f MiB", b / (1024.0 * 1024.0));
  else if (b >= 1024.0)
    std::snprintf(buf, sizeof(buf), "%.2f KiB", b / 1024.0);
  else
    std::snprintf(buf, sizeof(buf), "%lld B", static_cast<long long>(bytes));
  return StrCat(buf, " (", bytes, " bytes)");
}

std::string FitFailureMessage(const FitFailure& f, const std::vector<sharding::TableConfig>& tables,
                              const Topology& topo) {
  const auto& t = tables[static_cast<size_t>(f.table)];
  if (f.needed_disk > 0 && f.largest_free >= f.needed && f.needed_disk > f.largest_free_disk)
    return StrCat(
        "planner: tiered table '", t.name, "' (", t.rows, " x ", t.dim, ", ", DTypeName(t.dtype),
        ") does not fit on disk: its ", sharding::ShardingTypeName(f.type), " shard ", f.shard,
        " needs ", FormatBytes(f.needed_disk),
        " of disk for its records (4 KiB pages, x2 for compaction) but the most any "
        "allowed rank has left is ",
        FormatBytes(f.largest_free_disk), " (topology disk_capacity ", FormatBytes(topo.disk_bytes),
        " per rank). Remedies: more ranks, a larger disk_capacity, or the table in "
        "memory");
  if (f.together > 1 && f.needed_disk == 0) {
    const std::string host_text =
        f.host_free < 0 ? std::string(f.per_rank ? "no host has every rank allowed"
                                                 : "no host has an allowed rank")
        : f.per_rank
            ? StrCat("no host has that free on each of its ranks (the most is ",
                     FormatBytes(f.host_free), " on every rank of host ", f.host, ")")
            : StrCat("no host has room for them (the most free on one host's ranks together is ",
                     FormatBytes(f.host_free), ", on host ", f.host,
                     ", and each shard must fit one rank)");
    return StrCat("planner: table '", t.name, "' (", t.rows, " x ", t.dim, ", ", DTypeName(t.dtype),
                  ") does not fit: its ", f.together, " ", sharding::ShardingTypeName(f.type),
                  " shards from shard ", f.shard, " must share one host, ",
                  f.per_rank ? "one per rank, and need up to " : "and need ", FormatBytes(f.needed),
                  f.per_rank ? " each" : " together", ", but ", host_text, " (", topo.world_size,
                  " ranks, ", topo.local_world_size,
                  " per host). Remedies: more ranks or hosts, more memory per rank, a smaller "
                  "table, batch or optimizer, another sharding type, or fewer constraints");
  }
  std::string free_text = f.largest_free < 0
                              ? std::string("no allowed rank has free memory")
                              : StrCat("the largest free capacity is ", FormatBytes(f.largest_free),
                                       " on rank ", f.largest_free_rank);
  return StrCat("planner: table '", t.name, "' (", t.rows, " x ", t.dim, ", ", DTypeName(t.dtype),
                ") does not fit: its ", sharding::ShardingTypeName(f.type), " shard ", f.shard,
                " needs ", FormatBytes(f.needed),
                t.dynamic.enabled ? " (weights, optimizer state, the dynamic table's metadata and "
                                    "I/O buffers) but "
                                  : " (weights, optimizer state and I/O buffers) but ",
                free_text, " (of ", FormatBytes(topo.UsableMemory(f.largest_free_rank)),
                " usable there; ", topo.world_size,
                " ranks). Remedies: "
                "more ranks, more memory per rank, a smaller table, batch or optimizer, or "
                "fewer constraints");
}

}  // namespace shardrec::planner
