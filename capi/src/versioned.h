// The one policy for versioned option structs (README, "C API conventions"): a struct's version
// must be one this library knows, 1 up to the version it was built with. A caller compiled
// against an older header passes an older version and keeps working: fields appended after its
// version are never read and take their defaults. Version 0 (an uninitialised struct) and
// versions from a newer header are refused with the same message everywhere. An array of such
// structs is read at the stride of the version its first element declares (ReadVersionedArray).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <span>
#include <string_view>
#include <vector>

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

// One version of a versioned struct as its callers lay it out. `size` is sizeof() of the struct
// in the header that shipped this version: the distance between two elements of an array.
// `fields` is the offset, in the current layout, of the first field appended after this version:
// the bytes of an element that this version defines. For the current version both are sizeof(T).
struct StructVersion {
  size_t size;
  size_t fields;
};

// Reads `n` elements of an array of versioned structs into `out`, each widened to the current
// layout. A caller built against an older header passes an array of the older, shorter struct,
// so elements are found at the stride of the version the first element declares, and every
// element must declare that same version (a mixed array has no stride). Fields the caller's
// version lacks take `defaults`; each element keeps the version its caller gave. `versions[v-1]`
// describes version v; there are as many as the current version number. `what` names the array
// in messages ("tables"). A NULL array is an error unless `n` is 0; nothing is written to `out`
// on error, and nothing is read from an empty array.
template <typename T>
Status ReadVersionedArray(const T* array, size_t n, const T& defaults,
                          std::span<const StructVersion> versions, std::string_view what,
                          std::vector<T>* out) {
  SR_CHECK(!versions.empty() && versions.back().size == sizeof(T) &&
           versions.back().fields == sizeof(T));
  if (array == nullptr && n > 0)
    return Status::InvalidArgument(what, " is NULL but its count is ", n);
  // An empty array has no first element to read, whatever its pointer.
  if (n == 0) {
    out->clear();
    return Status::Ok();
  }
  const auto current = static_cast<uint32_t>(versions.size());
  const auto* bytes = reinterpret_cast<const unsigned char*>(array);
  uint32_t first = 0;
  std::memcpy(&first, bytes, sizeof(first));
  SR_RETURN_IF_ERROR(CheckStructVersion(first, current, StrCat(what, "[0]")));
  const StructVersion& layout = versions[first - 1];
  SR_CHECK(layout.size <= sizeof(T) && layout.fields <= sizeof(T));
  // The bytes of this version's fields, never past the caller's element (a field appended later
  // may sit in the old struct's tail padding, or beyond its end).
  const size_t copied = std::min(layout.size, layout.fields);
  std::vector<T> read;
  read.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    const unsigned char* element = bytes + i * layout.size;
    uint32_t version = 0;
    std::memcpy(&version, element, sizeof(version));
    if (version != first) {
      const std::string name = StrCat(what, "[", i, "]");
      SR_RETURN_IF_ERROR(CheckStructVersion(version, current, name));
      return Status::InvalidArgument(
          name, ": struct version ", version, " differs from ", what, "[0]'s version ", first,
          "; every element of an array must be filled for the same version (the array is read at "
          "the stride of its first element's version)");
    }
    T widened = defaults;
    std::memcpy(static_cast<void*>(&widened), element, copied);
    read.push_back(widened);
  }
  *out = std::move(read);
  return Status::Ok();
}

}  // namespace shardrec::capi
