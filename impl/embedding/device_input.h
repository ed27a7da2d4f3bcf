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

#include "impl/comm/communicator.h"
#include "impl/core/status.h"
#include "impl/embedding/input_dist.h"
#include "impl/embedding/layout.h"

namespace shardrec::embedding {

// Int64 fields this rank sends to / receives from one rank in the counts exchange.
size_t DeviceCountsTo(const Layout& layout, int32_t dest);
size_t DeviceCountsFrom(const Layout& layout);

// The sender's record for each destination, written into `out` (DeviceCountsTo(d) fields for
// destination d, back to back in rank order): RoutedBatch::counts_send's fields, then per unit of
// the destination its ids and non-empty bags (sequence: its ids twice). A rejected batch
// (`local_error`) sends the rejected flag and zeros.
void DeviceCountsRecord(const Layout& layout, const Status& local_error, const RoutedBatch& rb,
                        std::vector<int64_t>* out);

// Reads the records every rank sent this one (`recv`, DeviceCountsFrom fields each, rank order)
// into counts_recv and unit_counts_recv, checks them, and sizes the id exchange (recv_bytes,
// a2a_send, a2a_recv: bytes, this rank's own message 0). Returns `local_error` when set, else the
// peers' rejection ("rank r rejected its batch"), else a malformed record (kInternal).
Status ReadDeviceCounts(const Layout& layout, const Status& local_error,
                        std::span<const int64_t> recv, RoutedBatch* rb);

// The counts exchange over `comm` (host buffers; a staged communicator for NCCL): record, one
// all-to-all, read. Every rank takes part, a rejecting one too.
Status ExchangeDeviceCounts(const Layout& layout, comm::Communicator& comm,
                            const Status& local_error, RoutedBatch* rb);

// UnpackInput from the announced counts: every local shard's runs (pointers null; io offsets,
// bag and id counts as UnpackInput's) with their places in run_at, the unpack's places, the CSR
// size, and the return message's sizes. Sets rb->device_input.
Status UnpackCounts(const Layout& layout, RoutedBatch* rb);

}  // namespace shardrec::embedding
