// A minimal in-process rendezvous store for the white-box plugin tests (threads as ranks).
#pragma once

#include <condition_variable>
#include <map>
#include <mutex>

#include "impl/comm/rendezvous/store.h"

namespace shardrec::testing {

class MemoryStore final : public comm::Store {
 public:
  Status Set(const std::string& key, const std::vector<uint8_t>& value) override {
    std::lock_guard<std::mutex> lock(mu_);
    values_[key] = value;
    cv_.notify_all();
    return Status::Ok();
  }

  Status Get(const std::string& key, std::chrono::milliseconds timeout,
             std::vector<uint8_t>* value) override {
    std::unique_lock<std::mutex> lock(mu_);
    if (!cv_.wait_for(lock, timeout, [&] { return values_.count(key) > 0; })) {
      return Status::Timeout("key ", key, " not set within ", timeout.count(), " ms");
    }
    *value = values_[key];
    return Status::Ok();
  }

  Status Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    std::unique_lock<std::mutex> lock(mu_);
    const bool all = cv_.wait_for(lock, timeout, [&] {
      for (const auto& k : keys) {
        if (values_.count(k) == 0) return false;
      }
      return true;
    });
    return all ? Status::Ok() : Status::Timeout("keys not set within ", timeout.count(), " ms");
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::vector<uint8_t>> values_;
};

}  // namespace shardrec::testing
