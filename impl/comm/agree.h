// The refusal agreement a collective creation makes before its first exchange.
#pragma once

#include <string_view>

#include "impl/comm/communicator.h"
#include "impl/core/status.h"

namespace shardrec::comm {

// One all-reduce of this rank's verdict on its own arguments (`local`). A rank that refused them
// still takes part, so every rank fails at once naming the lowest refusing rank, where its peers
// would otherwise wait out their timeout in an exchange it never joins. Returns `local` when it
// is an error, InvalidArgument naming the refusing rank when a peer refused, the
// communicator's error when the all-reduce failed, else Ok. `what` names the object in that
// message ("DDP bucketer"). Over a device communicator (whose collectives take device buffers)
// it exchanges nothing and returns `local`: a refusing rank there fails alone.
Status AgreeToCreate(Communicator& comm, const Status& local, std::string_view what);

}  // namespace shardrec::comm
