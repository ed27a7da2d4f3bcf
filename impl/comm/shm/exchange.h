// The one shared-memory collective the others are built from: every rank sends one message (any
// size, zero included) to every other rank and receives one from each, through the per-pair
// mailboxes of layout.h in chunks of the segment's slot size. One thread moves everything: it
// pushes chunks to every peer while their rings have room and pulls what every peer posted, so
// two ranks exchanging more than a ring's worth never wait on each other. With nothing to move it
// spins briefly, then sleeps on its doorbell until a peer rings it, the deadline passes or the
// communicator is aborted.
//
// Each chunk names the collective it belongs to (a count kept per communicator) and the whole
// message's size: a receiver whose own call or counts disagree with the sender's fails with
// kRemote naming both instead of reading one message as another.
//
// Thread-safety: one Exchanger per rank per communicator, used by one thread at a time; Abort
// may be flagged from any thread (see Run).
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>

#include "impl/comm/shm/layout.h"
#include "impl/core/status.h"

namespace shardrec::comm::shm {

struct OutMessage {
  const uint8_t* data = nullptr;  // may be null when bytes == 0
  size_t bytes = 0;
};

struct InMessage {
  uint8_t* data = nullptr;  // may be null when bytes == 0
  size_t bytes = 0;
};

class Exchanger {
 public:
  Exchanger(Layout layout, int rank) : layout_(layout), rank_(rank) {}

  // Sends out[d] to every rank d and receives in[s] from every rank s (both have world entries;
  // this rank's own entry is copied locally). `what` names the collective in errors. Whenever it
  // has nothing to move it asks `stop` (an abort, a failure of the wrapped communicator) and
  // returns what stop returns if that is not OK; a ring of this rank's doorbell makes it ask at
  // once, else it asks at least every few milliseconds. Returns kRemote when a peer aborted or
  // disagrees, kTimeout after `timeout` naming the ranks still owed.
  Status Run(std::span<const OutMessage> out, std::span<const InMessage> in, const char* what,
             std::chrono::milliseconds timeout, const std::function<Status()>& stop);

 private:
  struct Flow {
    size_t bytes = 0;
    uint64_t chunks = 0;  // at least one: an empty message still carries its header
    uint64_t done = 0;
  };

  // Moves what fits; *moved is set when anything was. Pull fails on a disagreeing chunk.
  void Push(int to, const OutMessage& m, Flow& f, bool* moved);
  Status Pull(int from, const InMessage& m, Flow& f, const char* what, bool* moved);
  uint64_t Chunks(size_t bytes) const;
  // kRemote when a peer flagged an abort or a failure, kTimeout when it flagged its timeout
  // (layout.h, AbortFlag); checked before a collective and whenever idle.
  Status PeerAborted(const char* what) const;

  Layout layout_;
  int rank_;
  uint64_t op_ = 0;  // collectives run so far on this communicator
};

}  // namespace shardrec::comm::shm
