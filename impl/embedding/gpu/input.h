// The host's part of an input distribution whose ids travel between device buffers (a GPU
// collection over an NCCL communicator of its own device, with a plugin that has emb_unpack).
//
// Today's host exchange needs two rounds (counts, then the messages) and the host reads every
// received message to describe the runs. Here the host learns everything it needs in the ONE
// counts exchange: besides each rank's verdict, batch size, id count and weighting, a rank
// announces to each destination, per unit of that destination, the ids it routed there and its
// non-empty bags (the rows that come back). From those alone the owner sizes its receive block and
// the return message, and places every run (RunPlace: byte offsets into the batch's device
// blocks) without reading a message; the messages themselves go from a device send block to a
// device receive block over NCCL, and the device turns the bag lengths in them into the runs'
// CSR offsets (simt/unpack_body.h), checking them against the announced counts.
//
// The runs, return sizes and io offsets are exactly UnpackInput's for the same messages (the
// tests compare them); only the pointers differ (null here; DeviceStep makes them from the
// places and its blocks).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "impl/core/status.h"
#include "impl/embedding/gpu/route.h"
#include "impl/embedding/input_dist.h"
#include "impl/embedding/layout.h"

namespace shardrec::embedding {

// The counts exchange is an all-gather of every rank's route summary, a block of the same size on
// every rank (it depends on the plan only): a header (SummaryHeader: this rank's verdict on its
// batch as the host knows it, batch size, ids, weighted), then the route's read-back block
// (route.h: the route status, the ids and the non-empty bags before every slot, slots in
// (destination, unit) order). A KJT on the device contributes its read-back straight from the
// device route's workspace, so the route's sizing and the exchange share the one wait; a host
// KJT's summary is made from its host routing (HostRouteSummary). A receiver reads its units'
// counts from every summary and the device verdict from the status.
struct SummaryHeader {
  int64_t rejected = 0;
  int64_t batch_size = 0;
  int64_t num_values = 0;
  int64_t weighted = 0;
};
size_t RouteSummaryBytes(const RouteTables& tables);

// The summary of a batch routed on the host (RouteBatch, or a rejection: `local_error`).
void HostRouteSummary(const RouteTables& tables, const Status& local_error, const RoutedBatch& rb,
                      std::vector<uint8_t>* out);

// Reads every rank's summary (`gathered`: RouteSummaryBytes each, rank order): the verdicts, then
// (through ReadDeviceCounts) this rank's counts. Returns `local_error` when set, else a peer's
// rejection ("rank r rejected its batch"), else a malformed summary (kInternal).
Status ReadRouteSummaries(const Layout& layout, const RouteTables& tables,
                          const RouteOptions& options, const Status& local_error,
                          std::span<const uint8_t> gathered, RoutedBatch* rb);

// The per-destination records the summaries come down to (DeviceCountsTo(d) int64 fields for
// destination d): RoutedBatch::counts_send's fields, then per unit of the destination its ids
// and non-empty bags (sequence: its ids twice); a rejected batch has the flag and zeros.
size_t DeviceCountsTo(const Layout& layout, int32_t dest);
size_t DeviceCountsFrom(const Layout& layout);
void DeviceCountsRecord(const Layout& layout, const Status& local_error, const RoutedBatch& rb,
                        std::vector<int64_t>* out);

// Reads the records every rank sent this one (`recv`, DeviceCountsFrom fields each, rank order)
// into counts_recv and unit_counts_recv, checks them, and sizes the id exchange (recv_bytes,
// a2a_send, a2a_recv: bytes, this rank's own message 0). Returns `local_error` when set, else the
// peers' rejection, else a malformed record (kInternal).
Status ReadDeviceCounts(const Layout& layout, const Status& local_error,
                        std::span<const int64_t> recv, RoutedBatch* rb);

// UnpackInput from the announced counts: every local shard's runs (pointers null; io offsets,
// bag and id counts as UnpackInput's) with their places in run_at, the unpack's places, the CSR
// size, and the return message's sizes. Sets rb->device_input.
Status UnpackCounts(const Layout& layout, RoutedBatch* rb);

}  // namespace shardrec::embedding
