// The one boundary guard: every C entry point runs its body through Guard(), which turns a
// Status or any C++ exception into a status code plus the thread-local message.
#pragma once

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

// Common argument checks; `what` names the argument in the message.
inline Status CheckNotNull(const void* p, const char* what) {
  if (p == nullptr) return Status::InvalidArgument(what, " must not be NULL");
  return Status::Ok();
}

}  // namespace shardrec::capi
