// Argument checks every host communicator backend makes before a collective (Gloo, MPI, through
// CheckedCommunicator, checked_communicator.h): one wording of each error, whichever backend
// refuses the call.
#pragma once

#include <cstddef>
#include <span>

#include "impl/comm/communicator.h"
#include "impl/core/dtype.h"
#include "impl/core/status.h"

namespace shardrec::comm {

// Every check of one collective's arguments, in the order both backends make them (the element
// type, the op, the counts, then the buffers); the totals of the counts come back. An all-to-all's
// block from `rank` to itself is a local copy in every backend, so its two counts must agree.
Status CheckAllReduceCall(const void* send, const void* recv, size_t count, DType dtype,
                          ReduceOp op);
Status CheckAllToAllVCall(const void* send, std::span<const size_t> send_counts, const void* recv,
                          std::span<const size_t> recv_counts, DType dtype, int size, int rank,
                          size_t* send_total, size_t* recv_total);
Status CheckAllGatherVCall(const void* send, size_t send_count, const void* recv,
                           std::span<const size_t> recv_counts, DType dtype, int size, int rank,
                           size_t* total);
Status CheckReduceScatterVCall(const void* send, const void* recv,
                               std::span<const size_t> recv_counts, DType dtype, ReduceOp op,
                               int size, int rank, size_t* total);
Status CheckBroadcastCall(const void* buf, size_t count, DType dtype, int root, int size);

}  // namespace shardrec::comm
