// The device step's forward phase as an object that owns its state: the return message on the
// device, the combined output, the data-parallel lookups' ids and rows, the lookup jobs, and the
// combine's column groups and bags (step.h's LookupCombine says how the combine runs through the
// lookup kernel). DeviceStep composes it and queues its phases on the step's stream and staging;
// the backward never reads it. One thread at a time, as the step.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "impl/core/device_buffer.h"
#include "impl/embedding/input_dist.h"
#include "impl/embedding/kernels/kernels.h"
#include "impl/embedding/layout.h"

namespace shardrec::embedding {

class DeviceForward {
 public:
  // The combine's column groups of `layout` (which must outlive the object): the units of one
  // pair and column offset (its row blocks) add into the same output columns.
  void Init(const Layout& layout);

  // The combine's bags for `rb` (BagOffsets, BagIds) with the returned rows of the other ranks
  // at io + rb.ret_floats_total on (in rank order) and this rank's own at
  // io + rb.ret_self_offset.
  void BuildCombine(const RoutedBatch& rb);
  // Per group's bags: offsets into BagIds; and the float offsets of the returned rows in io.
  std::span<const int64_t> BagOffsets() const { return comb_offsets_; }
  std::span<const int64_t> BagIds() const { return comb_ids_; }
  // Appends to `jobs` one lookup per group with returned rows: the rows (rows_floats floats of
  // device memory at `rows`) as a table of stride 1 whose row ids are float offsets, bag r of a
  // group being output row lo + r of `out` (device, `dim` floats a row), from the bags uploaded
  // to `dev_offsets` and `dev_ids`.
  void AppendCombineJobs(const float* rows, size_t rows_floats, const int64_t* dev_offsets,
                         const int64_t* dev_ids, int64_t dim, float* out,
                         std::vector<kernels::LookupJob>* jobs) const;

  // The forward's buffers, queued on by the step's phases.
  core::DeviceBuffer io;                 // return message (and, over NCCL, the received rows)
  core::DeviceBuffer out;                // the combined output on the device
  core::DeviceBuffer dp_ids;             // data-parallel offsets, rows and weights of the batch
  core::DeviceBuffer dp_out;             // their lookups
  std::vector<float> dp_host;            // and those downloaded
  std::vector<kernels::LookupJob> jobs;  // a phase's lookups, rebuilt per phase

 private:
  // Output column groups (a sharded pair's column slice: all its row blocks' units add into
  // it), each unit's group, and the batch's bags per group.
  struct CombineGroup {
    int64_t col = 0;
    int32_t cols = 0;
    int32_t pair = 0;
  };
  const Layout* layout_ = nullptr;
  std::vector<CombineGroup> groups_;
  std::vector<int32_t> unit_group_;
  // Per group the output rows [lo, hi) its returned rows aim at, and where its hi - lo + 1
  // offsets start in comb_offsets_ (none for a group without rows).
  std::vector<int64_t> group_lo_, group_hi_, group_begin_;
  std::vector<int64_t> comb_offsets_;  // per group's bags: offsets into comb_ids_
  std::vector<int64_t> comb_ids_;      // float offsets of returned rows in io
  std::vector<int64_t> comb_cursor_;
};

}  // namespace shardrec::embedding
