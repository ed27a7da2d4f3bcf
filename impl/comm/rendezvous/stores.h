// In-process rendezvous stores: a memory store shared by threads of one process, a prefixing
// view for sub-groups, and a store backed by host callbacks (the C API's custom rendezvous).
#pragma once

#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>

#include "impl/comm/rendezvous/store.h"

namespace shardrec::comm {

// Threads of one process meet here (the local group and the tests). Thread-safe.
class MemoryStore : public Store {
 public:
  Status Set(const std::string& key, const std::vector<uint8_t>& value) override;
  Status Get(const std::string& key, std::chrono::milliseconds timeout,
             std::vector<uint8_t>* value) override;
  Status Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::vector<uint8_t>> data_;
};

// Every key becomes `prefix + "/" + key` in the base store, so that sub-groups (splits) and
// successive communicators on one store never see each other's keys.
class PrefixStore : public Store {
 public:
  PrefixStore(std::shared_ptr<Store> base, std::string prefix)
      : base_(std::move(base)), prefix_(std::move(prefix)) {}
  Status Set(const std::string& key, const std::vector<uint8_t>& value) override;
  Status Get(const std::string& key, std::chrono::milliseconds timeout,
             std::vector<uint8_t>* value) override;
  Status Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  Status SetWithin(const std::string& key, const std::vector<uint8_t>& value,
                   std::chrono::milliseconds within) override {
    return base_->SetWithin(Key(key), value, within);
  }
  Status GetWithin(const std::string& key, std::chrono::milliseconds within,
                   std::vector<uint8_t>* value) override {
    return base_->GetWithin(Key(key), within, value);
  }
  Status RefusalReason(std::chrono::milliseconds within) override {
    return base_->RefusalReason(within);
  }
  void Abandon() override { base_->Abandon(); }
  const std::shared_ptr<Store>& base() const { return base_; }

 private:
  std::string Key(const std::string& key) const { return prefix_ + "/" + key; }
  std::shared_ptr<Store> base_;
  std::string prefix_;
};

// Host-provided store functions (mirrors shardrec_store_callbacks_t). Each returns 0 on success,
// -7 (timeout) when a key did not appear in time, another negative code on failure.
struct StoreCallbacks {
  int32_t (*set)(void* payload, const char* key, const void* value, size_t value_len) = nullptr;
  // Copies the value into buf when buf_len is large enough and always stores its size in
  // *value_len; the store calls again with a larger buffer when it was too small.
  int32_t (*get)(void* payload, const char* key, int64_t timeout_ms, void* buf, size_t buf_len,
                 size_t* value_len) = nullptr;
  // Optional: when null, Wait() is emulated with get().
  int32_t (*wait)(void* payload, const char* const* keys, size_t num_keys,
                  int64_t timeout_ms) = nullptr;
  void* payload = nullptr;
};

// Calls the host functions; thread-safe as far as the host functions are.
class CallbackStore : public Store {
 public:
  explicit CallbackStore(const StoreCallbacks& callbacks) : cb_(callbacks) {}
  Status Set(const std::string& key, const std::vector<uint8_t>& value) override;
  Status Get(const std::string& key, std::chrono::milliseconds timeout,
             std::vector<uint8_t>* value) override;
  Status Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;

 private:
  StoreCallbacks cb_;
};

}  // namespace shardrec::comm
