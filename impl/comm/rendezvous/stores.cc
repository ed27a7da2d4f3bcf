// MemoryStore, PrefixStore and CallbackStore.
#include "impl/comm/rendezvous/stores.h"

#include "impl/core/check.h"

namespace shardrec::comm {

Status MemoryStore::Set(const std::string& key, const std::vector<uint8_t>& value) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    data_[key] = value;
  }
  cv_.notify_all();
  return Status::Ok();
}

Status MemoryStore::Get(const std::string& key, std::chrono::milliseconds timeout,
                        std::vector<uint8_t>* value) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!cv_.wait_for(lock, timeout, [&] { return data_.count(key) != 0; })) {
    return Status::Timeout("store key '", key, "' did not appear within ", timeout.count(), " ms");
  }
  *value = data_[key];
  return Status::Ok();
}

Status MemoryStore::Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  const std::string* missing = nullptr;
  auto all = [&] {
    for (const auto& k : keys) {
      if (data_.count(k) == 0) {
        missing = &k;
        return false;
      }
    }
    return true;
  };
  if (!cv_.wait_for(lock, timeout, all)) {
    return Status::Timeout("store key '", *missing, "' did not appear within ", timeout.count(),
                           " ms");
  }
  return Status::Ok();
}

Status PrefixStore::Set(const std::string& key, const std::vector<uint8_t>& value) {
  return base_->Set(Key(key), value);
}

Status PrefixStore::Get(const std::string& key, std::chrono::milliseconds timeout,
                        std::vector<uint8_t>* value) {
  return base_->Get(Key(key), timeout, value);
}

Status PrefixStore::Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  std::vector<std::string> full;
  full.reserve(keys.size());
  for (const auto& k : keys) full.push_back(Key(k));
  return base_->Wait(full, timeout);
}

namespace {

Status FromCallback(int32_t rc, const char* what, const std::string& key,
                    std::chrono::milliseconds timeout) {
  if (rc == 0) return Status::Ok();
  if (rc == static_cast<int32_t>(Code::kTimeout)) {
    return Status::Timeout("store callback ", what, " for key '", key, "' timed out after ",
                           timeout.count(), " ms");
  }
  return Status::Remote("store callback ", what, " for key '", key, "' returned code ", rc);
}

}  // namespace

Status CallbackStore::Set(const std::string& key, const std::vector<uint8_t>& value) {
  return FromCallback(cb_.set(cb_.payload, key.c_str(), value.data(), value.size()), "set", key,
                      std::chrono::milliseconds(0));
}

Status CallbackStore::Get(const std::string& key, std::chrono::milliseconds timeout,
                          std::vector<uint8_t>* value) {
  value->resize(256);
  for (int attempt = 0; attempt < 8; ++attempt) {
    size_t len = 0;
    SR_RETURN_IF_ERROR(FromCallback(
        cb_.get(cb_.payload, key.c_str(), timeout.count(), value->data(), value->size(), &len),
        "get", key, timeout));
    if (len <= value->size()) {
      value->resize(len);
      return Status::Ok();
    }
    value->resize(len);  // too small: the key exists now, ask again with room for it
  }
  return Status::Remote("store callback get for key '", key,
                        "' kept reporting a larger value size");
}

Status CallbackStore::Wait(const std::vector<std::string>& keys,
                           std::chrono::milliseconds timeout) {
  if (cb_.wait != nullptr) {
    std::vector<const char*> ptrs;
    ptrs.reserve(keys.size());
    for (const auto& k : keys) ptrs.push_back(k.c_str());
    return FromCallback(cb_.wait(cb_.payload, ptrs.data(), ptrs.size(), timeout.count()), "wait",
                        keys.empty() ? std::string() : keys.front(), timeout);
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::vector<uint8_t> scratch;
  for (const auto& k : keys) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() < 0) left = std::chrono::milliseconds(0);
    SR_RETURN_IF_ERROR(Get(k, left, &scratch));
  }
  return Status::Ok();
}

}  // namespace shardrec::comm
