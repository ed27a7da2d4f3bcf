// Pins this process's threads to one NUMA node's CPUs, chosen from a rank's place on its host.
#pragma once

#include <cstdint>

#include "impl/core/status.h"

namespace shardrec {

// Binds every thread of this process (and the threads it starts later, which inherit the mask)
// to the CPUs of NUMA node local_rank * nodes / local_size, counting only nodes that have CPUs,
// in hwloc's logical order. Replaces the affinity mask; memory policy is left as it is.
// *node_out (nullable) receives the node's index in that order. kUnsupported without hwloc at
// build time; kInvalidArgument for local_rank outside [0, local_size).
Status BindToLocalNumaNode(int32_t local_rank, int32_t local_size, int32_t* node_out);

}  // namespace shardrec
