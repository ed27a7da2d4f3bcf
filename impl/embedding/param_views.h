// Views of a collection's parameters for the code that reads or writes them wholesale without
// knowing the collection's internals: 2D replica sync (whole buffers, coalesced) and checkpoints
// (per-shard tensors placed in their full tables). Views borrow the collection's memory: they
// stay valid until the collection is destroyed, and the collection must not run a step while a
// view is being read or written. A GPU collection's views point into device memory (their
// `device` says so): code that reads them as host memory (2D sync, checkpoints) stages them
// through the host (device_copy.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "impl/core/device.h"
#include "impl/core/dtype.h"

namespace shardrec::embedding {

// What a parameter is, which decides how it is synced, saved and resharded.
enum class ParamKind : int32_t {
  kWeights = 0,         // table weights (fp32, fp16 or bf16 storage)
  kOptimizerState = 1,  // fused optimizer state (fp32)
  kCounter = 2,         // integer counters (the optimizer step, int64)
};

constexpr const char* ParamKindName(ParamKind k) {
  switch (k) {
    case ParamKind::kWeights:
      return "weights";
    case ParamKind::kOptimizerState:
      return "optimizer_state";
    case ParamKind::kCounter:
      return "counter";
  }
  return "unknown";
}

// One contiguous local buffer (an arena) of one kind and dtype. A collection's buffers are
// disjoint; buffers that follow each other in memory may be merged by the caller.
struct ParamBuffer {
  ParamKind kind = ParamKind::kWeights;
  DType dtype = DType::kFloat32;
  Device device;
  void* data = nullptr;
  size_t count = 0;  // elements
};

// One tensor of one local shard, and where it sits in the full (unsharded) tensor. Weights and
// element-wise states are [rows, dim] tables; row-wise states are [rows] vectors (full_cols 1).
// The block is rows x cols elements starting at data, row stride row_stride elements.
struct ShardTensor {
  ParamKind kind = ParamKind::kWeights;
  DType dtype = DType::kFloat32;
  Device device;
  int32_t table = 0;  // index in the plan
  std::string table_name;
  std::string name;            // "weights" or the optimizer state's name ("momentum1", ...)
  int32_t shard = 0;           // index in the table's plan; for data-parallel tables, this rank
  bool data_parallel = false;  // a full copy held by every rank of the data-parallel group
  // The same values are also held by another shard of this table: a row-wise state of a column
  // shard other than the first (row-wise state always covers the full row).
  bool duplicate = false;
  int64_t full_rows = 0;
  int64_t full_cols = 0;
  int64_t row_offset = 0;
  int64_t col_offset = 0;
  int64_t rows = 0;
  int64_t cols = 0;
  void* data = nullptr;
  int64_t row_stride = 0;
  // Which tensor of the collection's layout this is: the local shard (Layout::local) and the
  // optimizer state (-1 for the weights).
  int32_t local = 0;
  int32_t state = -1;
  // Rows that have no plain fp32/16-bit tensor to copy: data is null and they are read and
  // written as fp32 in chunks through TableStorage::ReadTieredRows / WriteTieredRows. A tiered
  // shard (docs/disk-tier.md: rows is the plan's, its rows in a cache, a write-back queue and a
  // store) and FP8 weights (decoded and encoded row by row) are handed out so.
  bool streamed = false;
};

}  // namespace shardrec::embedding
