// The pieces save and load share: the rank agreement on a local verdict, and (record_copy.h) the
// copy of the part of a stored record that overlaps a destination block (chunked, verified,
// dtype-converted).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "impl/checkpoint/format.h"
#include "impl/checkpoint/record_copy.h"
#include "impl/comm/communicator.h"
#include "impl/core/status.h"

namespace shardrec::checkpoint {

// Collective: returns `local` on this rank; when this rank is fine but another failed, an error
// with that rank's code naming it and `what`.
Status Agree(comm::Communicator& comm, const Status& local, const char* what);

}  // namespace shardrec::checkpoint
