// Bodies of the opaque C handles: each holds its C++ object (LevelDB's `rep` pattern). Handles
// share ownership where one outlives its creator's handle (a collection keeps its
// communicator alive even if the caller destroys the communicator handle first).
#pragma once

#include <memory>

#include "impl/comm/communicator.h"

struct shardrec_comm {
  std::shared_ptr<shardrec::comm::Communicator> impl;
};
