// The failure domain shared by a root communicator and its splits.
#include "impl/comm/failure_domain.h"

#include <algorithm>
#include <atomic>

namespace shardrec::comm {

namespace {
bool Contains(const std::vector<uint64_t>& v, uint64_t id) {
  return std::find(v.begin(), v.end(), id) != v.end();
}
}  // namespace

void FailureDomain::Join(Abortable* c, const std::vector<uint64_t>& lineage) {
  std::lock_guard<std::mutex> lock(mu_);
  members_.push_back({c, lineage});
  // A split that finished creation while an ancestor was being aborted is aborted too.
  for (const auto& [id, why] : aborted_) {
    if (Contains(lineage, id)) {
      c->AbortLocal(why);
      return;
    }
  }
}

void FailureDomain::Leave(Abortable* c) {
  std::lock_guard<std::mutex> lock(mu_);
  std::erase_if(members_, [c](const Member& m) { return m.comm == c; });
}

void FailureDomain::Abort(uint64_t id, const Status& why) {
  std::lock_guard<std::mutex> lock(mu_);
  aborted_.emplace_back(id, why);
  for (const Member& m : members_) {
    if (Contains(m.lineage, id)) m.comm->AbortLocal(why);
  }
}

void FailureDomain::InterruptAll(Abortable* failed, const Status& why) {
  const Status others(why.code(),
                      StrCat("a communicator split from the same root failed: ", why.message()));
  std::lock_guard<std::mutex> lock(mu_);
  for (const Member& m : members_) m.comm->AbortLocal(m.comm == failed ? why : others);
}

uint64_t NewCommunicatorId() {
  static std::atomic<uint64_t> next_id{1};
  return next_id.fetch_add(1);
}

}  // namespace shardrec::comm
