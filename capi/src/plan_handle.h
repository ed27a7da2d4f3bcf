// Body of the opaque shardrec_plan handle, shared by plan.cc and the C API units that consume a
// plan (embedding, replica, checkpoint). A plan handle is immutable once created.
#pragma once

#include <memory>
#include <string>

#include "impl/sharding/types.h"

struct shardrec_plan {
  // Never null in a handle given to a caller; shared so a collection can keep the plan alive
  // after the caller destroys the handle.
  std::shared_ptr<const shardrec::sharding::Plan> impl;
  // Planner statistics text, formatted when the handle was created.
  std::string stats;
  // impl->Hash(), cached.
  uint64_t hash = 0;
};
