// The one policy for versioned option structs (README, "C API conventions"): a struct's version
// must be one this library knows, 1 up to the version it was built with. A caller compiled
// against an older header passes an older version and keeps working: fields appended after its
// version are never read and take their defaults. Version 0 (an uninitialised struct) and
// versions from a newer header are refused with the same message everywhere.
#pragma once

#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <string_view>

#include "capi/src/guard.h"
#include "impl/core/check.h"

namespace shardrec::capi {

// `what` names the struct or argument in the message ("topology", "options").
inline Status CheckStructVersion(uint32_t version, uint32_t current, std::string_view what) {
  if (version == 0 || version > current)
    return Status::InvalidArgument(what, ": unsupported struct version ", version,
                                   " (this library knows 1..", current,
                                   "); fill it with its _init() function or _INIT macro");
  return Status::Ok();
}

// Body of every `shardrec_<x>_init(x, version)`: checks, then writes the defaults of the fields
// that exist in `version` (a caller built against an older header has a shorter struct) and
// `version`. `sizes[v - 1]` is the size of the struct in version v; the last is sizeof(T).
template <typename T>
shardrec_status_t InitStruct(T* s, uint32_t version, uint32_t current, const T& defaults,
                             const char* what, std::initializer_list<size_t> sizes = {sizeof(T)}) {
  return Guard([&] {
    SR_RETURN_IF_ERROR(CheckNotNull(s, what));
    SR_RETURN_IF_ERROR(CheckStructVersion(version, current, what));
    SR_CHECK(sizes.size() == current && *(sizes.end() - 1) == sizeof(T));
    std::memcpy(static_cast<void*>(s), &defaults, *(sizes.begin() + (version - 1)));
    s->version = version;
    return Status::Ok();
  });
}

}  // namespace shardrec::capi
