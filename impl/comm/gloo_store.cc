// GlooStoreAdapter: byte-vector conversion and error capture.
#include "impl/comm/gloo_store.h"

#include <gloo/common/error.h>

namespace shardrec::comm {

void GlooStoreAdapter::Fail(const Status& s) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (first_error_.ok()) first_error_ = s;
  }
  throw gloo::IoException(s.ToString());
}

Status GlooStoreAdapter::first_error() const {
  std::lock_guard<std::mutex> lock(mu_);
  return first_error_;
}

void GlooStoreAdapter::set(const std::string& key, const std::vector<char>& data) {
  Status s = store_->Set(key, std::vector<uint8_t>(data.begin(), data.end()));
  if (!s.ok()) Fail(s);
}

std::vector<char> GlooStoreAdapter::get(const std::string& key) {
  std::vector<uint8_t> value;
  Status s = store_->Get(key, timeout_, &value);
  if (!s.ok()) Fail(s);
  return std::vector<char>(value.begin(), value.end());
}

void GlooStoreAdapter::wait(const std::vector<std::string>& keys) { wait(keys, timeout_); }

void GlooStoreAdapter::wait(const std::vector<std::string>& keys,
                            const std::chrono::milliseconds& /*gloo_timeout*/) {
  // Gloo passes its own default here; the communicator's timeout is the one the user set.
  Status s = store_->Wait(keys, timeout_);
  if (!s.ok()) Fail(s);
}

}  // namespace shardrec::comm
