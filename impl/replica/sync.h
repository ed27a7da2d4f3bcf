// Replica sync: element-wise averaging of many host buffers across a replica group, coalesced
// into one collective per dtype instead of one per table.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "impl/comm/communicator.h"

namespace shardrec::replica {

struct SyncBuffer {
  void* data = nullptr;
  size_t count = 0;  // elements
  DType dtype = DType::kFloat32;
  // Floating-point state is averaged; integer counters (optimizer step) take the maximum so a
  // replica that skipped a step cannot drag the bias correction backwards.
  comm::ReduceOp op = comm::ReduceOp::kAvg;
};

// Replaces the collective: called once per coalesced buffer; must leave the element-wise average
// over the replica group in `data` (the caller owns the group and the stream).
using SyncHook = std::function<Status(void* data, size_t count, DType dtype)>;

struct SyncStats {
  size_t bytes = 0;     // bytes reduced per rank
  int collectives = 0;  // collectives issued
};

// Reduces every buffer across `replica`, one collective per (dtype, op) group: buffers adjacent
// in memory are merged into one span, spans of 1 MiB or more are reduced in place, smaller ones of
// the same group are packed into one staging buffer (reused across calls through `staging`). A
// world of one replica returns at once.
Status SyncBuffers(comm::Communicator& replica, std::span<const SyncBuffer> buffers,
                   const SyncHook& hook, std::vector<uint8_t>* staging, SyncStats* stats);

}  // namespace shardrec::replica
