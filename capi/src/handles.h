// Bodies of the opaque C handles: each holds its C++ object (LevelDB's `rep` pattern). Handles
// share ownership where one outlives its creator's handle (a collection keeps its
// communicator alive even if the caller destroys the communicator handle first).
#pragma once

#include <cstdint>
#include <memory>

#include "impl/comm/communicator.h"

struct shardrec_comm {
  std::shared_ptr<shardrec::comm::Communicator> impl;
  // Position on this host (shardrec_comm_local_rank/_size); -1 when unknown (a device
  // communicator not created from a launcher's environment).
  int32_t local_rank = -1;
  int32_t local_size = -1;
};
