// One thread at a time per communicator (comm.h), enforced: a call made while another thread is
// inside a call of the same communicator is refused instead of interleaving its messages with
// the first call's, which the peers would read as mismatched sizes (over Gloo an exception on
// the pair thread, which ends the process). The refused call changes nothing, the other goes on.
#pragma once

#include <atomic>

#include "impl/comm/communicator.h"

namespace shardrec::comm {

class OneCaller {
 public:
  explicit OneCaller(std::atomic<bool>& busy)
      : busy_(&busy), mine_(!busy.exchange(true, std::memory_order_acquire)) {}
  ~OneCaller() {
    if (mine_) busy_->store(false, std::memory_order_release);
  }
  OneCaller(const OneCaller&) = delete;
  OneCaller& operator=(const OneCaller&) = delete;

  // What the call may go on with: kInvalidUsage naming `comm` when another thread holds it, else
  // UsableNow(comm) (its abort, or the failure that poisoned it).
  Status Usable(const Communicator& comm) const {
    if (mine_) return UsableNow(comm);
    return Status::InvalidUsage("communicator (rank ", comm.Rank(), " of ", comm.Size(),
                                ") is in use by another thread: one thread at a time per "
                                "communicator");
  }

 private:
  std::atomic<bool>* busy_;
  bool mine_;
};

}  // namespace shardrec::comm
