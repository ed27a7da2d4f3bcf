// FailureDomain: what the communicators split from one root share, whatever their backend (Gloo,
// MPI): the first timeout or remote failure, and who descends from whom, so that an abort reaches
// every communicator split from the aborted one and no ancestor.
#pragma once

#include <cstdint>
#include <mutex>
#include <utility>
#include <vector>

#include "impl/core/status.h"

namespace shardrec::comm {

// A communicator that a domain can interrupt. AbortLocal is called with the domain's lock held:
// it must return promptly and must not call back into the domain.
class Abortable {
 public:
  virtual void AbortLocal(const Status& why) = 0;

 protected:
  ~Abortable() = default;
};

// The first timeout or remote failure on any member makes every member unusable, so that a rank
// learns of a dead or out-of-step peer on its next call instead of waiting for another full
// timeout on a sibling communicator.
class FailureDomain {
 public:
  // True when `s` is the domain's first failure.
  bool Fail(const Status& s) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!first_.ok()) return false;
    first_ = s;
    return true;
  }
  Status first() const {
    std::lock_guard<std::mutex> lock(mu_);
    return first_;
  }
  // `lineage`: the ids of a communicator's ancestors, then its own (NewCommunicatorId). A member
  // that joins after one of its ancestors was aborted is aborted at once.
  void Join(Abortable* c, const std::vector<uint64_t>& lineage);
  // After Leave returns, no Abort touches `c` any more (an Abort in progress finishes first).
  void Leave(Abortable* c);
  // Interrupts the communicator `id` and every member that descends from it.
  void Abort(uint64_t id, const Status& why);
  // After the domain's first failure `why` on `failed`: interrupts every member, so that this
  // rank's connections close at once and a peer blocked waiting for it (on any communicator of
  // the tree) fails then, instead of at its own timeout, and fails its own peers in turn.
  // `failed` keeps `why`; the others take it as "a communicator split from the same root failed".
  void InterruptAll(Abortable* failed, const Status& why);

 private:
  struct Member {
    Abortable* comm;
    std::vector<uint64_t> lineage;
  };
  mutable std::mutex mu_;
  Status first_;
  std::vector<Member> members_;
  std::vector<std::pair<uint64_t, Status>> aborted_;  // ids aborted so far, with the reason
};

// A process-unique id for a new communicator: the name its descendants' lineages give it.
uint64_t NewCommunicatorId();

}  // namespace shardrec::comm
