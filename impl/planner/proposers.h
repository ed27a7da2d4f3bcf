// Proposers: which option each table uses (TorchRec's grid-search, greedy and uniform
// proposers). A proposal is one option index per table, into options sorted by Score.
#pragma once

#include <cstdint>
#include <vector>

#include "impl/planner/enumerator.h"

namespace shardrec::planner {

// TorchRec's MAX_PROPOSALS: grid search runs only when the product of option counts is at most
// this.
constexpr int64_t kMaxGridProposals = 10000;

// Sorts each table's options by their most expensive shard's cost (TorchRec's depth score),
// stable so that ties keep sharding-type order. The greedy pass by summed cost re-sorts.
void SortOptions(std::vector<std::vector<ShardingOption>>* options);

// Every proposal in a fixed order: grid search (if small), greedy by depth, greedy by sum,
// uniform; duplicates removed (first occurrence kept). Options must be sorted by SortOptions.
std::vector<std::vector<int32_t>> Propose(const std::vector<std::vector<ShardingOption>>& options);

}  // namespace shardrec::planner
