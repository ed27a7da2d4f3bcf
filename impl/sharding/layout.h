// Shard layout calculators: the exact row-block and column-block rules of each sharding type
// (TorchRec's), shared by the planner (to enumerate options) and the validator (to check them).
#pragma once

#include <cstdint>
#include <vector>

#include "impl/sharding/types.h"

namespace shardrec::sharding {

// TorchRec's default lower bound of a column block (MIN_CW_DIM).
constexpr int32_t kDefaultMinPartition = 128;

// Row counts of `parts` ceil-sized blocks: block = ceil(rows/parts); the first rows/block ranks
// get `block`, the next gets the remainder, the rest get 0 (5 rows on 4: 2,2,1,0; 10 on 4:
// 3,3,3,1). Matches the bucketizer (row r lives in block r / block).
std::vector<int64_t> RowBlockSizes(int64_t rows, int32_t parts);

// The block size ceil(rows/parts) used by the bucketizer (at least 1).
int64_t RowBlockSize(int64_t rows, int32_t parts);

// Column block width: the smallest i in [lower, dim) with dim % i == 0, i % 4 == 0 and at most
// 4096 blocks (dim / i), where lower = min_partition (or kDefaultMinPartition when <= 0); dim
// itself when there is none.
int32_t ColumnBlockDim(int32_t dim, int32_t min_partition);

// Full-table shard on `rank`.
TablePlan MakeTableWise(const TableConfig& table, int32_t rank);

// One full-table shard per rank 0..world-1.
TablePlan MakeDataParallel(const TableConfig& table, int32_t world);

// Ceil row blocks on ranks 0..world-1 (empty tail shards kept).
TablePlan MakeRowWise(const TableConfig& table, int32_t world);

// Ceil row blocks over the `local_world` ranks of `node` (ranks node*L .. node*L+L-1).
TablePlan MakeTableRowWise(const TableConfig& table, int32_t node, int32_t local_world);

// Full-height column blocks in column order; shard k has width widths[k] and goes to ranks[k]
// (widths must sum to the dim; ranks.size() == widths.size()).
TablePlan MakeColumnSplit(const TableConfig& table, ShardingType type,
                          const std::vector<int32_t>& widths, const std::vector<int32_t>& ranks);

// Equal column widths of `block_dim` (dim / block_dim blocks).
std::vector<int32_t> EqualColumnWidths(int32_t dim, int32_t block_dim);

// Grid: column blocks of `widths`; column block k is row-split (ceil) over the ranks of node
// nodes[k].
TablePlan MakeGrid(const TableConfig& table, const std::vector<int32_t>& widths,
                   const std::vector<int32_t>& nodes, int32_t local_world);

}  // namespace shardrec::sharding
