// Waking and sleeping on a rank's doorbell (layout.h) across processes: a waiter that found
// nothing to do sleeps in a futex on its doorbell word until a peer rings it (or a time limit);
// a ringer issues the wake system call only when a waiter may be asleep. The sleepers count and
// the doorbell are both sequentially consistent, so a ring is never lost: either the ringer sees
// the sleeper, or the sleeper's futex sees the doorbell already changed and returns at once.
#pragma once

#include <chrono>
#include <cstdint>

#include "impl/comm/shm/layout.h"

namespace shardrec::comm::shm {

// Bumps `line`'s doorbell and wakes its sleepers, if any.
void Ring(RankLine* line);

// Sleeps while `line`'s doorbell still reads `seen`, at most `limit` (or until a spurious wake).
void Sleep(RankLine* line, uint32_t seen, std::chrono::nanoseconds limit);

}  // namespace shardrec::comm::shm
