// State shared by the MPI plugin's files (mpi_plugin.cc: creation, splits, exit;
// plugin_requests.cc: messages and their test): the communicator handle, the process-wide mutex
// and the status helpers. Internal to libshardrec_mpi.so.
#pragma once

#include <mpi.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "impl/comm/mpi/mpi_plugin_abi.h"

// One request in flight, as test() needs it to check what a receive got.
struct shardrec_mpi_op {
  bool recv = false;
  int32_t peer = -1;
  int32_t tag = 0;    // a receive's expected tag
  int32_t bytes = 0;  // a receive's expected size
};

struct shardrec_mpi_comm {
  MPI_Comm comm = MPI_COMM_NULL;
  std::vector<MPI_Request> pending;
  std::vector<shardrec_mpi_op> ops;  // one per pending request, in the same order
  // MPI_Testsome's outputs, kept between polls so that a poll allocates nothing.
  std::vector<int> completed;
  std::vector<MPI_Status> statuses;
  // An idup'ed communicator inherits the parent's error handler (MPI_COMM_WORLD's is fatal);
  // ours is set to MPI_ERRORS_RETURN once the duplicate exists.
  bool needs_errhandler = false;
  // Splits and duplicates of `comm` not yet complete: while any is, `comm` is in use.
  std::atomic<int> children_in_flight{0};
  shardrec_mpi_comm* dup_parent = nullptr;  // on a duplicate until its MPI_Comm_idup completes
  // On a split's result: whether its thread has returned from MPI_Comm_split, and how.
  std::atomic<int> split_state{0};  // kNotSplit, kSplitRunning, kSplitDone
  int split_err = MPI_SUCCESS;      // written before split_state becomes kSplitDone
};

namespace shardrec_mpi_plugin {

// shardrec::Code values (the loader static_asserts them).
constexpr int32_t kInvalidArgument = -2;
constexpr int32_t kInvalidUsage = -3;
constexpr int32_t kRemote = -6;
constexpr int32_t kTimeout = -7;
constexpr int32_t kUnsupported = -10;

constexpr int kNotSplit = 0;
constexpr int kSplitRunning = 1;
constexpr int kSplitDone = 2;

// Held around every MPI call (MPI_THREAD_SERIALIZED), except a split's under MULTIPLE.
std::mutex& Mu();

int32_t Fail(shardrec_plugin_status_t* st, int32_t code, const char* fmt, ...)
    __attribute__((format(printf, 3, 4)));
int32_t Ok(shardrec_plugin_status_t* st);
std::string ErrorText(int err);
int32_t FromMpi(shardrec_plugin_status_t* st, int err, const char* what);

// plugin_requests.cc: the table's send, recv and test.
int32_t Send(shardrec_mpi_comm_t* c, const void* buf, int32_t bytes, int32_t peer, int32_t tag,
             shardrec_plugin_status_t* st);
int32_t Recv(shardrec_mpi_comm_t* c, void* buf, int32_t bytes, int32_t peer, int32_t tag,
             shardrec_plugin_status_t* st);
int32_t Test(shardrec_mpi_comm_t* c, int32_t* done, shardrec_mpi_mismatch_t* mismatch,
             shardrec_plugin_status_t* st);

}  // namespace shardrec_mpi_plugin
