// The plugin's side of the plain-C boundary: a Status becomes a code plus a copied message,
// and no exception ever leaves an entry point.
#pragma once

#include <cstring>
#include <new>

#include "impl/core/plugin_abi.h"
#include "impl/core/status.h"

namespace shardrec::cuda_plugin {

inline int32_t ToPlugin(const Status& s, shardrec_plugin_status_t* out) {
  const auto code = static_cast<int32_t>(s.code());
  if (out != nullptr) {
    out->code = code;
    const std::string& m = s.message();
    const size_t n = m.size() < sizeof(out->message) - 1 ? m.size() : sizeof(out->message) - 1;
    std::memcpy(out->message, m.data(), n);
    out->message[n] = '\0';
  }
  return code;
}

// Runs `body` (returning Status) and reports its result; exceptions become statuses.
template <typename Body>
int32_t Reported(shardrec_plugin_status_t* out, const char* what, Body&& body) noexcept {
  try {
    return ToPlugin(body(), out);
  } catch (const StatusError& e) {
    return ToPlugin(e.status(), out);
  } catch (const std::bad_alloc&) {
    return ToPlugin(Status::OutOfMemory("out of host memory in ", what), out);
  } catch (...) {
    return ToPlugin(Status::Internal("unexpected exception in ", what), out);
  }
}

}  // namespace shardrec::cuda_plugin
