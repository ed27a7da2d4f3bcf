// One verdict for every rank on a forward's row resolution where the resolution can fail on one
// rank alone (docs/disk-tier.md, "A forward that fails on one rank"): a tiered table's batch that
// its cache cannot hold, a store that fails a read. Without it the failing rank returns while its
// peers wait in the forward's return exchange for the communicator's timeout.
#pragma once

#include "impl/comm/communicator.h"
#include "impl/core/status.h"

namespace shardrec::embedding::tiered {

// Collective over `comm` (every rank calls it for the same forward, a failing one too): one
// all-reduce of whether each rank's `local` failed, and where one did, a broadcast of the lowest
// failing rank's code and message. OK on every rank when no rank failed; else every rank returns
// an error of that code naming the rank ("rank R: " and its message; a failing rank gives its own
// error so). A failed exchange returns the communicator's error.
Status AgreeResolution(comm::Communicator& comm, const Status& local);

}  // namespace shardrec::embedding::tiered
