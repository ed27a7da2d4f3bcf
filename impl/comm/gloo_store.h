// Adapter from our rendezvous Store to gloo::rendezvous::Store, so Gloo's connectFullMesh can
// rendezvous through any of our stores (memory, TCP, host callbacks).
#pragma once

#include <gloo/rendezvous/store.h>

#include <chrono>
#include <mutex>

#include "impl/comm/store.h"

namespace shardrec::comm {

// Gloo's interface reports failures by throwing; the adapter throws gloo::IoException and keeps
// the first failing Status, so the caller can report the precise code (kTimeout vs kRemote).
class GlooStoreAdapter : public gloo::rendezvous::Store {
 public:
  GlooStoreAdapter(comm::Store* store, std::chrono::milliseconds timeout)
      : store_(store), timeout_(timeout) {}

  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;

  Status first_error() const;

 private:
  [[noreturn]] void Fail(const Status& s);
  comm::Store* store_;
  std::chrono::milliseconds timeout_;
  mutable std::mutex mu_;
  Status first_error_;
};

}  // namespace shardrec::comm
