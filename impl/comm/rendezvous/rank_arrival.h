// Waiting for every rank's key in a rendezvous store, and rank 0's address as the others reach
// it. A timeout names every rank that did not arrive, not only the first one waited for.
#pragma once

#include <chrono>
#include <string>

#include "impl/comm/rendezvous/store.h"
#include "impl/core/status.h"

namespace shardrec::comm {

// Waits until every rank of [0, world) but `self` has set `prefix + rank`, by `deadline`.
// kTimeout naming each rank whose key had not appeared ("ranks 2, 3 of 4 did not arrive"; the
// first 32, then how many more), with
// `what` in front; other store errors as they come.
Status WaitForRanks(Store& store, const std::string& prefix, int world, int self,
                    std::chrono::steady_clock::time_point deadline, const std::string& what);

// Whether `host` is a numeric loopback address (127.0.0.0/8 or ::1).
bool IsLoopbackHost(const std::string& host);

// Environment launch: every rank but 0 publishes the numeric address it reached rank 0's store
// at. Rank 0, when its own connection to its store ran over loopback (its MASTER_ADDR was
// 127.0.0.1 or localhost) and the world is larger than one, waits for those (WaitForRanks) and
// takes the first that is not loopback as the address its peers can reach it at; *host stays
// as it is when every rank reached it over loopback (one host). Otherwise, and for a world past
// the open-file limit (whose mesh fails at once, naming it), it returns at once.
Status PublishReach(Store& store, int rank, const std::string& reached_host);
Status RankZeroHost(Store& store, int world, std::chrono::steady_clock::time_point deadline,
                    std::string* host);

}  // namespace shardrec::comm
