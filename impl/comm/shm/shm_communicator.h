// The shared-memory transport for the ranks of one host: a decorator over a host backend's
// communicator (Gloo) that moves AllToAllV and AllGatherV through a segment the ranks
// map (host_setup.h, exchange.h) and hands every other collective (Barrier included), and
// everything a group on more than one host does, to the wrapped communicator. The bytes are the
// same either way: only the route changes.
//
// Wrap() wraps every host communicator of two or more ranks; the group decides collectively
// whether it uses shared memory (one host, everyone willing, the segment shared). A wrapper
// without a segment only delegates, so that Split can still give its single-host children one
// (the per-host rows and columns of a 2D mesh over several hosts).
//
// backend() is the wrapped one's ("gloo"); transport() says whether shared memory is in use.
// Failure, abort and poisoning follow communicator.h: an abort wakes a waiting collective at
// once and tells the peers (they fail with kRemote), a peer that does not come within the timeout
// gives kTimeout, and an abort of the wrapped communicator (or of an ancestor, which reaches it)
// stops a waiting collective within milliseconds. Thread-safety as Communicator.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>

#include "impl/comm/checked_communicator.h"
#include "impl/comm/shm/exchange.h"
#include "impl/comm/shm/host_setup.h"

namespace shardrec::comm::shm {

class ShmCommunicator final : public CheckedCommunicator {
 public:
  // Collective over `inner` (every rank calls it): *out wraps inner, with a segment when the
  // group agrees to use one. Errors: those of inner's collectives (inner is then destroyed).
  static Status Wrap(std::unique_ptr<Communicator> inner, std::unique_ptr<Communicator>* out);

  ~ShmCommunicator() override;

  // "shm" when the collectives above go through shared memory, else "delegated".
  const char* transport() const { return host_ ? "shm" : "delegated"; }
  Communicator& inner() const { return *inner_; }

  int Rank() const override { return inner_->Rank(); }
  int Size() const override { return inner_->Size(); }
  Device device() const override { return inner_->device(); }
  const char* backend() const override { return inner_->backend(); }
  std::chrono::milliseconds timeout() const override { return inner_->timeout(); }
  void set_timeout(std::chrono::milliseconds t) override { inner_->set_timeout(t); }

  Status Split(int color, int key, std::unique_ptr<Communicator>* out) override;
  void Abort() override;
  Status AsyncError() const override;

 protected:
  Status DoAllReduce(const void* send, void* recv, size_t count, DType dtype, ReduceOp op,
                     const Call& call) override;
  Status DoAllToAllV(const void* send, std::span<const size_t> send_counts, void* recv,
                     std::span<const size_t> recv_counts, DType dtype, const Call& call) override;
  Status DoAllGatherV(const void* send, size_t send_count, void* recv,
                      std::span<const size_t> recv_counts, DType dtype, const Call& call) override;
  Status DoReduceScatterV(const void* send, void* recv, std::span<const size_t> recv_counts,
                          DType dtype, ReduceOp op, const Call& call) override;
  Status DoBroadcast(void* buf, size_t count, DType dtype, int root, const Call& call) override;
  Status DoBarrier(const Call& call) override;

 private:
  ShmCommunicator(std::unique_ptr<Communicator> inner, std::unique_ptr<HostSegment> host);

  // Runs one exchange through the segment and poisons this communicator on failure.
  Status Exchange(std::span<const OutMessage> out, std::span<const InMessage> in, const char* what,
                  const Call& call);
  // Flags this rank's abort in the segment and rings every rank.
  void TellPeersAborted();
  // What stops a waiting exchange: this communicator's abort, or the wrapped one's failure.
  Status Stopped() const;
  static CallOptions Options(const Call& call) { return {call.timeout, call.stream}; }

  std::unique_ptr<Communicator> inner_;
  std::unique_ptr<HostSegment> host_;  // null: everything is delegated
  std::unique_ptr<Exchanger> exchanger_;
  std::atomic<bool> aborted_{false};
  mutable std::mutex mu_;
  Status failure_;  // the first failed exchange (guarded by mu_)
};

}  // namespace shardrec::comm::shm
