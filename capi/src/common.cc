// Version, status strings, the per-thread error message and shardrec_free.
#include <cstdlib>
#include <cstring>
#include <string>

#include "capi/src/guard.h"
#include "impl/core/config.h"
#include "shardrec/version.h"

namespace shardrec::capi {
namespace {
thread_local std::string t_last_error;
}

shardrec_status_t SetLastError(const Status& status) {
  if (status.ok()) {
    t_last_error.clear();
  } else {
    t_last_error = status.message();
  }
  return static_cast<shardrec_status_t>(status.code());
}

void ClearLastError() { t_last_error.clear(); }

static_assert(static_cast<int>(Code::kNoDevice) == SHARDREC_ENODEVICE);
static_assert(static_cast<int>(Code::kInternal) == SHARDREC_EINTERNAL);
static_assert(static_cast<int>(Code::kInvalidArgument) == SHARDREC_EINVAL);

}  // namespace shardrec::capi

extern "C" {

SHARDREC_API const char* shardrec_status_string(shardrec_status_t code) {
  switch (code) {
    case SHARDREC_OK: return "SHARDREC_OK";
    case SHARDREC_ERROR: return "SHARDREC_ERROR";
    case SHARDREC_EINVAL: return "SHARDREC_EINVAL";
    case SHARDREC_EUSAGE: return "SHARDREC_EUSAGE";
    case SHARDREC_ENOMEM: return "SHARDREC_ENOMEM";
    case SHARDREC_ECUDA: return "SHARDREC_ECUDA";
    case SHARDREC_EREMOTE: return "SHARDREC_EREMOTE";
    case SHARDREC_ETIMEOUT: return "SHARDREC_ETIMEOUT";
    case SHARDREC_EIO: return "SHARDREC_EIO";
    case SHARDREC_ECORRUPT: return "SHARDREC_ECORRUPT";
    case SHARDREC_EUNSUPPORTED: return "SHARDREC_EUNSUPPORTED";
    case SHARDREC_ENOTFOUND: return "SHARDREC_ENOTFOUND";
    case SHARDREC_EINTERNAL: return "SHARDREC_EINTERNAL";
    case SHARDREC_ENODEVICE: return "SHARDREC_ENODEVICE";
    default: return "SHARDREC_UNKNOWN";
  }
}

SHARDREC_API const char* shardrec_last_error(void) {
  return shardrec::capi::t_last_error.c_str();
}

SHARDREC_API size_t shardrec_last_error_copy(char* buf, size_t buf_len) {
  const std::string& msg = shardrec::capi::t_last_error;
  if (buf != nullptr && buf_len > 0) {
    size_t n = msg.size() < buf_len - 1 ? msg.size() : buf_len - 1;
    std::memcpy(buf, msg.data(), n);
    buf[n] = '\0';
  }
  return msg.size();
}

SHARDREC_API int32_t shardrec_version(void) { return SHARDREC_VERSION_CODE; }

SHARDREC_API const char* shardrec_version_string(void) { return SHARDREC_VERSION_STRING; }

SHARDREC_API size_t shardrec_dtype_size(int32_t dtype) {
  switch (dtype) {
    case SHARDREC_DTYPE_FLOAT32: return 4;
    case SHARDREC_DTYPE_FLOAT16: return 2;
    case SHARDREC_DTYPE_BFLOAT16: return 2;
    case SHARDREC_DTYPE_FLOAT64: return 8;
    case SHARDREC_DTYPE_INT32: return 4;
    case SHARDREC_DTYPE_INT64: return 8;
    case SHARDREC_DTYPE_UINT8: return 1;
    default: return 0;
  }
}

SHARDREC_API void shardrec_free(void* ptr) { std::free(ptr); }

}  // extern "C"
