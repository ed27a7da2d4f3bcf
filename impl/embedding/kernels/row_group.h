// Internal: groups the ids of a shard by row (CSR -> CSC), the first step of every backward
// kernel. A stable sort, so each row's positions stay in increasing order: the per-row sums that
// follow have a fixed order and the results never depend on the thread count.
#pragma once

#include <cstdint>
#include <span>

#include "impl/core/exec.h"
#include "impl/embedding/kernels/backward_workspace.h"
#include "impl/embedding/kernels/kernels.h"

namespace shardrec::embedding::kernels::detail {

// A view of the grouping held in a workspace: keys[k] for k in [segments[u], segments[u+1]) are
// the ids of unique row unique_rows[u], in position order; keys[k] & index_mask is the id's bag
// (keyed_by_bag) or its position (backward_workspace.h, Grouping).
struct RowGroups {
  const uint64_t* keys = nullptr;
  uint64_t index_mask = 0;
  bool keyed_by_bag = false;
  const int64_t* segments = nullptr;
  const int64_t* unique_rows = nullptr;
  int64_t num_unique = 0;
  int64_t num_keys = 0;  // segments[num_unique]
};

// Sorts the ids of `runs` (numbered in run order) into the workspace and records the grouping.
void BuildGroups(const ExecContext& ctx, std::span<const BagRun> runs, int64_t n,
                 const WorkspaceLayout& layout, void* workspace);

// The grouping a previous BuildGroups left in `workspace`.
RowGroups ReadGroups(void* workspace, const WorkspaceLayout& layout);

}  // namespace shardrec::embedding::kernels::detail
