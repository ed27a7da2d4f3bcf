// The communicator interface: every collective libshardrec uses, backend-independent. The CPU
// backend runs on Gloo, the GPU backend on NCCL inside the CUDA plugin. Nothing above comm/
// knows which backend it talks to.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <span>

#include "impl/core/device.h"
#include "impl/core/dtype.h"
#include "impl/core/status.h"

namespace shardrec::comm {

enum class ReduceOp : int32_t { kSum = 0, kAvg = 1, kMax = 2, kMin = 3 };

// Per-call options. A zero timeout means the communicator's default timeout.
struct CallOptions {
  std::chrono::milliseconds timeout{0};
  Stream stream = nullptr;  // GPU buffers: ordering stream; ignored for host buffers
};

// Contract shared by all backends:
//  - Collective: every member calls the same operation in the same order, with matching
//    counts; counts are in elements of `dtype`.
//  - Buffers live on device() (host memory for a host communicator). A CPU-engine communicator
//    whose device() is CUDA stages GPU buffers through host memory.
//  - Variable-size operations lay out blocks contiguously in rank order; displacements are the
//    prefix sums of the counts.
//  - In-place is allowed where send == recv (AllReduce; ReduceScatterV and AllGatherV are not
//    in place).
//  - Failure: a timeout returns kTimeout, a dead or failing peer kRemote. After any such error
//    the communicator is poisoned: every later call returns kInvalidUsage naming the original
//    error, and only Abort() and destruction are meaningful.
//  - Thread-safety: one thread at a time per communicator; different communicators (including
//    those produced by Split) may be used concurrently from different threads.
class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int Rank() const = 0;
  virtual int Size() const = 0;
  virtual Device device() const = 0;
  // Human-readable backend name: "gloo", "nccl" or "mpi".
  virtual const char* backend() const = 0;

  virtual std::chrono::milliseconds timeout() const = 0;
  virtual void set_timeout(std::chrono::milliseconds timeout) = 0;

  // recv[i] = op over ranks of send[i], for count elements. kAvg divides by Size().
  virtual Status AllReduce(const void* send, void* recv, size_t count, DType dtype, ReduceOp op,
                           const CallOptions& opts = {}) = 0;

  // Rank r sends send_counts[d] elements to every rank d (blocks in rank order in `send`) and
  // receives recv_counts[s] elements from every rank s (blocks in rank order in `recv`). Both
  // spans have Size() entries; zeros are allowed.
  virtual Status AllToAllV(const void* send, std::span<const size_t> send_counts, void* recv,
                           std::span<const size_t> recv_counts, DType dtype,
                           const CallOptions& opts = {}) = 0;

  // Every rank contributes send_count elements (== recv_counts[Rank()]); recv receives all
  // contributions in rank order.
  virtual Status AllGatherV(const void* send, size_t send_count, void* recv,
                            std::span<const size_t> recv_counts, DType dtype,
                            const CallOptions& opts = {}) = 0;

  // send holds sum(recv_counts) elements on every rank; rank r receives the reduction of block
  // r (recv_counts[r] elements) over all ranks.
  virtual Status ReduceScatterV(const void* send, void* recv, std::span<const size_t> recv_counts,
                                DType dtype, ReduceOp op, const CallOptions& opts = {}) = 0;

  virtual Status Broadcast(void* buf, size_t count, DType dtype, int root,
                           const CallOptions& opts = {}) = 0;

  virtual Status Barrier(const CallOptions& opts = {}) = 0;

  // Collective over all members. Ranks with the same color form a new communicator ordered by
  // (key, old rank). A negative color yields *out == nullptr (not a member of any group).
  // The new communicator inherits the device and timeout. A null `out` refuses the split but
  // takes part in its first exchange (host backends), so every member fails at once with
  // kInvalidArgument (the others naming this rank) and nothing is created.
  virtual Status Split(int color, int key, std::unique_ptr<Communicator>* out) = 0;

  // Tears down connections without waiting for peers; pending and later calls fail. Safe to
  // call from another thread while a collective is blocked in this communicator.
  virtual void Abort() = 0;

  // A failure detected in the background (or the error that poisoned the communicator), or OK.
  virtual Status AsyncError() const = 0;
};

// What a call on `comm` made now returns before it communicates (every host backend's rule): OK
// while healthy; its abort, which keeps saying so (a host tells an abort it asked for from a
// failure it must report); else kInvalidUsage naming the failure that poisoned it. For work
// handed to another thread, whose error would otherwise surface only when it is waited for.
inline Status UsableNow(const Communicator& comm) {
  Status cause = comm.AsyncError();
  if (cause.ok() || cause.code() == Code::kAborted) return cause;
  return Status::InvalidUsage("communicator (rank ", comm.Rank(), " of ", comm.Size(),
                              ") is unusable after an earlier error: ", cause.ToString());
}

// Whether `s` is a failed exchange: a timeout, a failed peer (kRemote) or this rank's abort. Its
// peers may be gone, so a caller attempts no further agreement with them over that group.
inline bool IsExchangeFailure(const Status& s) {
  const Code c = s.code();
  return c == Code::kTimeout || c == Code::kRemote || c == Code::kAborted;
}

}  // namespace shardrec::comm
