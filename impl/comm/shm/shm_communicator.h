// The shared-memory transport for the ranks of one host: a decorator over a host backend's
// communicator (Gloo) that runs every collective (AllToAllV, AllGatherV, AllReduce,
// ReduceScatterV, Broadcast, Barrier) through a segment the ranks map (host_setup.h,
// exchange.h), and hands everything a group on more than one host does to the wrapped
// communicator. Data movement is the same either way; reductions go in rank order on every rank
// (shm_reductions.cc), so a float result is identical on every rank and from run to run.
//
// Wrap() wraps every host communicator of two or more ranks; the group decides collectively
// whether it uses shared memory (one host, everyone willing, the segment shared). A wrapper
// without a segment only delegates, so that Split can still give its single-host children one
// (the per-host rows and columns of a 2D mesh over several hosts).
//
// backend() is the wrapped one's ("gloo"); transport() says whether shared memory is in use.
// Failure, abort and poisoning follow communicator.h and the wrapped backend (failure_hooks.h): an
// abort wakes a waiting collective at once and tells the peers (they fail with kRemote), a peer
// that does not come within the timeout gives kTimeout with the backend's explanation, and such a
// failure poisons the backend's whole tree as its own would (every communicator split from the
// same root; the peers learn of it through the segment and the backend's note). An abort of the
// wrapped communicator or an interrupt of its tree reaches a waiting collective at once and the
// peers with it. Thread-safety as Communicator.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "impl/comm/checked_communicator.h"
#include "impl/comm/failure_hooks.h"
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
  // Flags this rank's abort in the segment (kTimedOut where `timed_out`, else kFailed; the first
  // flag stays) and rings every rank.
  void TellPeersAborted(bool timed_out = false);
  // What stops a waiting exchange: this communicator's abort, or the wrapped one's failure.
  Status Stopped() const;
  // This rank's own reason to fail, if any: its abort, else the wrapped one's poison (an
  // interrupt of its tree) as the wrapped one reports it.
  Status OwnCause() const;
  static CallOptions Options(const Call& call) { return {call.timeout, call.stream}; }
  // A buffer of at least `bytes` kept between calls (one caller at a time: CheckedCommunicator),
  // so the DDP buckets' all-reduces do not allocate per call.
  uint8_t* Scratch(size_t bytes);

  std::unique_ptr<Communicator> inner_;
  BackendFailureHooks* hooks_ = nullptr;  // inner_'s, when it has them and host_ is set
  std::unique_ptr<HostSegment> host_;     // null: everything is delegated
  std::unique_ptr<Exchanger> exchanger_;
  std::atomic<bool> aborted_{false};
  mutable std::mutex mu_;
  Status failure_;  // the first failed exchange (guarded by mu_)
  std::unique_ptr<uint8_t[]> scratch_;
  size_t scratch_bytes_ = 0;
};

}  // namespace shardrec::comm::shm
