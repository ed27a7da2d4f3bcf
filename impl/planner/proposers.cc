// Proposers. The greedy proposer walks each table down its sorted options, always advancing
// the table whose current option needs the most memory, so early proposals are the cheapest
// and later ones trade cost for memory.
#include "impl/planner/proposers.h"

#include <algorithm>
#include <set>
#include <tuple>

namespace shardrec::planner {
namespace {

using Proposal = std::vector<int32_t>;

void GridSearch(const std::vector<std::vector<ShardingOption>>& options,
                std::vector<Proposal>* out) {
  int64_t product = 1;
  for (const auto& o : options) {
    product *= static_cast<int64_t>(o.size());
    if (product > kMaxGridProposals) return;
  }
  Proposal p(options.size(), 0);
  for (int64_t n = 0; n < product; ++n) {
    out->push_back(p);
    for (size_t t = p.size(); t-- > 0;) {  // odometer, last table fastest
      if (++p[t] < static_cast<int32_t>(options[t].size())) break;
      p[t] = 0;
    }
  }
}

// Options of table t in the order this greedy pass visits them.
std::vector<int32_t> GreedyOrder(const std::vector<ShardingOption>& opts, bool use_depth) {
  std::vector<int32_t> order(opts.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int32_t>(i);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    const double sa = use_depth ? opts[a].MaxShardPerf() : opts[a].SumPerf();
    const double sb = use_depth ? opts[b].MaxShardPerf() : opts[b].SumPerf();
    return sa < sb;
  });
  return order;
}

void Greedy(const std::vector<std::vector<ShardingOption>>& options, bool use_depth,
            std::vector<Proposal>* out) {
  const size_t T = options.size();
  std::vector<std::vector<int32_t>> order(T);
  for (size_t t = 0; t < T; ++t) order[t] = GreedyOrder(options[t], use_depth);
  std::vector<size_t> pos(T, 0);
  while (true) {
    Proposal p(T);
    for (size_t t = 0; t < T; ++t) p[t] = order[t][pos[t]];
    out->push_back(std::move(p));
    // Advance the table whose current option has the largest (max shard, total) storage.
    int best = -1;
    std::tuple<int64_t, int64_t> best_key{-1, -1};
    for (size_t t = 0; t < T; ++t) {
      if (pos[t] + 1 >= order[t].size()) continue;
      const ShardingOption& o = options[t][order[t][pos[t]]];
      std::tuple<int64_t, int64_t> key{o.MaxShardStorage(), o.SumStorage()};
      if (key > best_key) {
        best_key = key;
        best = static_cast<int>(t);
      }
    }
    if (best < 0) return;
    ++pos[static_cast<size_t>(best)];
  }
}

void Uniform(const std::vector<std::vector<ShardingOption>>& options, std::vector<Proposal>* out) {
  for (int32_t type = 0; type < sharding::kNumShardingTypes; ++type) {
    Proposal p;
    for (const auto& opts : options) {
      int32_t found = -1;
      for (size_t i = 0; i < opts.size() && found < 0; ++i) {
        if (static_cast<int32_t>(opts[i].type) == type) found = static_cast<int32_t>(i);
      }
      if (found < 0) break;
      p.push_back(found);
    }
    if (p.size() == options.size()) out->push_back(std::move(p));
  }
}

}  // namespace

void SortOptions(std::vector<std::vector<ShardingOption>>* options) {
  for (auto& opts : *options) {
    std::stable_sort(opts.begin(), opts.end(),
                     [](const ShardingOption& a, const ShardingOption& b) {
                       return a.MaxShardPerf() < b.MaxShardPerf();
                     });
  }
}

std::vector<std::vector<int32_t>> Propose(const std::vector<std::vector<ShardingOption>>& options) {
  std::vector<Proposal> all;
  GridSearch(options, &all);
  Greedy(options, /*use_depth=*/true, &all);
  Greedy(options, /*use_depth=*/false, &all);
  Uniform(options, &all);
  std::set<Proposal> seen;
  std::vector<Proposal> unique;
  for (auto& p : all) {
    if (seen.insert(p).second) unique.push_back(std::move(p));
  }
  return unique;
}

}  // namespace shardrec::planner
