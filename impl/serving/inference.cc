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
  // Only reloads and deltas change the slots, and they are serialised by the flag.
  Status s = slots_[current_.load()]->SameShape(*next);
  if (!s.ok()) return Status::InvalidArgument("cannot reload from ", path, ": ", s.message());
  Publish(std::move(next));
  return Status::Ok();
}

Status Inference::ApplyDelta(const std::string& table, const Delta& d, uint64_t* number) {
  if (reloading_.exchange(true))
    return Status::InvalidUsage(
        "a reload or another delta of this handle is running; they do not queue");
  struct Release {
    std::atomic<bool>& flag;
    ~Release() { flag.store(false); }
  } release{reloading_};
  // The served version cannot change under us: only reloads and deltas publish, and the flag
  // serialises them.
  const Model& served = *slots_[current_.load()];
  size_t ti = 0;
  while (ti < served.tables.size() && served.tables[ti].name != table) ++ti;
  if (ti == served.tables.size()) return Status::NotFound("no table named ", table);
  std::shared_ptr<Model> next;
  SR_RETURN_IF_ERROR(serving::ApplyDelta(served, ti, d, &next));
  *number = served.number + 1;
  Publish(std::move(next));
  return Status::Ok();
}

void Inference::Publish(std::shared_ptr<Model> next) {
  const int now = current_.load();
  const int idle = 1 - now;
  next->number = slots_[now]->number + 1;
  // A reader that saw the idle slot as current before the last swap may still be backing out.
  WaitForNoReaders(readers_[idle].count);
  slots_[idle] = std::move(next);
  current_.store(idle);
  // New readers now enter the idle slot; the old slot's readers finish their call, and then the
  // old version is released (freed here unless a pinned snapshot still holds it).
  WaitForNoReaders(readers_[now].count);
  slots_[now].reset();
}

}  // namespace shardrec::serving
