// MeasureCollectiveRound's groups span several of the scheduler's time slices (host_bandwidth.h).
#include "impl/comm/host_bandwidth.h"

#include <gtest/gtest.h>

#include <chrono>

#include "tests/impl/comm/comm_test_util.h"

namespace shardrec::comm {
namespace {

TEST(CommHostBandwidth, RoundGroupsSpanTheMinimumTime) {
  // 0.1 ms rounds (one host, idle): 250 of them make a group of 25 ms.
  EXPECT_EQ(RoundsPerGroup(0.1), 250);
  // Rounds of 4 ms (4 hosts x 2 ranks on 2 cores): the minimum of 8 already spans it.
  EXPECT_EQ(RoundsPerGroup(4.0), kRoundsTimed / kRoundGroups);
  // A pilot that read 0 (a clock that did not advance) or a tiny round: the cap.
  EXPECT_EQ(RoundsPerGroup(0.0), kMaxRoundsPerGroup);
  EXPECT_EQ(RoundsPerGroup(1e-6), kMaxRoundsPerGroup);
}

TEST(CommHostBandwidth, RoundIsTimedOverGroupsOfTheMinimumTime) {
  // Two ranks as threads over loopback: rounds of well under a millisecond, so the 4 timed
  // groups take at least 4 x kMinGroupMs (with 8 rounds a group, as before, a few ms in all);
  // every rank gets the same figure.
  auto comms = testutil::MakeGroup(2);
  ASSERT_EQ(comms.size(), 2u);
  double ms[2] = {-1, -1}, took[2] = {0, 0};
  testutil::OnRanks(comms, [&](int r, Communicator& c) {
    const auto t0 = std::chrono::steady_clock::now();
    EXPECT_TRUE(MeasureCollectiveRound(c, &ms[r]).ok());
    took[r] =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  });
  EXPECT_GT(ms[0], 0);
  EXPECT_EQ(ms[0], ms[1]);
  if (ms[0] * kMaxRoundsPerGroup >= kMinGroupMs) {
    EXPECT_GE(took[0], kRoundGroups * kMinGroupMs);
  }
}

}  // namespace
}  // namespace shardrec::comm
