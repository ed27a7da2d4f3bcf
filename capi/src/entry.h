// The one shape of a C entry point: Enter({args...}, body). Under the exception guard (Guard:
// a Status or any C++ exception becomes a status code plus the thread-local message), it checks
// the listed arguments in order, then takes the exclusive use of each listed handle that asks for
// it, in order, and holds them while `body` runs. An entry point without handle arguments passes
// an empty list and still gets the guard.
#pragma once

#include <atomic>
#include <initializer_list>
#include <memory>
#include <optional>

#include "capi/src/guard.h"
#include "impl/core/check.h"
#include "impl/core/status.h"
#include "shardrec/common.h"

namespace shardrec::capi {

// One argument an entry point checks before its body. Built by Handle(), Exclusive(),
// NotNull() or Unused(); refers to the caller's handle, so it lives only for the call.
struct EntryArg {
  bool present = true;  // false: the argument is NULL (or a handle without its object)
  const char* name = nullptr;
  const char* if_null = " must not be NULL";  // the message is `name` followed by this
  std::atomic<bool>* busy = nullptr;          // set: take the handle's exclusive use
  const char* noun = nullptr;                 // the handle in the "in use" message
};

// A handle is present when it is non-NULL and holds its object (handles.h).
template <typename H>
bool HandlePresent(const H* h) {
  if (h == nullptr) return false;
  if constexpr (requires { h->impl; }) {
    return h->impl != nullptr;
  } else {
    return h->model != nullptr;
  }
}

// A handle that the call only reads: refused when NULL with "<name><if_null>".
template <typename H>
EntryArg Handle(const H* h, const char* name, const char* if_null = " must not be NULL") {
  return EntryArg{HandlePresent(h), name, if_null, nullptr, nullptr};
}

// A handle whose mutable state the call touches: also held for the call (ExclusiveUse), a second
// thread entering meanwhile gets SHARDREC_EUSAGE naming `noun`.
template <typename H>
EntryArg Exclusive(const H* h, const char* name, const char* noun) {
  return EntryArg{HandlePresent(h), name, " must not be NULL", h != nullptr ? &h->busy : nullptr,
                  noun};
}

// Any other pointer argument checked with the handles, before their exclusive use is taken.
inline EntryArg NotNull(const void* p, const char* name) {
  return EntryArg{p != nullptr, name, " must not be NULL", nullptr, nullptr};
}

// A place in the list that this call does not use (a handle that only some variants take).
inline EntryArg Unused() { return EntryArg{}; }

namespace entry_internal {

// Exclusive use of the listed handles, taken in list order; released when this goes away.
class Uses {
 public:
  Status Take(std::initializer_list<EntryArg> args) {
    size_t i = 0;
    for (const EntryArg& a : args) {
      if (a.busy == nullptr) continue;
      if (i == kMaxUses) return Status::Internal("an entry point lists more than two handles");
      uses_[i].emplace(*a.busy, a.noun);
      SR_RETURN_IF_ERROR(uses_[i++]->status());
    }
    return Status::Ok();
  }

 private:
  static constexpr size_t kMaxUses = 2;
  std::optional<ExclusiveUse> uses_[kMaxUses];
};

inline Status Check(std::initializer_list<EntryArg> args) {
  for (const EntryArg& a : args)
    if (!a.present) return Status::InvalidArgument(a.name, a.if_null);
  return Status::Ok();
}

}  // namespace entry_internal

template <typename Fn>
shardrec_status_t Enter(std::initializer_list<EntryArg> args, Fn&& body) noexcept {
  return Guard([&]() -> Status {
    SR_RETURN_IF_ERROR(entry_internal::Check(args));
    entry_internal::Uses uses;
    SR_RETURN_IF_ERROR(uses.Take(args));
    return body();
  });
}

}  // namespace shardrec::capi
