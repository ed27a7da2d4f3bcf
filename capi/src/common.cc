// Version, status strings, the per-thread error message and shardrec_free.
#include <pthread.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "capi/src/guard.h"
#include "impl/core/config.h"
#include "shardrec/version.h"

namespace shardrec::capi {
namespace {

// The per-thread message. Deliberately a trivially destructible thread_local (no C++ TLS
// destructor): hosts call the C API from static destructors at exit, after the main thread's
// C++ thread_locals are gone. Other threads free their buffer through a pthread key, whose
// destructor runs after every C++ thread_local destructor of that thread.
struct ErrorSlot {
  char* data;
  size_t len;
  size_t cap;
};
thread_local ErrorSlot t_error = {nullptr, 0, 0};

pthread_key_t ErrorKey() {
  static pthread_key_t key = [] {
    pthread_key_t k;
    pthread_key_create(&k, [](void* p) { std::free(p); });
    return k;
  }();
  return key;
}

void StoreMessage(const std::string& msg) {
  if (msg.size() + 1 > t_error.cap) {
    size_t cap = msg.size() + 1 < 256 ? 256 : msg.size() + 1;
    char* grown = static_cast<char*>(std::realloc(t_error.data, cap));
    if (grown == nullptr) {  // keep the old buffer; truncate rather than fail the call
      if (t_error.cap == 0) return;
      std::memcpy(t_error.data, msg.data(), t_error.cap - 1);
      t_error.data[t_error.cap - 1] = '\0';
      t_error.len = t_error.cap - 1;
      return;
    }
    t_error.data = grown;
    t_error.cap = cap;
    pthread_setspecific(ErrorKey(), grown);
  }
  std::memcpy(t_error.data, msg.data(), msg.size());
  t_error.data[msg.size()] = '\0';
  t_error.len = msg.size();
}

// The length of the well-formed UTF-8 sequence at s[i] (RFC 3629: no overlongs, surrogates or
// code points past U+10FFFF), or 0.
size_t Utf8Sequence(const std::string& s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  if (c < 0x80) return 1;
  size_t n = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // the second byte's range
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  if (i + n > s.size() || b(i + 1) < lo || b(i + 1) > hi) return 0;
  for (size_t k = 2; k < n; ++k)
    if (b(i + k) < 0x80 || b(i + k) > 0xBF) return 0;
  return n;
}

// Messages may quote bytes of a damaged file (a JSON parser's "last read"): every byte that is
// not part of well-formed UTF-8 becomes the text \xNN, so bindings that decode the message as
// UTF-8 (Java, Rust, Python) always can.
std::string ValidUtf8(const std::string& msg) {
  std::string out;
  size_t i = 0;
  while (i < msg.size()) {
    const size_t n = Utf8Sequence(msg, i);
    if (n > 0) {
      out.append(msg, i, n);
      i += n;
      continue;
    }
    static const char kHex[] = "0123456789ABCDEF";
    const auto c = static_cast<unsigned char>(msg[i++]);
    out += "\\x";
    out += kHex[c >> 4];
    out += kHex[c & 15];
  }
  return out;
}

}  // namespace

shardrec_status_t SetLastError(const Status& status) {
  if (status.ok()) {
    ClearLastError();
  } else {
    StoreMessage(ValidUtf8(std::string(status.message())));
  }
  return static_cast<shardrec_status_t>(status.code());
}

void ClearLastError() {
  if (t_error.data != nullptr) t_error.data[0] = '\0';
  t_error.len = 0;
}

static_assert(static_cast<int>(Code::kNoDevice) == SHARDREC_ENODEVICE);
static_assert(static_cast<int>(Code::kAborted) == SHARDREC_EABORTED);
static_assert(static_cast<int>(Code::kInternal) == SHARDREC_EINTERNAL);
static_assert(static_cast<int>(Code::kInvalidArgument) == SHARDREC_EINVAL);

}  // namespace shardrec::capi

extern "C" {

SHARDREC_API const char* shardrec_status_string(shardrec_status_t code) {
  switch (code) {
    case SHARDREC_OK:
      return "SHARDREC_OK";
    case SHARDREC_ERROR:
      return "SHARDREC_ERROR";
    case SHARDREC_EINVAL:
      return "SHARDREC_EINVAL";
    case SHARDREC_EUSAGE:
      return "SHARDREC_EUSAGE";
    case SHARDREC_ENOMEM:
      return "SHARDREC_ENOMEM";
    case SHARDREC_ECUDA:
      return "SHARDREC_ECUDA";
    case SHARDREC_EREMOTE:
      return "SHARDREC_EREMOTE";
    case SHARDREC_ETIMEOUT:
      return "SHARDREC_ETIMEOUT";
    case SHARDREC_EIO:
      return "SHARDREC_EIO";
    case SHARDREC_ECORRUPT:
      return "SHARDREC_ECORRUPT";
    case SHARDREC_EUNSUPPORTED:
      return "SHARDREC_EUNSUPPORTED";
    case SHARDREC_ENOTFOUND:
      return "SHARDREC_ENOTFOUND";
    case SHARDREC_EINTERNAL:
      return "SHARDREC_EINTERNAL";
    case SHARDREC_ENODEVICE:
      return "SHARDREC_ENODEVICE";
    case SHARDREC_EABORTED:
      return "SHARDREC_EABORTED";
    default:
      return "SHARDREC_UNKNOWN";
  }
}

SHARDREC_API const char* shardrec_last_error(void) {
  const auto& slot = shardrec::capi::t_error;
  return slot.data != nullptr ? slot.data : "";
}

SHARDREC_API size_t shardrec_last_error_copy(char* buf, size_t buf_len) {
  const auto& slot = shardrec::capi::t_error;
  if (buf != nullptr && buf_len > 0) {
    size_t n = slot.len < buf_len - 1 ? slot.len : buf_len - 1;
    if (n > 0) std::memcpy(buf, slot.data, n);
    buf[n] = '\0';
  }
  return slot.len;
}

SHARDREC_API int32_t shardrec_version(void) { return SHARDREC_VERSION_CODE; }

SHARDREC_API const char* shardrec_version_string(void) { return SHARDREC_VERSION_STRING; }

SHARDREC_API size_t shardrec_dtype_size(int32_t dtype) {
  switch (dtype) {
    case SHARDREC_DTYPE_FLOAT32:
      return 4;
    case SHARDREC_DTYPE_FLOAT16:
      return 2;
    case SHARDREC_DTYPE_BFLOAT16:
      return 2;
    case SHARDREC_DTYPE_FLOAT64:
      return 8;
    case SHARDREC_DTYPE_INT32:
      return 4;
    case SHARDREC_DTYPE_INT64:
      return 8;
    case SHARDREC_DTYPE_UINT8:
      return 1;
    default:
      return 0;
  }
}

SHARDREC_API void shardrec_free(void* ptr) { std::free(ptr); }

}  // extern "C"
