// The served collection: two version slots and a reader count per slot. A lookup enters the
// current slot with one atomic increment (re-checking the slot index, retrying only if a swap
// just happened), reads the version, and leaves with one decrement: no lock, no wait. A reload
// fills the other slot, flips the index, waits for the old slot's readers to leave, and frees the
// old version (unless a pinned snapshot still holds it).
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "impl/core/status.h"
#include "impl/serving/delta.h"
#include "impl/serving/model.h"
#include "impl/serving/open.h"

namespace shardrec::serving {

class Inference {
 public:
  // Opens `path` (OpenSource) as version 1.
  static Status Open(const std::string& path, const OpenOptions& options,
                     std::unique_ptr<Inference>* out);

  // Runs fn(const Model&) on the current version, which stays alive and current-or-older for
  // the call; returns what fn returns. Lock-free.
  template <typename Fn>
  auto Read(Fn&& fn) const {
    ReadGuard g(*this);
    return fn(*slots_[g.slot]);
  }

  // A reference to the current version that keeps it alive (a pinned snapshot).
  std::shared_ptr<const Model> Current() const {
    ReadGuard g(*this);
    return slots_[g.slot];
  }

  // Opens `path` with the handle's options and publishes it as the next version if it has the
  // same shape (Model::SameShape). kInvalidUsage while another reload runs; any error leaves the
  // current version served. Returns once the old version has no reader left in its slot.
  Status Reload(const std::string& path);

  // Applies `d` to table `table` (ApplyDelta) and publishes the result as the next version;
  // *number receives its number. kNotFound for an unknown table; kInvalidUsage while a reload or
  // another delta runs; any error leaves the current version served. Returns as Reload.
  Status ApplyDelta(const std::string& table, const Delta& d, uint64_t* number);

  // Table names and shapes never change across reloads, so they are kept here for callers that
  // need them to live as long as the handle.
  const std::vector<std::string>& table_names() const { return table_names_; }

 private:
  explicit Inference(OpenOptions options) : options_(std::move(options)) {}

  // Publishes `next` (numbered served + 1) in the idle slot and retires the served version.
  // Called with reloading_ held.
  void Publish(std::shared_ptr<Model> next);

  // Enters the current slot for its lifetime.
  class ReadGuard {
   public:
    explicit ReadGuard(const Inference& inf) : inf_(inf) {
      for (;;) {
        slot = inf.current_.load();
        inf.readers_[slot].count.fetch_add(1);
        if (inf.current_.load() == slot) return;
        inf.readers_[slot].count.fetch_sub(1);  // a swap moved on: take the new slot
      }
    }
    ~ReadGuard() { inf_.readers_[slot].count.fetch_sub(1); }
    ReadGuard(const ReadGuard&) = delete;
    ReadGuard& operator=(const ReadGuard&) = delete;
    int slot = 0;

   private:
    const Inference& inf_;
  };

  struct alignas(64) Readers {
    mutable std::atomic<int64_t> count{0};
  };

  const OpenOptions options_;
  std::vector<std::string> table_names_;
  // slots_[current_] is the served version; the other slot is empty between reloads. A slot is
  // written only by a reload while it is not current and has no reader.
  std::shared_ptr<const Model> slots_[2];
  Readers readers_[2];
  std::atomic<int> current_{0};
  std::atomic<bool> reloading_{false};
};

}  // namespace shardrec::serving
