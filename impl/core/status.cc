// Status implementation and code names.
#include "impl/core/status.h"

namespace shardrec {

const char* CodeName(Code code) {
  switch (code) {
    case Code::kOk:
      return "OK";
    case Code::kError:
      return "Error";
    case Code::kInvalidArgument:
      return "InvalidArgument";
    case Code::kInvalidUsage:
      return "InvalidUsage";
    case Code::kOutOfMemory:
      return "OutOfMemory";
    case Code::kCuda:
      return "CudaError";
    case Code::kRemote:
      return "RemoteError";
    case Code::kTimeout:
      return "Timeout";
    case Code::kIo:
      return "IoError";
    case Code::kCorrupt:
      return "Corrupt";
    case Code::kUnsupported:
      return "Unsupported";
    case Code::kNotFound:
      return "NotFound";
    case Code::kInternal:
      return "Internal";
    case Code::kNoDevice:
      return "NoDevice";
    case Code::kAborted:
      return "Aborted";
  }
  return "Unknown";
}

Status::Status(Code code, std::string message) {
  if (code != Code::kOk) rep_ = std::make_shared<Rep>(Rep{code, std::move(message)});
}

const std::string& Status::message() const {
  static const std::string kEmpty;
  return rep_ ? rep_->message : kEmpty;
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  return StrCat(CodeName(rep_->code), ": ", rep_->message);
}

Status Status::WithContext(const std::string& context) const {
  if (ok()) return *this;
  return Status(rep_->code, context + ": " + rep_->message);
}

}  // namespace shardrec
