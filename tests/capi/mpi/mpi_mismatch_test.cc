// Ranks whose calls do not match (different collectives, or one with different counts) on an
// MPI communicator. The C API's raw collectives agree on their signatures first
// (comm/agree.h): every rank fails with SHARDREC_EINVAL before any data moves and the
// communicator stays usable. Before, MPI accepted a shorter message into a longer receive (a
// corrupted SHARDREC_OK), a barrier against an all-reduce waited out the timeout, and a
// broadcast's truncation killed the job through MPI_COMM_WORLD's fatal handler. The MPI backend's
// own size and tag checks (a second line, for the library's internal collectives) sit behind
// this agreement.
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
  // A communicator of its own, so that a failure here cannot reach the other tests.
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
  // The call was refused (SHARDREC_EINVAL) naming what this rank called, and the communicator
  // still works.
  void ExpectRefused(const Outcome& o, std::initializer_list<const char*> words) {
    EXPECT_EQ(o.rc, SHARDREC_EINVAL) << o.error;
    EXPECT_NE(o.error.find("different sizes"), std::string::npos) << o.error;
    for (const char* w : words) EXPECT_NE(o.error.find(w), std::string::npos) << o.error;
    int64_t r = MpiRank(), sum = 0;
    EXPECT_EQ(shardrec_comm_allreduce(comm_, &r, &sum, 1, SHARDREC_DTYPE_INT64, SHARDREC_REDUCE_SUM,
                                      nullptr),
              SHARDREC_OK)
        << shardrec_last_error();
    EXPECT_EQ(sum, static_cast<int64_t>(MpiSize()) * (MpiSize() - 1) / 2);
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
  ExpectRefused(o, {"allreduce of", first ? "8 elements" : "4 elements"});
  for (float v : y) EXPECT_EQ(v, -1.0f);  // nothing moved
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
  ExpectRefused(o, {first ? "allreduce of" : "allgather of"});
}

TEST_F(MpiMismatchTest, ABarrierAgainstAnAllReduceFailsOnEveryRank) {
  // An empty barrier message against a 4-byte all-reduce: under MPI_Ibarrier both sides waited
  // for their timeouts.
  const bool first = MpiRank() == 0;
  float x = 1.0f, y = 0.0f;
  const Outcome o = Result(first ? shardrec_comm_barrier(comm_)
                                 : shardrec_comm_allreduce(comm_, &x, &y, 1, SHARDREC_DTYPE_FLOAT32,
                                                           SHARDREC_REDUCE_SUM, nullptr));
  ExpectRefused(o, {first ? "barrier" : "allreduce of"});
}

TEST_F(MpiMismatchTest, BroadcastCountsThatDifferAreReturnedNotFatal) {
  // The root passes 8 elements, the others 4. MPI_Ibcast's truncation went to MPI_COMM_WORLD's
  // fatal error handler and mpirun ended the job. Now every rank, the root too, refuses it.
  const bool root = MpiRank() == 0;
  std::vector<float> y(8, static_cast<float>(MpiRank()));
  const Outcome o = Result(
      shardrec_comm_broadcast(comm_, y.data(), root ? 8 : 4, SHARDREC_DTYPE_FLOAT32, 0, nullptr));
  ExpectRefused(o, {"broadcast of"});
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
