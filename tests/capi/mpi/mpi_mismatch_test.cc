// Ranks whose calls do not match (different collectives, or one with different counts) on an
// MPI communicator: every rank that receives a message of the mismatched call fails with
// SHARDREC_EREMOTE naming the sizes or the collectives, at once; none returns wrong data as a
// success, and none is killed by MPI's fatal error handler.
#include <gtest/gtest.h>

#include <initializer_list>
#include <string>
#include <vector>

#include "shardrec/comm.h"
#include "tests/capi/mpi/mpi_test_world.h"

namespace shardrec::testing {
namespace {

class MpiMismatchTest : public MpiTest {
 protected:
  // A communicator of its own: the mismatch poisons it (and its failure domain).
  void SetUp() override {
    MpiTest::SetUp();
    if (MpiSize() == 1) GTEST_SKIP() << "needs a peer";
    shardrec_comm_options_t o = SHARDREC_COMM_OPTIONS_INIT;
    o.timeout_ms = 5000;  // an undetected mismatch shows as ETIMEOUT, not as a hang
    ASSERT_EQ(shardrec_comm_create_mpi(&comm_, 0, &o), SHARDREC_OK) << shardrec_last_error();
  }
  void TearDown() override {
    // The world's barrier lets every message of the mismatched call arrive, so that the
    // communicator has nothing in flight and is freed (MPI_Finalize then runs at exit).
    if (comm_ != nullptr) {
      EXPECT_EQ(shardrec_comm_barrier(MpiWorld()), SHARDREC_OK);
    }
    shardrec_comm_destroy(comm_);
  }

  // A call's status and message, taken at once (any later call, MpiRank() too, replaces it).
  struct Outcome {
    shardrec_status_t rc;
    std::string error;
  };
  static Outcome Result(shardrec_status_t rc) { return {rc, shardrec_last_error()}; }
  // The call failed with SHARDREC_EREMOTE and a message containing every one of `words`.
  static void ExpectRemote(const Outcome& o, std::initializer_list<const char*> words) {
    EXPECT_EQ(o.rc, SHARDREC_EREMOTE) << o.error;
    for (const char* w : words) EXPECT_NE(o.error.find(w), std::string::npos) << o.error;
  }

  shardrec_comm_t* comm_ = nullptr;
};

TEST_F(MpiMismatchTest, AllReduceCountsThatDifferFailOnEveryRank) {
  // Rank 0 passes 8 elements, the others 4. MPI accepted the shorter message into rank 0's
  // longer receive, and rank 0 returned SHARDREC_OK with a sum of 4 real and 4 stale values.
  const bool first = MpiRank() == 0;
  std::vector<float> x(8, 1.0f), y(8, -1.0f);
  const Outcome o =
      Result(shardrec_comm_allreduce(comm_, x.data(), y.data(), first ? 8 : 4,
                                     SHARDREC_DTYPE_FLOAT32, SHARDREC_REDUCE_SUM, nullptr));
  ExpectRemote(
      o, {"allreduce", first ? "expected 32 bytes" : "expected 16 bytes", "different counts"});
  EXPECT_EQ(shardrec_comm_barrier(comm_), SHARDREC_EUSAGE);  // poisoned, as after any failure
}

TEST_F(MpiMismatchTest, DifferentCollectivesFailOnEveryRankNamingBoth) {
  // Rank 0 all-reduces 8 floats while the others all-gather 4: 32 bytes against 16, which rank 0
  // summed as an all-reduce and returned SHARDREC_OK.
  const bool first = MpiRank() == 0;
  std::vector<float> x(8, 1.0f), y(8 * static_cast<size_t>(MpiSize()), -1.0f);
  const Outcome o =
      Result(first ? shardrec_comm_allreduce(comm_, x.data(), y.data(), 8, SHARDREC_DTYPE_FLOAT32,
                                             SHARDREC_REDUCE_SUM, nullptr)
                   : shardrec_comm_allgather(comm_, x.data(), y.data(), 4, SHARDREC_DTYPE_FLOAT32,
                                             nullptr));
  ExpectRemote(o, {"an allreduce", "an allgatherv", "different collectives"});
}

TEST_F(MpiMismatchTest, ABarrierAgainstAnAllReduceFailsOnEveryRank) {
  // An empty barrier message against a 4-byte all-reduce: under MPI_Ibarrier both sides waited
  // for their timeouts.
  const bool first = MpiRank() == 0;
  float x = 1.0f, y = 0.0f;
  const Outcome o = Result(first ? shardrec_comm_barrier(comm_)
                                 : shardrec_comm_allreduce(comm_, &x, &y, 1, SHARDREC_DTYPE_FLOAT32,
                                                           SHARDREC_REDUCE_SUM, nullptr));
  ExpectRemote(o, {"a barrier", "an allreduce"});
}

TEST_F(MpiMismatchTest, BroadcastCountsThatDifferAreReturnedNotFatal) {
  // The root passes 8 elements, the others 4. MPI_Ibcast's truncation went to MPI_COMM_WORLD's
  // fatal error handler and mpirun ended the job. Now every receiving rank gets SHARDREC_EREMOTE
  // (from its parent in the broadcast tree, or the notice that the parent failed); the root,
  // which receives nothing, may return SHARDREC_OK.
  const bool root = MpiRank() == 0;
  std::vector<float> y(8, static_cast<float>(MpiRank()));
  const Outcome o = Result(
      shardrec_comm_broadcast(comm_, y.data(), root ? 8 : 4, SHARDREC_DTYPE_FLOAT32, 0, nullptr));
  if (!root) ExpectRemote(o, {"broadcast"});
}

TEST_F(MpiMismatchTest, MatchingCallsOfEmptyBuffersStillWork) {
  // Every block is at least one message, the empty ones included: calls with nothing to carry
  // still pair up, and the communicator stays usable.
  ASSERT_EQ(shardrec_comm_allreduce(comm_, nullptr, nullptr, 0, SHARDREC_DTYPE_FLOAT32,
                                    SHARDREC_REDUCE_SUM, nullptr),
            SHARDREC_OK)
      << shardrec_last_error();
  ASSERT_EQ(shardrec_comm_broadcast(comm_, nullptr, 0, SHARDREC_DTYPE_FLOAT32, 0, nullptr),
            SHARDREC_OK)
      << shardrec_last_error();
  int64_t r = MpiRank(), sum = 0;
  ASSERT_EQ(shardrec_comm_allreduce(comm_, &r, &sum, 1, SHARDREC_DTYPE_INT64, SHARDREC_REDUCE_SUM,
                                    nullptr),
            SHARDREC_OK)
      << shardrec_last_error();
  EXPECT_EQ(sum, static_cast<int64_t>(MpiSize()) * (MpiSize() - 1) / 2);
}

}  // namespace
}  // namespace shardrec::testing
