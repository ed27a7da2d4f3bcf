// The served collection: the current model version behind an atomic shared pointer, so a lookup
// pins a version with one atomic load (no mutex), and a reload swaps a new version in while
// lookups run. Old versions are freed by their last reader.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "impl/core/status.h"
#include "impl/serving/model.h"
#include "impl/serving/open.h"

namespace shardrec::serving {

class Inference {
 public:
  // Opens `path` (OpenSource) as version 1.
  static Status Open(const std::string& path, const OpenOptions& options,
                     std::unique_ptr<Inference>* out);

  // The version to read; it stays valid while the returned pointer is held.
  std::shared_ptr<const Model> Current() const { return current_.load(std::memory_order_acquire); }

  // Opens `path` with the handle's options and publishes it as the next version if it has the
  // same shape (Model::SameShape). kInvalidUsage while another reload runs; any error leaves the
  // current version served.
  Status Reload(const std::string& path);

  // Table names and shapes never change across reloads, so they are kept here for callers that
  // need them to live as long as the handle.
  const std::vector<std::string>& table_names() const { return table_names_; }

 private:
  explicit Inference(OpenOptions options) : options_(std::move(options)) {}

  const OpenOptions options_;
  std::vector<std::string> table_names_;
  std::atomic<std::shared_ptr<const Model>> current_;
  std::atomic<bool> reloading_{false};
};

}  // namespace shardrec::serving
