// How big a GPU collection's per-step buffers (step.h) can get on this rank, from the
// plan's layout and the collection's capacity hints (embedding.h: max_batch_size,
// max_ids_per_batch): the worst case over every batch within the hints, so buffers reserved at
// creation at these sizes never grow in such a step. The bounds assume every rank sends its most
// ids and all of them route to this rank's shards (every column shard of a row block gets a
// copy), every id weighted, every bag non-empty.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "impl/core/status.h"
#include "impl/embedding/layout.h"
#include "impl/embedding/step_state.h"

namespace shardrec::embedding {

struct StepSizes {
  size_t runs_bytes = 0;            // the batch's runs packed, plus the backward's gradient message
  size_t io_bytes = 0;              // the forward's return message
  int64_t shard_ids = 0;            // most ids one local shard receives in a step
  std::vector<size_t> rows_bytes;   // per local shard: unique rows (DP: touched rows + grads)
  std::vector<size_t> grads_bytes;  // per local shard: aggregated gradients (0: fused / DP)
  std::vector<size_t> stats_bytes;  // per local shard: partial row statistics
  size_t full_stats_bytes = 0;
  size_t dp_ids_bytes = 0;
  int64_t dp_ids = 0;          // most data-parallel ids of one batch
  size_t dp_upload_bytes = 0;  // a backward's data-parallel upload (dp.h), host gradient too
  size_t dp_out_bytes = 0;
  size_t out_bytes = 0;      // a pooled output combined on the device
  size_t staging_bytes = 0;  // the pinned block: the largest phase's traffic
  // The device input distribution (input.h): one batch slot's block (the routed messages,
  // the received ones, the CSR offsets), the unpack's cells and its scans.
  size_t slot_bytes = 0;
  size_t unpack_cells = 0;
  size_t unpack_scan_bytes = 0;
  size_t summary_bytes = 0;  // one rank's route summary (input.h)
  // Row statistics exchanged between device blocks: the messages this rank sends (its partial
  // statistics to every sibling column shard) and receives.
  size_t stat_send_bytes = 0;
  size_t stat_recv_bytes = 0;
  // A backward from a device gradient: the pack's tables (return targets, MEAN divisors, jobs).
  size_t pack_bytes = 0;
};

// The sizes for `capacity` (which must be known()); fused[i] says whether local shard i takes
// the fused backward (no aggregation buffers); `device_input` sizes the batch slots too.
// kInvalidArgument when a size overflows.
Status ComputeStepSizes(const Layout& l, const StepCapacity& capacity,
                        const std::vector<bool>& fused, bool device_input, StepSizes* out);

}  // namespace shardrec::embedding
