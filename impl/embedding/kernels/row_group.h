// Internal: groups the positions of ids by row (CSR -> CSC), the first step of every backward
// kernel. A stable sort, so each row's positions stay in increasing order: the per-row sums that
// follow have a fixed order and the results never depend on the thread count.
#pragma once

#include <cstdint>

#include "impl/embedding/kernels/kernels.h"

namespace shardrec::embedding::kernels::detail {

// The outcome lives in the workspace: ws->keys[k] for k in [segments[u], segments[u+1]) are the
// ids of unique row ws->unique_rows[u], in position order; the position is keys[k] & pos_mask.
struct RowGroups {
  const uint64_t* keys = nullptr;
  uint64_t pos_mask = 0;
  const int64_t* segments = nullptr;
  const int64_t* unique_rows = nullptr;
  int64_t num_unique = 0;
};

// rows[i] (i < n) are non-negative local row indices.
RowGroups GroupByRow(const int64_t* rows, int64_t n, Workspace* ws, ThreadPool* pool);

}  // namespace shardrec::embedding::kernels::detail
