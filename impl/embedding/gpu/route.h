// Input distribution's routing (RouteBatch's counting and writing passes) run where the batch is:
// the single-source steps of kernels/simt/route_body.h on a backend that owns memory and runs them
// (the CUDA plugin's emb_route entry for a KJT on the device; the host executor in the tests).
// The result in RoutedBatch is the bytes RouteBatch writes (send, send_bytes, counts_send,
// ret_count, ret_target, ret_floats_from, mean_div, the data-parallel arrays, self_offset), and a
// rejected batch gets RouteBatch's message word for word. The scratch fields of the counting pass
// (unit_lengths, unit_ids, unit_cursor, pair_status) are not filled.
//
// Two waits: one read-back learns the sizes (the first errors and the scans at the slots'
// starts); after the fill, the messages and the return bookkeeping are copied to the host (where
// the exchange runs) and waited for once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "impl/core/status.h"
#include "impl/embedding/batch.h"
#include "impl/embedding/input_dist.h"
#include "impl/embedding/kernels/simt/route_body.h"
#include "impl/embedding/layout.h"

namespace shardrec::embedding {

// The plan flattened for the steps (RouteParams' tables), derived once from a layout.
struct RouteTables {
  int32_t num_slots = 0;
  int32_t num_real_slots = 0;
  std::vector<int32_t> slot_unit;        // real slots: unit index (host only)
  std::vector<int32_t> dest_slot_begin;  // per rank + 1: its real slots
  // Int32 tables back to back (pair_feature, pair_flags, pair_block_begin, block_slot_begin,
  // block_slots, slot_dest, slot_in_dest), then int64 ones (pair_rows, block_first): what
  // RouteBackend::Tables puts on the device.
  std::vector<int32_t> i32;
  std::vector<int64_t> i64;
  size_t pair_feature = 0, pair_flags = 0, pair_block_begin = 0, block_slot_begin = 0,
         block_slots = 0, slot_dest = 0, slot_in_dest = 0;  // offsets in i32
  size_t pair_rows = 0, block_first = 0;                    // offsets in i64
};

RouteTables BuildRouteTables(const Layout& layout);

// Where the steps run. Memory from Workspace is the backend's (device memory for the plugin).
// Copies and steps are ordered as they are called (one stream); the host may read what ToHost
// copied, and free what ToDevice read, once Wait has returned.
class RouteBackend {
 public:
  virtual ~RouteBackend() = default;
  // At least `bytes` (16-byte aligned), valid until the next call with the same `which`.
  virtual Status Workspace(int which, size_t bytes, void** base) = 0;
  virtual Status ToDevice(void* dst, const void* src, size_t bytes) = 0;
  virtual Status ToHost(void* dst, const void* src, size_t bytes) = 0;
  // Waits for everything queued so far (bounded; kTimeout after that).
  virtual Status Wait() = 0;
  virtual Status Count(const kernels::simt_body::RouteParams& params) = 0;
  virtual Status Fill(const kernels::simt_body::RouteParams& params) = 0;
  // Backend copies of `tables`' i32 and i64 arrays for the steps, valid until the next call. The
  // default uploads them into workspace 2 every time; a backend that outlives its batches keeps
  // them (the tables change only with the plan).
  virtual Status Tables(const RouteTables& tables, const int32_t** i32, const int64_t** i64);
};

// RouteBatch for `batch` whose buffers the backend's steps can read. On failure nothing outside
// `rb` changed. The composition of the three phases below, with the read-back and its wait
// between the first two.
Status RouteWith(const Layout& layout, const RouteTables& tables, const RouteOptions& options,
                 const Batch& batch, RouteBackend& backend, RoutedBatch* rb);

// What the count steps left on the backend: their parameters (the work arrays the fill reads)
// and the read-back block (the status, then the scans at every slot's start:
// RouteReadbackBytes(tables) bytes of backend memory).
struct RouteCounted {
  kernels::simt_body::RouteParams params;
  const void* readback = nullptr;
  size_t readback_bytes = 0;
};
size_t RouteReadbackBytes(const RouteTables& tables);

// Whether a read-back status rejects the batch (RouteSize then returns the error).
bool RouteStatusRejects(const kernels::simt_body::RouteStatus& status, int64_t num_values,
                        bool check_non_finite);

// Phase 1: checks the batch's fields and queues the count steps (no wait).
Status RouteCountOnly(const Layout& layout, const RouteTables& tables, const RouteOptions& options,
                      const Batch& batch, RouteBackend& backend, RouteCounted* out);

// What the fill needs from the sizing.
struct RouteFillPlan {
  std::vector<int64_t> ids_at, ne_at;  // the read-back's scans
  std::vector<int64_t> dests;          // per rank: base, rows, weights, first id (4 arrays)
  size_t send_bytes = 0;
  size_t targets = 0;
  size_t dp_total = 0;
};

// Phase 2 (host): from the read-back block (host copy), RouteBatch's error for a rejected batch,
// else the sender's sizes in `rb` (send_bytes, counts_send, ret_count, unit_ids, ret_floats_from,
// self_offset, batch_size, num_values, weighted) and the fill's plan.
Status RouteSize(const Layout& layout, const RouteTables& tables, const RouteOptions& options,
                 const Batch& batch, const uint8_t* readback, RoutedBatch* rb, RouteFillPlan* plan);

// Phase 3: the fill steps, the messages written into `send` (backend memory of plan.send_bytes,
// kept there and rb->send left empty) or, when `send` is null, into the workspace and copied
// back into rb->send; the return targets, the data-parallel arrays and the MEAN divisors copied
// back; one wait.
Status RouteFill(const Layout& layout, const Batch& batch, RouteBackend& backend,
                 const RouteCounted& counted, const RouteFillPlan& plan, uint8_t* send,
                 RoutedBatch* rb);

}  // namespace shardrec::embedding
