// One immutable version of a served model: the features, every table whole in its serving storage,
// the output layout of the lookups, and the dense tensors, over memory it keeps alive.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "impl/core/row_format.h"
#include "impl/core/status.h"
#include "impl/serving/id_index.h"

namespace shardrec::serving {

class TieredRows;  // tiered_rows.h

// Values mirror SHARDREC_SERVING_*; a resolved storage is never kAsTrained.
enum class Storage : int32_t {
  kAsTrained = 0,
  kFp32 = 1,
  kFp16 = 2,
  kBf16 = 3,
  kInt8 = 4,
  kInt4 = 5,
  kFp8E4M3 = 6,
  kFp8E5M2 = 7
};
constexpr bool IsValidStorage(int32_t v) { return v >= 0 && v <= 7; }
// Rows that need fp32 staging and an encoder (EncodeRows): int8, int4, fp8.
constexpr bool IsEncodedStorage(Storage s) {
  return s == Storage::kInt8 || s == Storage::kInt4 || s == Storage::kFp8E4M3 ||
         s == Storage::kFp8E5M2;
}
const char* StorageName(Storage s);  // "fp32", "fp16", "bf16", "int8", "int4", "fp8_e4m3", ...
bool StorageFromName(const std::string& name, Storage* out);
// The row format of a resolved storage (the vocabulary every module shares, row_format.h).
constexpr RowFormat FormatOf(Storage s) {
  return static_cast<RowFormat>(static_cast<int32_t>(s) - 1);
}
constexpr Storage StorageOf(RowFormat f) {
  return static_cast<Storage>(static_cast<int32_t>(f) + 1);
}

// Values mirror SHARDREC_BOUNDS_*.
enum class Bounds : int32_t { kError = 0, kClamp = 1, kSkip = 2 };

// Values mirror SHARDREC_POOLING_*.
enum class Pooling : int32_t { kSum = 0, kMean = 1, kNone = 2 };

// Row-wise quantized rows start with two floats (value = q * scale + bias): kQuantHeaderBytes of
// row_format.h.
// Tables and dense tensors start on this boundary (cache lines; mmap-friendly).
inline constexpr uint64_t kAlign = 64;

// Bytes of one stored row of `dim` values.
uint64_t RowBytes(Storage s, int32_t dim);

// A dynamic table's ids: row i of the table holds ids[i] (ascending); the index finds them.
struct DynamicIds {
  std::vector<int64_t> ids;
  std::shared_ptr<const IdIndex> index;
};

struct Table {
  std::string name;
  int64_t rows = 0;  // a dynamic table: its live rows (ids)
  int32_t dim = 0;
  Pooling pooling = Pooling::kSum;
  Storage storage = Storage::kFp32;
  std::vector<int32_t> features;  // indices of the features that read it, in order
  // rows x row_bytes, kAlign-aligned; a dynamic table has one more row, all zeros in its storage,
  // that unknown ids read (so sums and MEAN divisors are the training forward's).
  const uint8_t* data = nullptr;
  uint64_t row_bytes = 0;
  std::shared_ptr<const DynamicIds> dynamic;  // null for a fixed table
  // Served from the checkpoint's files through a row cache (tiered_rows.h; data is null then).
  std::shared_ptr<const TieredRows> tiered;
  // Memory of this table alone (its rows, when not in Model::backing): a delta replaces it in the
  // next version while the other tables' memory is shared.
  std::shared_ptr<const void> own;
};

// A (feature, table) pair of a pooled output: its columns start at out_offset.
struct Pair {
  int32_t feature = 0;
  int32_t table = 0;
  int64_t out_offset = 0;
};

struct Dense {
  const float* data = nullptr;
  size_t count = 0;
};

struct Model {
  std::vector<std::string> features;
  std::vector<Table> tables;
  std::map<std::string, Dense> dense;
  // Derived by Finish(): pooled pairs (feature-major, then table order) or, for a sequence
  // model, the table each feature reads (-1: none).
  bool sequence = false;
  int64_t output_dim = 0;
  std::vector<Pair> pairs;
  std::vector<int32_t> feature_table;
  Bounds bounds = Bounds::kError;
  uint64_t number = 1;  // the version number, set before publishing
  // What the pointers above point into: owned buffers or a read-only file mapping.
  std::vector<std::shared_ptr<const void>> backing;

  // Checks the configuration (pooling kinds not mixed, sequence dims equal, feature indices in
  // range) and derives the layout. kInvalidArgument / kUnsupported naming the table.
  Status Finish();
  // kInvalidArgument naming the first difference in features or tables (names, dims, pooling,
  // storage, fixed or dynamic, a fixed table's rows): what a reload must keep.
  Status SameShape(const Model& other) const;
};

// An owned, zeroed, kAlign-aligned byte buffer that Model::backing can keep (from 2 MiB on,
// 2 MiB-aligned and advised MADV_HUGEPAGE: model.cc).
std::shared_ptr<uint8_t> AlignedBuffer(size_t bytes);

}  // namespace shardrec::serving
