// Ranks whose raw collectives do not match (different counts, roots or collectives), written once
// and run over every host backend: Gloo ranks as threads of one process (comm_capi_test.cc), MPI
// and Gloo ranks as processes under mpirun (tests/capi/mpi/mpi_mismatch_test.cc). The C API's
// raw collectives agree on their signatures first (every rank fails with SHARDREC_EINVAL before
// any data moves), and the communicator stays usable. Each case is called by every rank of
// `comm` at once; rank 0 is the odd one out.
#pragma once

#include <gtest/gtest.h>

#include <initializer_list>
#include <string>
#include <vector>

#include "shardrec/comm.h"

namespace shardrec::testing::mismatch {

// A call's status and message, taken at once (any later call replaces the message).
struct Outcome {
  shardrec_status_t rc;
  std::string error;
};
inline Outcome Result(shardrec_status_t rc) { return {rc, shardrec_last_error()}; }

// The call was refused (SHARDREC_EINVAL) as a mismatch naming `words`, and the communicator still
// works: a matching all-reduce of the ranks sums them.
inline void ExpectRefused(shardrec_comm_t* comm, int32_t rank, int32_t size, const Outcome& o,
                          std::initializer_list<const char*> words) {
  EXPECT_EQ(o.rc, SHARDREC_EINVAL) << o.error;
  EXPECT_NE(o.error.find("different sizes"), std::string::npos) << o.error;
  for (const char* w : words) EXPECT_NE(o.error.find(w), std::string::npos) << o.error;
  int64_t r = rank, sum = 0;
  EXPECT_EQ(shardrec_comm_allreduce(comm, &r, &sum, 1, SHARDREC_DTYPE_INT64, SHARDREC_REDUCE_SUM,
                                    nullptr),
            SHARDREC_OK)
      << shardrec_last_error();
  EXPECT_EQ(sum, static_cast<int64_t>(size) * (size - 1) / 2);
}

// Rank 0 passes 8 elements, the others 4. MPI accepted the shorter message into rank 0's longer
// receive (a sum of 4 real and 4 stale values returned as SHARDREC_OK); Gloo's pair thread threw.
inline void AllReduceCountsThatDiffer(shardrec_comm_t* comm, int32_t rank, int32_t size) {
  const bool first = rank == 0;
  std::vector<float> x(8, 1.0f), y(8, -1.0f);
  const Outcome o =
      Result(shardrec_comm_allreduce(comm, x.data(), y.data(), first ? 8 : 4,
                                     SHARDREC_DTYPE_FLOAT32, SHARDREC_REDUCE_SUM, nullptr));
  ExpectRefused(comm, rank, size, o, {"allreduce of", first ? "8 elements" : "4 elements"});
  for (float v : y) EXPECT_EQ(v, -1.0f);  // nothing moved
  for (float v : x) EXPECT_EQ(v, 1.0f);
}

// Rank 0 all-reduces 8 floats while the others all-gather 4: 32 bytes against 16, which MPI's
// rank 0 summed as an all-reduce and returned SHARDREC_OK.
inline void DifferentCollectivesNamingBoth(shardrec_comm_t* comm, int32_t rank, int32_t size) {
  const bool first = rank == 0;
  std::vector<float> x(8, 1.0f), y(8 * static_cast<size_t>(size), -1.0f);
  const Outcome o =
      Result(first ? shardrec_comm_allreduce(comm, x.data(), y.data(), 8, SHARDREC_DTYPE_FLOAT32,
                                             SHARDREC_REDUCE_SUM, nullptr)
                   : shardrec_comm_allgather(comm, x.data(), y.data(), 4, SHARDREC_DTYPE_FLOAT32,
                                             nullptr));
  ExpectRefused(comm, rank, size, o, {first ? "allreduce of" : "allgather of"});
}

// An empty barrier against a 4-byte all-reduce: under MPI_Ibarrier both sides waited for their
// timeouts.
inline void BarrierAgainstAnAllReduce(shardrec_comm_t* comm, int32_t rank, int32_t size) {
  const bool first = rank == 0;
  float x = 1.0f, y = 0.0f;
  const Outcome o = Result(first ? shardrec_comm_barrier(comm)
                                 : shardrec_comm_allreduce(comm, &x, &y, 1, SHARDREC_DTYPE_FLOAT32,
                                                           SHARDREC_REDUCE_SUM, nullptr));
  ExpectRefused(comm, rank, size, o, {first ? "barrier" : "allreduce of"});
}

// The root passes 8 elements, the others 4. MPI_Ibcast's truncation went to MPI_COMM_WORLD's
// fatal error handler and mpirun ended the job. Now every rank, the root too, refuses it.
inline void BroadcastCountsThatDiffer(shardrec_comm_t* comm, int32_t rank, int32_t size) {
  const bool root = rank == 0;
  std::vector<float> y(8, static_cast<float>(rank));
  const Outcome o = Result(
      shardrec_comm_broadcast(comm, y.data(), root ? 8 : 4, SHARDREC_DTYPE_FLOAT32, 0, nullptr));
  ExpectRefused(comm, rank, size, o, {"broadcast of"});
  for (float v : y) EXPECT_EQ(v, static_cast<float>(rank));
}

// Every rank names itself the root.
inline void BroadcastRootsThatDiffer(shardrec_comm_t* comm, int32_t rank, int32_t size) {
  std::vector<float> y(4, static_cast<float>(rank));
  const Outcome o =
      Result(shardrec_comm_broadcast(comm, y.data(), 4, SHARDREC_DTYPE_FLOAT32, rank, nullptr));
  ExpectRefused(comm, rank, size, o, {"broadcast of"});
  for (float v : y) EXPECT_EQ(v, static_cast<float>(rank));
}

// Calls with nothing to carry still pair up, and the communicator stays usable.
inline void MatchingCallsOfEmptyBuffers(shardrec_comm_t* comm, int32_t rank, int32_t size) {
  ASSERT_EQ(shardrec_comm_allreduce(comm, nullptr, nullptr, 0, SHARDREC_DTYPE_FLOAT32,
                                    SHARDREC_REDUCE_SUM, nullptr),
            SHARDREC_OK)
      << shardrec_last_error();
  ASSERT_EQ(shardrec_comm_broadcast(comm, nullptr, 0, SHARDREC_DTYPE_FLOAT32, 0, nullptr),
            SHARDREC_OK)
      << shardrec_last_error();
  int64_t r = rank, sum = 0;
  ASSERT_EQ(shardrec_comm_allreduce(comm, &r, &sum, 1, SHARDREC_DTYPE_INT64, SHARDREC_REDUCE_SUM,
                                    nullptr),
            SHARDREC_OK)
      << shardrec_last_error();
  EXPECT_EQ(sum, static_cast<int64_t>(size) * (size - 1) / 2);
}

using Case = void (*)(shardrec_comm_t* comm, int32_t rank, int32_t size);

struct NamedCase {
  const char* name;
  Case run;
};

// Every case, for the harnesses' parameterized tests.
inline const std::vector<NamedCase>& AllCases() {
  static const std::vector<NamedCase> cases = {
      {"AllReduceCountsThatDiffer", &AllReduceCountsThatDiffer},
      {"DifferentCollectivesNamingBoth", &DifferentCollectivesNamingBoth},
      {"BarrierAgainstAnAllReduce", &BarrierAgainstAnAllReduce},
      {"BroadcastCountsThatDiffer", &BroadcastCountsThatDiffer},
      {"BroadcastRootsThatDiffer", &BroadcastRootsThatDiffer},
      {"MatchingCallsOfEmptyBuffers", &MatchingCallsOfEmptyBuffers},
  };
  return cases;
}

}  // namespace shardrec::testing::mismatch
