// Where things live in a host's shared-memory segment. One header line (the creator's cookie and
// the geometry, checked by every rank that maps it), one line per rank (its doorbell, its
// sleepers count, its abort flag and the mark that proves it mapped this very segment), then one
// mailbox per ordered pair of ranks: a ring of `slots` chunks with a posted and a consumed count.
// Every word that two processes touch is a naturally aligned 32- or 64-bit integer accessed
// through std::atomic_ref, and the words written by different ranks sit on different cache
// lines. The diagonal mailboxes (a rank to itself) are laid out but never touched (tmpfs gives
// them no memory).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace shardrec::comm::shm {

inline constexpr size_t kLine = 64;

struct Geometry {
  int world = 0;
  uint32_t slots = 0;     // chunks in flight per ordered pair of ranks
  size_t slot_bytes = 0;  // payload bytes per chunk (a multiple of kLine)

  // Bounded memory: 2 MiB per pair for two ranks, 256 KiB per pair (64 KiB chunks) from five.
  static Geometry For(int world) {
    Geometry g;
    g.world = world;
    g.slots = world == 2 ? 8 : 4;
    g.slot_bytes = world <= 4 ? (size_t{256} << 10) : (size_t{64} << 10);
    return g;
  }
  size_t SlotStride() const { return kLine + slot_bytes; }
  size_t MailboxBytes() const { return 2 * kLine + slots * SlotStride(); }
  size_t RanksOffset() const { return kLine; }
  size_t MailboxesOffset() const { return kLine + static_cast<size_t>(world) * kLine; }
  size_t Bytes() const {
    return MailboxesOffset() + static_cast<size_t>(world) * world * MailboxBytes();
  }
};

// What precedes a chunk's payload: which collective of the communicator it belongs to, the whole
// message's size and where this chunk starts in it, so that a receiver detects ranks whose calls
// or counts disagree instead of reading one message as another.
struct ChunkHeader {
  uint64_t op;
  uint64_t total;
  uint64_t offset;
  uint64_t len;
};
static_assert(sizeof(ChunkHeader) <= kLine);

struct SegmentHeader {
  uint64_t cookie;
  uint64_t bytes;
  uint32_t world;
  uint32_t slots;
  uint64_t slot_bytes;
};
static_assert(sizeof(SegmentHeader) <= kLine);

// RankLine::aborted. A peer woken by the flag fails with kTimeout where the flagging rank's own
// failure was its timeout (a silent peer: every rank waiting on it ends at about the same time,
// and each reports the timeout as Gloo's ranks do, whichever noticed first), else with kRemote.
enum AbortFlag : uint32_t { kNotAborted = 0, kFailed = 1, kTimedOut = 2 };

struct RankLine {
  uint32_t doorbell;  // bumped whenever something this rank waits for may have changed
  uint32_t sleepers;  // > 0 while the rank may be in a futex wait on its doorbell
  uint32_t aborted;   // an AbortFlag: set once, when the rank aborted or saw its communicator fail
  uint32_t pad;
  uint64_t mark;  // written by the rank after mapping: proves the mapping is shared
  // The rank's process (liveness.h), written before the mark.
  int32_t pid;
  uint32_t pad2;
  uint64_t pid_ns;
  uint64_t start_ticks;
};
static_assert(sizeof(RankLine) <= kLine);

class Layout {
 public:
  Layout() = default;
  Layout(uint8_t* base, const Geometry& g) : base_(base), g_(g) {}

  const Geometry& geometry() const { return g_; }
  SegmentHeader* header() const { return reinterpret_cast<SegmentHeader*>(base_); }
  RankLine* rank(int r) const {
    return reinterpret_cast<RankLine*>(base_ + g_.RanksOffset() + static_cast<size_t>(r) * kLine);
  }
  // Written by the sender only.
  uint32_t* posted(int from, int to) const {
    return reinterpret_cast<uint32_t*>(Mailbox(from, to));
  }
  // Written by the receiver only.
  uint32_t* consumed(int from, int to) const {
    return reinterpret_cast<uint32_t*>(Mailbox(from, to) + kLine);
  }
  ChunkHeader* chunk(int from, int to, uint32_t slot) const {
    return reinterpret_cast<ChunkHeader*>(Mailbox(from, to) + 2 * kLine + slot * g_.SlotStride());
  }
  uint8_t* payload(int from, int to, uint32_t slot) const {
    return reinterpret_cast<uint8_t*>(chunk(from, to, slot)) + kLine;
  }

 private:
  uint8_t* Mailbox(int from, int to) const {
    const size_t pair = static_cast<size_t>(from) * g_.world + static_cast<size_t>(to);
    return base_ + g_.MailboxesOffset() + pair * g_.MailboxBytes();
  }

  uint8_t* base_ = nullptr;
  Geometry g_;
};

template <typename T>
std::atomic_ref<T> Shared(T* word) {
  return std::atomic_ref<T>(*word);
}

}  // namespace shardrec::comm::shm
