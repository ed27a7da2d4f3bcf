// An all-gather of byte buffers whose lengths differ per rank (serialised rows, file entries):
// the lengths first, then the bytes, both through the communicator's all-gather.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "impl/comm/communicator.h"

namespace shardrec::comm {

// Collective: every rank gets every rank's `len` bytes at `mine`, concatenated in rank order in
// *all, and each rank's length in *sizes. Errors are the communicator's (every rank takes part).
Status AllGatherBytes(Communicator& comm, const void* mine, size_t len, std::vector<uint8_t>* all,
                      std::vector<size_t>* sizes);

}  // namespace shardrec::comm
