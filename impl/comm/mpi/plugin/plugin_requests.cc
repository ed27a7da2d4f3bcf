// The MPI plugin's messages: tagged sends, receives that accept any tag from their peer, and the
// test that checks each received message's tag and size against what its receive expected. MPI
// itself accepts a shorter message into a receive and fails a longer one with a bare
// MPI_ERR_TRUNCATE, so ranks in different collectives, or in one with different counts, could
// return wrong data; here both become an error naming the peer, the tags and the sizes.

#include "impl/comm/mpi/plugin/plugin_internal.h"

namespace shardrec_mpi_plugin {

namespace {

// MPI guarantees tags up to 32767 (MPI_TAG_UB may be larger).
constexpr int32_t kMaxTag = 32767;

// `req` by pointer: it is read after the call that fills it (argument order is unspecified).
int32_t Started(shardrec_mpi_comm_t* c, int err, const MPI_Request* req, const shardrec_mpi_op& op,
                const char* what, shardrec_plugin_status_t* st) {
  if (err != MPI_SUCCESS) return FromMpi(st, err, what);
  c->pending.push_back(*req);
  c->ops.push_back(op);
  return Ok(st);
}

int32_t CheckTag(int32_t tag, shardrec_plugin_status_t* st) {
  if (tag >= 0 && tag <= kMaxTag) return Ok(st);
  return Fail(st, kInvalidArgument, "tag %d is outside [0, %d]", tag, kMaxTag);
}

// What a completed receive got, against what it expected. `err` is the request's own error
// (MPI_SUCCESS unless MPI_Testsome said MPI_ERR_IN_STATUS).
int32_t CheckReceived(const shardrec_mpi_op& op, const MPI_Status& status, int err,
                      shardrec_mpi_mismatch_t* mismatch, shardrec_plugin_status_t* st) {
  int error_class = MPI_SUCCESS;
  if (err != MPI_SUCCESS) MPI_Error_class(err, &error_class);
  const bool truncated = error_class == MPI_ERR_TRUNCATE;
  if (err != MPI_SUCCESS && !truncated) return FromMpi(st, err, "MPI_Irecv");
  int bytes = 0;
  MPI_Get_count(&status, MPI_BYTE, &bytes);
  if (!truncated && status.MPI_TAG == op.tag && bytes == op.bytes) return Ok(st);
  if (mismatch != nullptr) {
    mismatch->peer = op.peer;
    mismatch->expected_tag = op.tag;
    mismatch->tag = status.MPI_TAG;
    mismatch->truncated = truncated ? 1 : 0;
    mismatch->expected_bytes = op.bytes;
    mismatch->bytes = truncated ? op.bytes : bytes;
  }
  return Fail(st, kRemote,
              "rank %d sent a message of tag %d and %s%d bytes where this rank expected tag %d "
              "and %d bytes",
              op.peer, status.MPI_TAG, truncated ? "more than " : "", truncated ? op.bytes : bytes,
              op.tag, op.bytes);
}

}  // namespace

int32_t Send(shardrec_mpi_comm_t* c, const void* buf, int32_t bytes, int32_t peer, int32_t tag,
             shardrec_plugin_status_t* st) {
  if (const int32_t rc = CheckTag(tag, st); rc != 0) return rc;
  std::lock_guard<std::mutex> lock(Mu());
  MPI_Request req = MPI_REQUEST_NULL;
  const shardrec_mpi_op op{false, peer, tag, bytes};
  return Started(c, MPI_Isend(buf, bytes, MPI_BYTE, peer, tag, c->comm, &req), &req, op,
                 "MPI_Isend", st);
}

int32_t Recv(shardrec_mpi_comm_t* c, void* buf, int32_t bytes, int32_t peer, int32_t tag,
             shardrec_plugin_status_t* st) {
  if (const int32_t rc = CheckTag(tag, st); rc != 0) return rc;
  std::lock_guard<std::mutex> lock(Mu());
  MPI_Request req = MPI_REQUEST_NULL;
  const shardrec_mpi_op op{true, peer, tag, bytes};
  // Any tag: a message of another collective is received, and reported, instead of waiting
  // unmatched until the timeout. Messages from one peer match in the order they were sent.
  return Started(c, MPI_Irecv(buf, bytes, MPI_BYTE, peer, MPI_ANY_TAG, c->comm, &req), &req, op,
                 "MPI_Irecv", st);
}

int32_t Test(shardrec_mpi_comm_t* c, int32_t* done, shardrec_mpi_mismatch_t* mismatch,
             shardrec_plugin_status_t* st) {
  *done = 0;
  if (mismatch != nullptr) mismatch->peer = -1;
  // A split's result: its thread may hold the mutex (MPI_THREAD_SERIALIZED) for as long as
  // MPI_Comm_split waits, so this is answered without it.
  if (c->split_state.load(std::memory_order_acquire) == kSplitRunning) return Ok(st);
  if (c->split_err != MPI_SUCCESS) return FromMpi(st, c->split_err, "MPI_Comm_split");
  std::lock_guard<std::mutex> lock(Mu());
  if (!c->pending.empty()) {
    // Testsome, not Testall: every completed receive is checked as it completes, so that a
    // mismatch is reported even while other requests wait (for a peer in another collective).
    const int n = static_cast<int>(c->pending.size());
    c->completed.resize(n);
    c->statuses.resize(n);
    int count = 0;
    const int err =
        MPI_Testsome(n, c->pending.data(), &count, c->completed.data(), c->statuses.data());
    if (err != MPI_SUCCESS && err != MPI_ERR_IN_STATUS) return FromMpi(st, err, "MPI_Testsome");
    int32_t rc = 0;
    for (int k = 0; k < count; ++k) {
      const shardrec_mpi_op& op = c->ops[c->completed[k]];
      const MPI_Status& status = c->statuses[k];
      const int own = err == MPI_ERR_IN_STATUS ? status.MPI_ERROR : MPI_SUCCESS;
      if (rc != 0) continue;  // the first error is reported
      if (op.recv) {
        rc = CheckReceived(op, status, own, mismatch, st);
      } else if (own != MPI_SUCCESS) {
        rc = FromMpi(st, own, op.peer < 0 ? "MPI_Comm_idup" : "MPI_Isend");
      }
    }
    if (count > 0) {  // (MPI_UNDEFINED, negative, only when no request is active)
      // Completed requests are MPI_REQUEST_NULL now; the rest stay in flight, in order.
      size_t kept = 0;
      for (size_t i = 0; i < c->pending.size(); ++i) {
        if (c->pending[i] == MPI_REQUEST_NULL) continue;
        c->pending[kept] = c->pending[i];
        c->ops[kept] = c->ops[i];
        ++kept;
      }
      c->pending.resize(kept);
      c->ops.resize(kept);
    }
    if (rc != 0) return rc;
    if (!c->pending.empty()) return Ok(st);
  }
  if (c->dup_parent != nullptr) {
    c->dup_parent->children_in_flight.fetch_sub(1);
    c->dup_parent = nullptr;
  }
  if (c->needs_errhandler) {
    MPI_Comm_set_errhandler(c->comm, MPI_ERRORS_RETURN);
    c->needs_errhandler = false;
  }
  *done = 1;
  return Ok(st);
}

}  // namespace shardrec_mpi_plugin
