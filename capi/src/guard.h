// The one boundary guard: every C entry point runs its body through Guard(), which turns a
// Status or any C++ exception into a status code plus the thread-local message.
#pragma once

#include <atomic>
#include <exception>
#include <new>
#include <string>

#include "impl/core/status.h"
#include "shardrec/common.h"

namespace shardrec::capi {

// Records the message for shardrec_last_error() and returns the C code.
shardrec_status_t SetLastError(const Status& status);
void ClearLastError();

template <typename Fn>
shardrec_status_t Guard(Fn&& body) noexcept {
  ClearLastError();
  try {
    return SetLastError(body());
  } catch (const StatusError& e) {
    return SetLastError(e.status());
  } catch (const std::bad_alloc&) {
    return SetLastError(Status::OutOfMemory("out of host memory"));
  } catch (const std::exception& e) {
    return SetLastError(Status::Internal("unexpected exception: ", e.what()));
  } catch (...) {
    return SetLastError(Status::Internal("unexpected non-standard exception"));
  }
}

// A handle is used by one thread at a time (the headers' promise). Entry points that touch a
// handle's mutable state hold this for the call: a second thread entering meanwhile gets
// SHARDREC_EUSAGE instead of racing. One atomic exchange, so it costs nothing measurable.
class ExclusiveUse {
 public:
  ExclusiveUse(std::atomic<bool>& busy, const char* handle)
      : busy_(busy), owned_(!busy.exchange(true, std::memory_order_acquire)), handle_(handle) {}
  ~ExclusiveUse() {
    if (owned_) busy_.store(false, std::memory_order_release);
  }
  ExclusiveUse(const ExclusiveUse&) = delete;
  ExclusiveUse& operator=(const ExclusiveUse&) = delete;

  Status status() const {
    if (owned_) return Status::Ok();
    return Status::InvalidUsage("the ", handle_,
                                " is in use by another thread (or by a callback of this call); "
                                "a handle must be used by one thread at a time");
  }

 private:
  std::atomic<bool>& busy_;
  const bool owned_;
  const char* handle_;
};

// Common argument checks; `what` names the argument in the message.
inline Status CheckNotNull(const void* p, const char* what) {
  if (p == nullptr) return Status::InvalidArgument(what, " must not be NULL");
  return Status::Ok();
}

}  // namespace shardrec::capi
