// The network between hosts as the planner sees it: bytes per second each rank moves to the
// ranks of other hosts while every rank does so at once (its share of its host's link, under the
// same contention as an embedding all-to-all). Hosts are told apart as HostIdentity() does.
#pragma once

#include <chrono>

#include "impl/comm/communicator.h"
#include "impl/core/status.h"

namespace shardrec::comm {

// Collective over a host communicator. Every rank sends the same number of bytes to each rank of
// another host (none to its own host's) in timed all-to-alls, growing the size from 64 KiB per
// peer until a round takes a quarter of `budget` or the size reaches 16 MiB; each round's time is
// the slowest rank's, and its rate the lowest rank's bytes sent across hosts over that time.
// *bytes_per_s is the best of three rounds at the final size, the same on every rank; 0 when
// every rank is on one host (nothing crosses). The call takes about `budget` (more when 16 MiB
// per peer takes longer). Errors: those of the collectives (every rank fails alike).
Status MeasureInterHostBandwidth(Communicator& c, std::chrono::milliseconds budget,
                                 double* bytes_per_s);

// Collective over any communicator of more than one rank. The time of one collective round with
// every rank of the world in it at once: kRoundsTimed all-to-alls of one 8-byte element per
// peer, back to back after a warm-up, in 4 groups; each rank's median of the groups' means, and
// *ms the slowest rank's (the same on every rank). What a step's round costs beyond its bytes when
// the ranks share cores (processes beyond the CPUs wait to be scheduled at each round) or wait on a
// network's round trip, which a round between two otherwise idle threads does not show. 0 on a
// world of one. Errors: those of the collectives (every rank fails alike).
inline constexpr int kRoundsTimed = 32;
Status MeasureCollectiveRound(Communicator& c, double* ms);

}  // namespace shardrec::comm
