// SpawnRanks(world, fn): runs fn(rank) on `world` threads, one per rank, joins them all, and
// rethrows the first exception any rank threw. gtest assertions inside fn are recorded normally
// (ASSERT_* only leaves that rank's fn).
#pragma once

#include <functional>

namespace shardrec::testing {

void SpawnRanks(int world, const std::function<void(int rank)>& fn);

}  // namespace shardrec::testing
