// Status: the C++ core's value type for expected failures; success carries no allocation.
#pragma once

#include <cstdint>
#include <memory>
#include <sstream>
#include <string>
#include <utility>

namespace shardrec {

// Mirrors shardrec_status_t in capi/include/shardrec/common.h; capi/src checks they agree.
enum class Code : int32_t {
  kOk = 0,
  kError = -1,
  kInvalidArgument = -2,
  kInvalidUsage = -3,
  kOutOfMemory = -4,
  kCuda = -5,
  kRemote = -6,
  kTimeout = -7,
  kIo = -8,
  kCorrupt = -9,
  kUnsupported = -10,
  kNotFound = -11,
  kInternal = -12,
  kNoDevice = -13,
  kAborted = -14,
};

const char* CodeName(Code code);

// Joins any streamable values into one string: StrCat("table ", name, " has ", n, " rows").
template <typename... Args>
std::string StrCat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Code code, std::string message);

  static Status Ok() { return Status(); }
  template <typename... A>
  static Status Error(const A&... a) {
    return {Code::kError, StrCat(a...)};
  }
  template <typename... A>
  static Status InvalidArgument(const A&... a) {
    return {Code::kInvalidArgument, StrCat(a...)};
  }
  template <typename... A>
  static Status InvalidUsage(const A&... a) {
    return {Code::kInvalidUsage, StrCat(a...)};
  }
  template <typename... A>
  static Status OutOfMemory(const A&... a) {
    return {Code::kOutOfMemory, StrCat(a...)};
  }
  template <typename... A>
  static Status Cuda(const A&... a) {
    return {Code::kCuda, StrCat(a...)};
  }
  template <typename... A>
  static Status Remote(const A&... a) {
    return {Code::kRemote, StrCat(a...)};
  }
  template <typename... A>
  static Status Timeout(const A&... a) {
    return {Code::kTimeout, StrCat(a...)};
  }
  template <typename... A>
  static Status Io(const A&... a) {
    return {Code::kIo, StrCat(a...)};
  }
  template <typename... A>
  static Status Corrupt(const A&... a) {
    return {Code::kCorrupt, StrCat(a...)};
  }
  template <typename... A>
  static Status Unsupported(const A&... a) {
    return {Code::kUnsupported, StrCat(a...)};
  }
  template <typename... A>
  static Status NotFound(const A&... a) {
    return {Code::kNotFound, StrCat(a...)};
  }
  template <typename... A>
  static Status Internal(const A&... a) {
    return {Code::kInternal, StrCat(a...)};
  }
  template <typename... A>
  static Status NoDevice(const A&... a) {
    return {Code::kNoDevice, StrCat(a...)};
  }
  template <typename... A>
  static Status Aborted(const A&... a) {
    return {Code::kAborted, StrCat(a...)};
  }

  bool ok() const { return rep_ == nullptr; }
  Code code() const { return rep_ ? rep_->code : Code::kOk; }
  const std::string& message() const;
  // "Timeout: allreduce did not complete within 1000 ms".
  std::string ToString() const;
  // Returns a copy whose message is prefixed with context ("rank 2: ...").
  Status WithContext(const std::string& context) const;

 private:
  struct Rep {
    Code code;
    std::string message;
  };
  std::shared_ptr<const Rep> rep_;  // null means OK; shared so copies are cheap
};

// Thrown only inside impl where unwinding is the simplest path (SR_CHECK, ThrowIfError); the
// capi guard turns it back into a status. Never crosses the C ABI.
class StatusError : public std::exception {
 public:
  explicit StatusError(Status s) : status_(std::move(s)) {}
  const Status& status() const { return status_; }
  const char* what() const noexcept override { return status_.message().c_str(); }

 private:
  Status status_;
};

inline void ThrowIfError(const Status& s) {
  if (!s.ok()) throw StatusError(s);
}

}  // namespace shardrec
