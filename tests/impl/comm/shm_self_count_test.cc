// The all-to-all's self-count check (call_checks.h), shared by every checked communicator: Gloo
// (the communicator the shared-memory transport wraps, called directly) and the shared-memory
// transport refuse counts that disagree on the block a rank sends itself, with the same error,
// on the calling rank alone and before anything moves; the buffers are untouched and the group
// stays usable. (MPI: tests/impl/comm/mpi_mismatch_test.cc, under mpirun.)
#include <string>
#include <vector>

#include "impl/comm/shm/shm_communicator.h"
#include "tests/impl/comm/comm_test_util.h"

namespace shardrec::comm {
namespace {

using testutil::Comms;
using testutil::MakeGroup;
using testutil::OnRanks;

// Rank 1 sends itself 3 elements but expects 2; then every rank runs a matched all-to-all.
void RefusedThenMatched(Comms& comms, Communicator& (*pick)(Communicator&)) {
  OnRanks(comms, [&](int r, Communicator& outer) {
    Communicator& c = pick(outer);
    std::vector<int32_t> send(8), recv(8, -1);
    if (r == 1) {
      const std::vector<size_t> sc = {4, 3}, rc = {4, 2};
      const Status s = c.AllToAllV(send.data(), sc, recv.data(), rc, DType::kInt32);
      EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.ToString();
      EXPECT_NE(s.message().find("send_counts[1] = 3 differs from recv_counts[1] = 2"),
                std::string::npos)
          << s.ToString();
      for (int32_t v : recv) ASSERT_EQ(v, -1);
    }
    const std::vector<size_t> counts = {4, 4};
    for (size_t i = 0; i < 8; ++i) send[i] = r * 100 + static_cast<int32_t>(i);
    const Status s = c.AllToAllV(send.data(), counts, recv.data(), counts, DType::kInt32);
    ASSERT_TRUE(s.ok()) << s.ToString();
    for (int p = 0; p < 2; ++p)
      for (int i = 0; i < 4; ++i) ASSERT_EQ(recv[p * 4 + i], p * 100 + r * 4 + i);
  });
}

Communicator& Outer(Communicator& c) { return c; }
Communicator& Inner(Communicator& c) { return dynamic_cast<shm::ShmCommunicator&>(c).inner(); }

TEST(CommSelfCount, SharedMemoryRefusesDisagreeingSelfCounts) {
  Comms comms = MakeGroup(2);
  ASSERT_STREQ(dynamic_cast<shm::ShmCommunicator&>(*comms[0]).transport(), "shm");
  RefusedThenMatched(comms, &Outer);
}

TEST(CommSelfCount, GlooRefusesDisagreeingSelfCounts) {
  Comms comms = MakeGroup(2);
  ASSERT_STREQ(Inner(*comms[0]).backend(), "gloo");
  RefusedThenMatched(comms, &Inner);
}

TEST(CommSelfCount, ASingleRankRefusesDisagreeingSelfCounts) {
  Comms comms = MakeGroup(1);
  std::vector<int32_t> send(4, 7), recv(4, -1);
  const std::vector<size_t> sc = {3}, rc = {4};
  const Status s = comms[0]->AllToAllV(send.data(), sc, recv.data(), rc, DType::kInt32);
  EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.ToString();
  for (int32_t v : recv) ASSERT_EQ(v, -1);
}

}  // namespace
}  // namespace shardrec::comm
