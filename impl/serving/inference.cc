// Open and reload of the served collection: the new version is built completely off to the side
// and published with one atomic store, so readers never see a half-built one.
#include "impl/serving/inference.h"

#include <utility>

#include "impl/core/check.h"

namespace shardrec::serving {

Status Inference::Open(const std::string& path, const OpenOptions& options,
                       std::unique_ptr<Inference>* out) {
  std::shared_ptr<Model> model;
  SR_RETURN_IF_ERROR(OpenSource(path, options, &model));
  model->number = 1;
  std::unique_ptr<Inference> inf(new Inference(options));
  for (const Table& t : model->tables) inf->table_names_.push_back(t.name);
  inf->current_.store(std::move(model), std::memory_order_release);
  *out = std::move(inf);
  return Status::Ok();
}

Status Inference::Reload(const std::string& path) {
  if (reloading_.exchange(true, std::memory_order_acquire))
    return Status::InvalidUsage("another reload of this handle is running; reloads do not queue");
  struct Release {
    std::atomic<bool>& flag;
    ~Release() { flag.store(false, std::memory_order_release); }
  } release{reloading_};
  std::shared_ptr<Model> next;
  SR_RETURN_IF_ERROR(OpenSource(path, options_, &next));
  // Only reloads store, and they are serialised by the flag, so this load is the live version.
  const std::shared_ptr<const Model> now = Current();
  Status s = now->SameShape(*next);
  if (!s.ok()) return Status::InvalidArgument("cannot reload from ", path, ": ", s.message());
  next->number = now->number + 1;
  current_.store(std::move(next), std::memory_order_release);
  return Status::Ok();
}

}  // namespace shardrec::serving
