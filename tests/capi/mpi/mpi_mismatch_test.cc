// Ranks whose calls do not match (different collectives, or one with different counts), one rank
// per process under mpirun, on an MPI communicator and on a Gloo one (created from a unique id
// that rank 0 broadcasts over the MPI world): the cases are tests/capi/comm/mismatch_cases.h,
// which the Gloo threads of comm_capi_test.cc run too. The C API's raw collectives agree on their
// signatures first (comm/agree.h): every rank fails with SHARDREC_EINVAL before any data moves
// and the communicator stays usable. Before, MPI accepted a shorter message into a longer receive
// (a corrupted SHARDREC_OK), a barrier against an all-reduce waited out the timeout, and a
// broadcast's truncation killed the job through MPI_COMM_WORLD's fatal handler. The MPI backend's
// own size and tag checks (a second line, for the library's internal collectives) sit behind
// this agreement.
#include <gtest/gtest.h>

#include <string>
#include <tuple>

#include "shardrec/comm.h"
#include "tests/capi/comm/mismatch_cases.h"
#include "tests/capi/mpi/mpi_test_world.h"

namespace shardrec::testing {
namespace {

enum class Backend { kMpi, kGloo };
using mismatch::NamedCase;

class MpiMismatchTest : public MpiTest,
                        public ::testing::WithParamInterface<std::tuple<Backend, NamedCase>> {
 protected:
  // A communicator of its own, so that a failure here cannot reach the other tests.
  void SetUp() override {
    MpiTest::SetUp();
    if (MpiSize() == 1) GTEST_SKIP() << "needs a peer";
    shardrec_comm_options_t o = SHARDREC_COMM_OPTIONS_INIT;
    o.timeout_ms = 5000;  // an undetected mismatch shows as ETIMEOUT, not as a hang
    if (std::get<0>(GetParam()) == Backend::kMpi) {
      ASSERT_EQ(shardrec_comm_create_mpi(&comm_, 0, &o), SHARDREC_OK) << shardrec_last_error();
      return;
    }
    shardrec_unique_id_t id{};
    if (MpiRank() == 0) {
      ASSERT_EQ(shardrec_comm_unique_id_create(&id), SHARDREC_OK) << shardrec_last_error();
    }
    ASSERT_EQ(shardrec_comm_broadcast(MpiWorld(), id.internal, sizeof(id.internal),
                                      SHARDREC_DTYPE_UINT8, 0, nullptr),
              SHARDREC_OK)
        << shardrec_last_error();
    ASSERT_EQ(shardrec_comm_create(&comm_, &id, MpiSize(), MpiRank(), &o), SHARDREC_OK)
        << shardrec_last_error();
  }
  void TearDown() override {
    // The world's barrier lets every message of the mismatched call arrive, so that the
    // communicator has nothing in flight and is freed (MPI_Finalize then runs at exit).
    if (comm_ != nullptr) {
      EXPECT_EQ(shardrec_comm_barrier(MpiWorld()), SHARDREC_OK);
    }
    shardrec_comm_destroy(comm_);
  }

  shardrec_comm_t* comm_ = nullptr;
};

TEST_P(MpiMismatchTest, EveryRankFailsAndTheCommunicatorStaysUsable) {
  std::get<1>(GetParam()).run(comm_, MpiRank(), MpiSize());
}

INSTANTIATE_TEST_SUITE_P(Backends, MpiMismatchTest,
                         ::testing::Combine(::testing::Values(Backend::kMpi, Backend::kGloo),
                                            ::testing::ValuesIn(mismatch::AllCases())),
                         [](const ::testing::TestParamInfo<std::tuple<Backend, NamedCase>>& info) {
                           return std::string(std::get<0>(info.param) == Backend::kMpi ? "Mpi_"
                                                                                       : "Gloo_") +
                                  std::get<1>(info.param).name;
                         });

}  // namespace
}  // namespace shardrec::testing
