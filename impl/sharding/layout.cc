// Shard layout calculators (see layout.h for the rules).
#include "impl/sharding/layout.h"

#include "impl/core/check.h"

namespace shardrec::sharding {

int64_t RowBlockSize(int64_t rows, int32_t parts) {
  SR_CHECK(parts >= 1 && rows >= 0);
  int64_t block = rows / parts + (rows % parts != 0 ? 1 : 0);  // ceil without overflow
  return block < 1 ? 1 : block;
}

std::vector<int64_t> RowBlockSizes(int64_t rows, int32_t parts) {
  const int64_t block = RowBlockSize(rows, parts);
  std::vector<int64_t> sizes(static_cast<size_t>(parts), 0);
  int64_t left = rows;
  for (auto& s : sizes) {
    s = left < block ? left : block;
    left -= s;
  }
  return sizes;
}

int32_t ColumnBlockDim(int32_t dim, int32_t min_partition) {
  // At most kMaxColumnBlocks blocks: a table of a huge dim split into blocks of a few columns
  // would make millions of shards (found by fuzz_create: a plan of 0.5 GiB of shard records).
  constexpr int32_t kMaxColumnBlocks = 4096;
  const int32_t lower = min_partition > 0 ? min_partition : kDefaultMinPartition;
  for (int32_t i = lower; i < dim; ++i) {
    if (dim % i == 0 && i % 4 == 0 && dim / i <= kMaxColumnBlocks) return i;
  }
  return dim;
}

namespace {
Shard Rect(int64_t row_offset, int64_t rows, int32_t col_offset, int32_t cols, int32_t rank) {
  Shard s;
  s.row_offset = row_offset;
  s.rows = rows;
  s.col_offset = col_offset;
  s.cols = cols;
  s.rank = rank;
  return s;
}

void AppendRowBlocks(const TableConfig& table, int32_t col_offset, int32_t cols, int32_t first_rank,
                     int32_t parts, std::vector<Shard>* out) {
  int64_t offset = 0;
  int32_t r = first_rank;
  for (int64_t rows : RowBlockSizes(table.rows, parts)) {
    out->push_back(Rect(offset, rows, col_offset, cols, r++));
    offset += rows;
  }
}
}  // namespace

TablePlan MakeTableWise(const TableConfig& table, int32_t rank) {
  return TablePlan{ShardingType::kTableWise, {Rect(0, table.rows, 0, table.dim, rank)}};
}

TablePlan MakeDataParallel(const TableConfig& table, int32_t world) {
  TablePlan p{ShardingType::kDataParallel, {}};
  for (int32_t r = 0; r < world; ++r) p.shards.push_back(Rect(0, table.rows, 0, table.dim, r));
  return p;
}

TablePlan MakeRowWise(const TableConfig& table, int32_t world) {
  TablePlan p{ShardingType::kRowWise, {}};
  AppendRowBlocks(table, 0, table.dim, 0, world, &p.shards);
  return p;
}

TablePlan MakeTableRowWise(const TableConfig& table, int32_t node, int32_t local_world) {
  TablePlan p{ShardingType::kTableRowWise, {}};
  AppendRowBlocks(table, 0, table.dim, node * local_world, local_world, &p.shards);
  return p;
}

std::vector<int32_t> EqualColumnWidths(int32_t dim, int32_t block_dim) {
  SR_CHECK(block_dim >= 1 && dim % block_dim == 0);
  return std::vector<int32_t>(static_cast<size_t>(dim / block_dim), block_dim);
}

TablePlan MakeColumnSplit(const TableConfig& table, ShardingType type,
                          const std::vector<int32_t>& widths, const std::vector<int32_t>& ranks) {
  SR_CHECK(widths.size() == ranks.size());
  TablePlan p{type, {}};
  int32_t offset = 0;
  for (size_t k = 0; k < widths.size(); ++k) {
    p.shards.push_back(Rect(0, table.rows, offset, widths[k], ranks[k]));
    offset += widths[k];
  }
  SR_CHECK(offset == table.dim);
  return p;
}

TablePlan MakeGrid(const TableConfig& table, const std::vector<int32_t>& widths,
                   const std::vector<int32_t>& nodes, int32_t local_world) {
  SR_CHECK(widths.size() == nodes.size());
  TablePlan p{ShardingType::kGrid, {}};
  int32_t offset = 0;
  for (size_t k = 0; k < widths.size(); ++k) {
    AppendRowBlocks(table, offset, widths[k], nodes[k] * local_world, local_world, &p.shards);
    offset += widths[k];
  }
  SR_CHECK(offset == table.dim);
  return p;
}

}  // namespace shardrec::sharding
