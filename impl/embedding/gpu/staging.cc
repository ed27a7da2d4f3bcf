// Pinned staging of one phase's copies (staging.h).
#include "impl/embedding/gpu/staging.h"

#include <algorithm>
#include <cstring>

#include "impl/core/check.h"
#include "impl/core/cuda_plugin.h"
#include "impl/core/device_buffer.h"

namespace shardrec::embedding {

namespace {

size_t Align16(size_t n) { return (n + 15) & ~size_t{15}; }

}  // namespace

size_t DeviceStaging::PackedBytes(const Piece* pieces, size_t num_pieces) {
  size_t total = 0;
  for (size_t k = 0; k < num_pieces; ++k) total += Align16(pieces[k].bytes);
  return total;
}

Status DeviceStaging::WaitStream() {
  const core::CudaRuntime* rt = nullptr;
  SR_RETURN_IF_ERROR(core::GetCudaRuntime(&rt));
  return rt->StreamWait(device_, stream_, core::kDeviceWaitMs);
}

Status DeviceStaging::Reserve(size_t bytes) {
  if (bytes <= pinned_.bytes()) return Status::Ok();
  if (queued_) {
    // Between phases: a phase still open failed half-way, its downloads go (their destinations
    // may be gone); the closed phases' are handed over.
    if (open_) downloads_.resize(closed_);
    SR_RETURN_IF_ERROR(WaitStream());
    Deliver();
  }
  cursor_ = 0;
  return pinned_.Reserve(bytes);
}

Status DeviceStaging::Begin() {
  if (open_ && queued_) {
    // A failed phase: its copies may still read or write the block. Its downloads go (their
    // destinations may be gone), the closed phases' are handed over.
    downloads_.resize(closed_);
    SR_RETURN_IF_ERROR(WaitStream());
    Deliver();
  }
  if (!queued_) {
    downloads_.clear();
    closed_ = 0;
    cursor_ = 0;
  }
  open_ = true;
  return Status::Ok();
}

void DeviceStaging::Abandon() {
  if (!open_) return;
  downloads_.resize(closed_);
  open_ = false;
}

void DeviceStaging::EndDeferred() {
  open_ = false;
  closed_ = downloads_.size();
}

Status DeviceStaging::MakeRoom(size_t bytes) { return Room(bytes); }

Status DeviceStaging::Room(size_t bytes) {
  if (cursor_ + bytes <= pinned_.bytes()) return Status::Ok();
  // Not enough left: everything queued so far must be done before the block is reused or moves.
  // The block then grows to hold what was in flight and this piece together, so the same
  // sequence of phases fits from then on without draining.
  const size_t want = cursor_ + bytes;
  if (queued_) {
    SR_RETURN_IF_ERROR(WaitStream());
    Deliver();
    open_ = true;  // the phase goes on from the block's start
  }
  cursor_ = 0;
  return pinned_.Reserve(std::max(want, 2 * pinned_.bytes()));
}

Status DeviceStaging::Upload(void* device_dst, const Piece* pieces, size_t num_pieces, size_t* at) {
  const size_t total = PackedBytes(pieces, num_pieces);
  size_t used = 0;
  for (size_t k = 0; k < num_pieces; ++k) {
    at[k] = used;
    used += Align16(pieces[k].bytes);
  }
  // The copy ends at the last piece's last byte (its padding is not copied).
  size_t copy = 0;
  for (size_t k = 0; k < num_pieces; ++k)
    if (pieces[k].bytes > 0) copy = at[k] + pieces[k].bytes;
  if (copy == 0) return Status::Ok();
  SR_RETURN_IF_ERROR(Room(total));
  auto* block = static_cast<uint8_t*>(pinned_.data()) + cursor_;
  for (size_t k = 0; k < num_pieces; ++k)
    if (pieces[k].bytes > 0) std::memcpy(block + at[k], pieces[k].host, pieces[k].bytes);
  const core::CudaRuntime* rt = nullptr;
  SR_RETURN_IF_ERROR(core::GetCudaRuntime(&rt));
  queued_ = true;
  SR_RETURN_IF_ERROR(
      rt->MemcpyAsync(device_, device_dst, block, copy, core::CopyKind::kHostToDevice, stream_));
  cursor_ += total;
  return Status::Ok();
}

Status DeviceStaging::Download(void* host_dst, const void* device_src, size_t bytes,
                               uint64_t* ticket) {
  if (ticket != nullptr) *ticket = delivered_;  // nothing to wait for
  if (bytes == 0) return Status::Ok();
  const size_t room = Align16(bytes);
  SR_RETURN_IF_ERROR(Room(room));
  const core::CudaRuntime* rt = nullptr;
  SR_RETURN_IF_ERROR(core::GetCudaRuntime(&rt));
  auto* block = static_cast<uint8_t*>(pinned_.data()) + cursor_;
  queued_ = true;
  SR_RETURN_IF_ERROR(
      rt->MemcpyAsync(device_, block, device_src, bytes, core::CopyKind::kDeviceToHost, stream_));
  downloads_.push_back(Pending{host_dst, cursor_, bytes, ++tickets_});
  if (ticket != nullptr) *ticket = tickets_;
  cursor_ += room;
  return Status::Ok();
}

void DeviceStaging::Deliver() {
  const auto* block = static_cast<const uint8_t*>(pinned_.data());
  for (const Pending& d : downloads_) std::memcpy(d.host, block + d.at, d.bytes);
  const bool delivered = !downloads_.empty();
  if (delivered) delivered_ = downloads_.back().ticket;
  downloads_.clear();
  closed_ = 0;
  queued_ = false;
  open_ = false;
  cursor_ = 0;
  if (delivered && on_deliver_) on_deliver_();
}

}  // namespace shardrec::embedding
