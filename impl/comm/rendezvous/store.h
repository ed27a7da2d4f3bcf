// Rendezvous key-value store: how ranks find each other. Implementations: in-memory (threads of
// one process), TCP (hosted by rank 0, addressed by the 128-byte unique id), and host callbacks.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "impl/core/status.h"

namespace shardrec::comm {

class Store {
 public:
  virtual ~Store() = default;
  virtual Status Set(const std::string& key, const std::vector<uint8_t>& value) = 0;
  // Blocks until the key exists or the timeout expires (kTimeout).
  virtual Status Get(const std::string& key, std::chrono::milliseconds timeout,
                     std::vector<uint8_t>* value) = 0;
  // Blocks until every key exists or the timeout expires (kTimeout).
  virtual Status Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) = 0;
  // Set and Get bounded as a whole by `within` (connecting included), for what a failing rank
  // tells its peers (a failure note): a store that is gone or cut off must not add a timeout to
  // the error. A Get finds only a key that is already there. Stores whose calls cannot hang
  // (in memory) or cannot be bounded (host callbacks) do a plain Set / Get.
  virtual Status SetWithin(const std::string& key, const std::vector<uint8_t>& value,
                           std::chrono::milliseconds within) {
    (void)within;
    return Set(key, value);
  }
  virtual Status GetWithin(const std::string& key, std::chrono::milliseconds within,
                           std::vector<uint8_t>* value) {
    (void)within;
    return Get(key, std::chrono::milliseconds(0), value);
  }
  // Why the session on this store was refused (a rank number claimed twice), asked within
  // `within`: kInvalidUsage naming the claim, or OK when the store does not say so or cannot be
  // asked. Only a rendezvous server that refuses sessions (the TCP store) has a reason to give.
  virtual Status RefusalReason(std::chrono::milliseconds within) {
    (void)within;
    return Status::Ok();
  }
  // The communicators on this store were aborted: when it is released, do not wait for peers
  // (a hosted server stops at once). Stores without such a wait ignore it.
  virtual void Abandon() {}
};

}  // namespace shardrec::comm
