// What every communicator creation entry shares (defined in comm.cc): the options struct read
// into the internal options, and the new communicator wrapped into its C handle.
#pragma once

#include <cstdint>
#include <memory>

#include "capi/src/handles.h"
#include "impl/comm/factory.h"
#include "impl/core/status.h"
#include "shardrec/comm.h"

namespace shardrec::capi {

// `in` (NULL: defaults) checked and converted; kInvalidArgument naming the field otherwise.
Status ToOptions(const shardrec_comm_options_t* in, comm::CommOptions* out);

// Wraps a new communicator into *out (caller owns). An unknown local position (-1) is derived,
// collectively on host communicators, so that every creation path answers
// shardrec_comm_local_rank.
Status Wrap(std::unique_ptr<comm::Communicator> impl, shardrec_comm_t** out,
            int32_t local_rank = -1, int32_t local_size = -1);

}  // namespace shardrec::capi
