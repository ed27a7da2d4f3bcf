// Argument checks every host communicator backend makes before a collective (Gloo, MPI): one
// wording of each error, whichever backend refuses the call.
#pragma once

#include <cstddef>
#include <span>

#include "impl/comm/communicator.h"
#include "impl/core/dtype.h"
#include "impl/core/status.h"

namespace shardrec::comm {

// kInvalidArgument unless `dtype` is one of the element types.
Status CheckCallDType(DType dtype);

// kInvalidArgument unless `op` is sum, avg, max or min.
Status CheckCallOp(ReduceOp op);

// kInvalidArgument unless `counts` has one entry per rank; *total receives their sum.
Status CheckCallCounts(std::span<const size_t> counts, int size, const char* name, size_t* total);

// kInvalidArgument when `p` is null but `count` elements are to be read or written there.
Status CheckCallBuffer(const void* p, size_t count, const char* name);

}  // namespace shardrec::comm
