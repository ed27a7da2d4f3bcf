// The host <-> device traffic of one phase of a GPU collection's step (step.h), through
// one grow-only pinned block: uploads are packed into the block and their copies queued back to
// back on the step's stream; downloads are queued into the block and handed to their host
// destinations by Deliver, once the owner has waited for the stream (the phase's one host
// synchronisation). Pinned memory lets the copy engines read and write the block directly and
// the copies stay asynchronous (a copy out of pageable memory goes through a driver bounce
// buffer and may block the host).
//
// Lifetime rules, which make reuse safe: a byte of the block is rewritten only after the owner
// waited for the stream since the copy that used it was queued. Within a phase the cursor only
// moves forward. A phase either ends with the owner's wait (then Deliver hands the downloads over
// and the next phase starts at the block's start), or is closed without one (EndDeferred: a
// stream-ordered call that returns with its work queued); the next phase then packs behind it,
// and its downloads are handed over at the next wait, in order, with the later phases'. Begin
// waits itself when a phase failed half-way and left copies queued (that phase's downloads are
// dropped; the closed phases' ones are delivered). When a phase needs more than the block has
// left, the block is drained (one extra wait, the downloads so far delivered) and, when it is too
// small, grown before packing goes on: only beyond the size the owner reserved at creation
// (DeviceStep sizes it from the collection's capacity hints, for a lookup phase and two update
// phases in flight at once).
//
// Not thread-safe: one collection step uses it at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "impl/core/device.h"
#include "impl/core/pinned_buffer.h"
#include "impl/core/status.h"

namespace shardrec::embedding {

class DeviceStaging {
 public:
  // One host range of an upload.
  struct Piece {
    const void* host = nullptr;
    size_t bytes = 0;
  };

  void Init(int device, Stream stream) {
    device_ = device;
    stream_ = stream;
    pinned_.SetDevice(device);
  }

  // At least `bytes` of pinned capacity (a phase within it never grows the block). Only between
  // phases: waits for queued copies first.
  Status Reserve(size_t bytes);

  // Starts a phase: at the block's start, or behind the phases closed by EndDeferred whose copies
  // may still be queued. Waits, bounded, only if the previous phase failed with copies still
  // queued (its downloads are dropped, the closed phases' delivered).
  Status Begin();

  // Closes the phase without a wait: its copies stay queued, its downloads are handed over at the
  // owner's next wait (Deliver), and the next phase packs behind it.
  void EndDeferred();

  // `bytes` more fit behind the cursor (a phase that reserves its whole traffic first never drains
  // half-way); else drains now (a wait, everything delivered) and grows the block if needed.
  Status MakeRoom(size_t bytes);

  // Packs `pieces` into the block at 16-byte aligned offsets and queues ONE copy of the whole
  // packed range to `device_dst`, so piece k lands at device_dst + at[k] (at has pieces.size()
  // entries; the same offsets in the block and on the device). `device_dst` must hold
  // PackedBytes(pieces) bytes. Nothing is queued for an all-empty upload.
  Status Upload(void* device_dst, const Piece* pieces, size_t num_pieces, size_t* at);
  Status Upload(void* device_dst, const void* host, size_t bytes) {
    const Piece p{host, bytes};
    size_t at = 0;
    return Upload(device_dst, &p, 1, &at);
  }

  // Queues a copy of `bytes` at `device_src` into the block; Deliver copies them to `host_dst`.
  // *ticket (may be null) receives its number: it has reached `host_dst` once delivered() >= it.
  Status Download(void* host_dst, const void* device_src, size_t bytes, uint64_t* ticket = nullptr);

  // After the owner's wait for the stream: hands every download (of this phase and of the phases
  // closed before it) to its destination, closes the phase, and puts the cursor back to the start.
  // Reading `host_dst` of a download before Deliver reads stale bytes.
  void Deliver();

  // Drops the downloads of a phase that began and did not end (it failed half-way: their
  // destinations may be a caller's buffer it owns again, or a stack array that is gone); the
  // closed phases' stay for the next Deliver. The phase's copies stay queued (queued() is
  // unchanged), so the next Begin packs behind them. Nothing when no phase is open.
  void Abandon();

  // Whether copies were queued since the owner's last wait (it must wait before Deliver).
  bool queued() const { return queued_; }

  // Called after every Deliver that handed downloads over (the owner's checks of phases closed
  // without a wait, whose downloads may come with any later wait, a drain included).
  void SetOnDeliver(std::function<void()> f) { on_deliver_ = std::move(f); }
  // The number of the last download handed over (downloads are numbered from 1 in queue order).
  uint64_t delivered() const { return delivered_; }

  size_t capacity() const { return pinned_.bytes(); }

  // The bytes Upload packs `pieces` into (each piece 16-byte aligned).
  static size_t PackedBytes(const Piece* pieces, size_t num_pieces);

 private:
  // Room for `bytes` more at the cursor: drains and grows the block when it lacks it.
  Status Room(size_t bytes);
  Status WaitStream();

  struct Pending {
    void* host = nullptr;
    size_t at = 0;
    size_t bytes = 0;
    uint64_t ticket = 0;
  };

  int device_ = 0;
  Stream stream_ = nullptr;
  core::PinnedBuffer pinned_;
  size_t cursor_ = 0;
  bool queued_ = false;  // copies queued since the last Deliver
  bool open_ = false;    // a phase began and has not ended (a failed one, at the next Begin)
  size_t closed_ = 0;    // downloads_ of the phases closed by EndDeferred
  std::vector<Pending> downloads_;
  uint64_t tickets_ = 0;    // downloads queued so far
  uint64_t delivered_ = 0;  // the last one handed over
  std::function<void()> on_deliver_;
};

}  // namespace shardrec::embedding
