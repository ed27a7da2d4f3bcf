// The one gradient average both data-parallel variants use: a rank-ordered reduce-scatter
// (average) followed by an all-gather. It moves the bytes of a ring all-reduce, and because each
// element is summed in rank order the replicated (DDP) and the sharded (FSDP) variants produce
// the same bits.
#pragma once

#include <cstddef>

#include "impl/comm/communicator.h"
#include "impl/core/status.h"

namespace shardrec::ddp {

// In place over buf[n] of `dtype` (fp32 or bf16). `scratch` must hold ceil(n / size) elements.
Status AverageInPlace(comm::Communicator& comm, void* buf, size_t n, DType dtype, void* scratch);

}  // namespace shardrec::ddp
