// Row deltas of a served table (shardrec_inference_apply_delta): the next version is the served
// one with one table replaced by an updated copy; every other table and the dense tensors are
// shared with it, not copied.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "impl/core/status.h"
#include "impl/serving/model.h"

namespace shardrec::serving {

// A delta: num_rows ids with their fp32 rows ([num_rows, dim], row-major), and ids to remove.
// `full` (SHARDREC_DELTA_FULL): the rows are the whole table, which they replace.
struct Delta {
  const int64_t* ids = nullptr;
  const float* rows = nullptr;
  size_t num_rows = 0;
  const int64_t* tombstones = nullptr;
  size_t num_tombstones = 0;
  bool full = false;
};

// Builds `served` with table `table` updated by `d` into `out` (its number is left to the
// caller). A dynamic table upserts each row and drops each tombstone that has a row, or with
// `full` holds the delta's rows alone; a fixed table overwrites rows by index and refuses
// tombstones and `full` (it has no rows to drop). The rows are encoded to the table's
// storage as at open; rows the delta does not name keep their stored bytes. kInvalidArgument
// (an id twice, upserted and removed, out of a fixed table's range, a non-finite value a
// quantized storage cannot hold); kOutOfMemory. `served` is never changed.
Status ApplyDelta(const Model& served, size_t table, const Delta& d, std::shared_ptr<Model>* out);

}  // namespace shardrec::serving
