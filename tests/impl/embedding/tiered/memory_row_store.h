// A RowStore kept in a map, for the tiered module's white-box tests (a test double: the library's
// engine is impl/store's). Puts can be made to fail, and a Put can be held until released, so
// the write-back queue's error and ordering paths can be driven.
#pragma once

#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

#include "impl/store/row_store.h"

namespace shardrec::embedding::tiered {

class MemoryRowStore final : public store::RowStore {
 public:
  explicit MemoryRowStore(size_t value_bytes) : value_bytes_(value_bytes) {}

  size_t value_bytes() const override { return value_bytes_; }
  Status Get(const int64_t* keys, size_t n, uint8_t* out, bool* found) override {
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t i = 0; i < n; ++i) {
      auto it = rows_.find(keys[i]);
      found[i] = it != rows_.end();
      if (found[i]) std::memcpy(out + i * value_bytes_, it->second.data(), value_bytes_);
    }
    return Status::Ok();
  }
  Status Put(const int64_t* keys, const uint8_t* values, size_t n) override {
    std::unique_lock<std::mutex> lock(mu_);
    released_.wait(lock, [&] { return !hold_; });
    ++puts_;
    if (fail_) return Status::Io("full disk (test double)");
    for (size_t i = 0; i < n; ++i)
      rows_[keys[i]].assign(values + i * value_bytes_, values + (i + 1) * value_bytes_);
    return Status::Ok();
  }
  Status Erase(const int64_t* keys, size_t n) override {
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t i = 0; i < n; ++i) rows_.erase(keys[i]);
    return Status::Ok();
  }
  Status Flush() override { return Status::Ok(); }
  Status Snapshot(const std::string&) override { return Status::Unsupported("test double"); }
  Status Scan(int64_t* cursor, size_t, std::vector<int64_t>*, std::vector<uint8_t>*) override {
    *cursor = -1;
    return Status::Ok();
  }
  store::StoreStats stats() const override { return {}; }

  void set_fail(bool f) {
    std::lock_guard<std::mutex> lock(mu_);
    fail_ = f;
  }
  void hold(bool h) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      hold_ = h;
    }
    released_.notify_all();
  }
  int puts() {
    std::lock_guard<std::mutex> lock(mu_);
    return puts_;
  }

 private:
  const size_t value_bytes_;
  std::mutex mu_;
  std::condition_variable released_;
  std::map<int64_t, std::vector<uint8_t>> rows_;
  bool fail_ = false;
  bool hold_ = false;
  int puts_ = 0;
};

}  // namespace shardrec::embedding::tiered
