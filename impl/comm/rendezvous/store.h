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
  // The communicators on this store were aborted: when it is released, do not wait for peers
  // (a hosted server stops at once). Stores without such a wait ignore it.
  virtual void Abandon() {}
};

}  // namespace shardrec::comm
