// The host <-> device traffic of one phase of a GPU collection's step (device_step.h), through
// one grow-only pinned block: uploads are packed into the block and their copies queued back to
// back on the step's stream; downloads are queued into the block and handed to their host
// destinations by Deliver, once the owner has waited for the stream (the phase's one host
// synchronisation). Pinned memory lets the copy engines read and write the block directly and
// the copies stay asynchronous (a copy out of pageable memory goes through a driver bounce
// buffer and may block the host).
//
// Lifetime rules, which make reuse safe: a phase never rewrites a byte of the block that a queued
// copy still reads or writes (the cursor only moves forward within a phase), and the next phase
// starts only after the owner's wait (Begin waits itself when a phase failed half-way and left
// copies queued). When a phase needs more than the block holds, the block is drained (one extra
// wait, the downloads so far delivered) and grown before packing goes on: only beyond the size
// the owner reserved at creation (DeviceStep sizes it from the collection's capacity hints).
//
// Not thread-safe: one collection step uses it at a time.
#pragma once

#include <cstddef>
#include <cstdint>
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
  }

  // At least `bytes` of pinned capacity (a phase within it never grows the block). Only between
  // phases: waits for queued copies first.
  Status Reserve(size_t bytes);

  // Starts a phase (the cursor back to the start of the block). Waits, bounded, only if the
  // previous phase failed with copies still queued; their downloads are dropped.
  Status Begin();

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
  Status Download(void* host_dst, const void* device_src, size_t bytes);

  // After the owner's wait for the stream: hands every download to its destination and closes
  // the phase. Reading `host_dst` of a download before Deliver reads stale bytes.
  void Deliver();

  // Whether copies were queued in this phase (the owner must wait before Deliver / Begin).
  bool queued() const { return queued_; }

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
  };

  int device_ = 0;
  Stream stream_ = nullptr;
  core::PinnedBuffer pinned_;
  size_t cursor_ = 0;
  bool queued_ = false;
  std::vector<Pending> downloads_;
};

}  // namespace shardrec::embedding
