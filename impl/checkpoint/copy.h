// The pieces save and load share: the rank agreement on a local verdict, and (record_copy.h) the
// copy of the part of a stored record that overlaps a destination block (chunked, verified,
// dtype-converted).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "impl/checkpoint/format.h"
#include "impl/checkpoint/fs.h"
#include "impl/checkpoint/record_copy.h"
#include "impl/comm/communicator.h"
#include "impl/core/status.h"

namespace shardrec::checkpoint {

// Collective: returns `local` on this rank; when this rank is fine but another failed, an error
// with that rank's code naming it and `what`.
Status Agree(comm::Communicator& comm, const Status& local, const char* what);

// `file`, whose every ReadAt first asks `comm` (which must outlive it) whether it was aborted or
// failed (comm::UsableNow) and returns that error instead of reading: loads and imports read in
// chunks of about 1 MiB, and a load of gigabytes per rank takes seconds, while an abort must end
// the call promptly.
std::unique_ptr<ReadableFile> StopOnAbort(std::unique_ptr<ReadableFile> file,
                                          const comm::Communicator& comm);

}  // namespace shardrec::checkpoint
