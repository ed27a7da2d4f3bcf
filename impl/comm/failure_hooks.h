// What a transport layered over a backend's communicator (shm/shm_communicator.h over Gloo) needs
// from that backend so that its own failures behave like the backend's: explained the same way,
// spread to every communicator of the tree, and seen by the transport when the tree is
// interrupted from elsewhere.
#pragma once

#include <chrono>
#include <functional>
#include <string>

#include "impl/core/status.h"

namespace shardrec::comm {

class BackendFailureHooks {
 public:
  // What the backend would add to a failure it saw itself (the peers' hosts that do not answer,
  // the notes the peers left before failing), as a tail for the message; "" when nothing.
  // `timed_out`: the call ran out of time (else a peer failed or left). Blocks for a bounded
  // share of `timeout`.
  virtual std::string ExplainFailure(bool timed_out, std::chrono::milliseconds timeout) const = 0;
  // Treats `s` (kTimeout or kRemote) as the backend's own failure: poisons it, leaves the note
  // for the peers and interrupts every communicator split from the same root.
  virtual void ReportFailure(const Status& s) = 0;
  // `fn` runs whenever the backend's communicator is interrupted (an abort of it or of an
  // ancestor, a failure anywhere in its tree), with the tree's lock held: it must return promptly
  // and call back into no communicator. Null clears it; once that returns, fn runs no more.
  virtual void OnInterrupt(std::function<void()> fn) = 0;

 protected:
  ~BackendFailureHooks() = default;
};

}  // namespace shardrec::comm
