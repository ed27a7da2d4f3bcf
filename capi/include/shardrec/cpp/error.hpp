/**
 * @file cpp/error.hpp
 * shardrec::Error, the status check every wrapper uses, and the checks of a handle before use
 * (a moved-from or default-constructed object says so, instead of the C parameter's name).
 * Included by shardrec.hpp; not meant to be included alone.
 */
#ifndef SHARDREC_CPP_ERROR_HPP_
#define SHARDREC_CPP_ERROR_HPP_

#include <cstddef>
#include <memory>
#include <stdexcept>
#include <string>

#include "shardrec/shardrec.h"

namespace shardrec {

/** A failed libshardrec call: code() is the C status (SHARDREC_E*), what() the C message. */
class Error : public std::runtime_error {
 public:
  Error(shardrec_status_t code, const std::string& message)
      : std::runtime_error(message), code_(code) {}

  /** The status code, a negative SHARDREC_E* value. */
  shardrec_status_t code() const noexcept { return code_; }

  /** The status name, e.g. "SHARDREC_EINVAL". */
  const char* code_name() const noexcept { return shardrec_status_string(code_); }

 private:
  shardrec_status_t code_;
};

/** Throws Error for a negative status, with the calling thread's last error message. */
inline void check(shardrec_status_t status) {
  if (status < 0) throw Error(status, shardrec_last_error());
}

/** The runtime library's version, "major.minor.patch". */
inline std::string version_string() { return shardrec_version_string(); }

namespace detail {

/**
 * @p handle, or Error(SHARDREC_EINVAL) naming @p type when it is NULL: the object was moved from
 * or default-constructed. Every wrapper call goes through here, so such a use never reaches C
 * (whose message would name a parameter the C++ caller never saw).
 */
template <typename T>
T* live(T* handle, const char* type) {
  if (handle == nullptr) {
    throw Error(SHARDREC_EINVAL, std::string(type) +
                                     " has no handle: the object was moved from (or "
                                     "default-constructed); use the object it was moved to");
  }
  return handle;
}

/** Takes a library-allocated text (freed with shardrec_free) into a std::string. */
inline std::string take_text(char* text, size_t len) {
  std::unique_ptr<char, void (*)(void*)> owned(text, shardrec_free);
  return text == nullptr ? std::string() : std::string(text, len);
}

/** A C string argument: Error(SHARDREC_EINVAL) for an embedded NUL instead of a silent cut. */
inline const char* c_str(const std::string& s, const char* what) {
  if (s.find('\0') != std::string::npos) {
    throw Error(SHARDREC_EINVAL, std::string(what) + " contains a NUL character");
  }
  return s.c_str();
}

}  // namespace detail

/** Devices visible to the CUDA plugin (0 without a GPU); throws SHARDREC_ENODEVICE when the
 *  plugin cannot be loaded (shardrec_device_count). Any thread. */
inline int32_t device_count() {
  int32_t n = 0;
  check(shardrec_device_count(&n));
  return n;
}

/** Throws unless the device can be used (shardrec_device_check). Any thread. */
inline void device_check(int32_t device_type, int32_t device_index) {
  check(shardrec_device_check(device_type, device_index));
}

/** The path of the loaded CUDA plugin (shardrec_device_plugin_path). Any thread. */
inline std::string device_plugin_path() {
  size_t len = 0;
  check(shardrec_device_plugin_path(&len, nullptr, 0));
  std::string path(len + 1, '\0');
  check(shardrec_device_plugin_path(&len, path.data(), path.size()));
  path.resize(len);
  return path;
}

}  // namespace shardrec

#endif  // SHARDREC_CPP_ERROR_HPP_
