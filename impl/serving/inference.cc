// Open and reload of the served collection: the new version is built completely off to the side,
// placed in the idle slot and published by flipping the slot index, so readers never see a
// half-built version; the old one is released once its slot has no reader.
#include "impl/serving/inference.h"

#include <thread>
#include <utility>

#include "impl/core/check.h"

namespace shardrec::serving {
namespace {

void WaitForNoReaders(const std::atomic<int64_t>& count) {
  // Readers only copy a pointer or run one lookup inside a slot, so this wait is short.
  while (count.load() != 0) std::this_thread::yield();
}

}  // namespace

Status Inference::Open(const std::string& path, const OpenOptions& options,
                       std::unique_ptr<Inference>* out) {
  std::shared_ptr<Model> model;
  SR_RETURN_IF_ERROR(OpenSource(path, options, &model));
  model->number = 1;
  std::unique_ptr<Inference> inf(new Inference(options));
  for (const Table& t : model->tables) inf->table_names_.push_back(t.name);
  inf->slots_[0] = std::move(model);
  *out = std::move(inf);
  return Status::Ok();
}

Status Inference::Reload(const std::string& path) {
  if (reloading_.exchange(true))
    return Status::InvalidUsage("another reload of this handle is running; reloads do not queue");
  struct Release {
    std::atomic<bool>& flag;
    ~Release() { flag.store(false); }
  } release{reloading_};
  std::shared_ptr<Model> next;
  SR_RETURN_IF_ERROR(OpenSource(path, options_, &next));
  // Only reloads change the slots, and they are serialised by the flag.
  const int now = current_.load();
  const int idle = 1 - now;
  const Model& served = *slots_[now];
  Status s = served.SameShape(*next);
  if (!s.ok()) return Status::InvalidArgument("cannot reload from ", path, ": ", s.message());
  next->number = served.number + 1;
  // A reader that saw the idle slot as current before the last swap may still be backing out.
  WaitForNoReaders(readers_[idle].count);
  slots_[idle] = std::move(next);
  current_.store(idle);
  // New readers now enter the idle slot; the old slot's readers finish their call, and then the
  // old version is released (freed here unless a pinned snapshot still holds it).
  WaitForNoReaders(readers_[now].count);
  slots_[now].reset();
  return Status::Ok();
}

}  // namespace shardrec::serving
