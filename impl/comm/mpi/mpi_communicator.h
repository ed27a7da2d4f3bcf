// The MPI backend: a Communicator over a duplicate of a host MPI communicator, driven through the
// MPI plugin's plain-C table. Every operation is nonblocking MPI polled against the call's
// deadline, so a stalled peer yields kTimeout instead of a hang. Internal header; the C API
// creates these through CreateMpiCommunicator.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "impl/comm/checked_communicator.h"
#include "impl/comm/failure_domain.h"
#include "impl/comm/gloo/gloo_communicator.h"  // kDefaultTimeout
#include "impl/comm/mpi/message_tags.h"
#include "impl/comm/mpi/mpi_plugin_abi.h"
#include "impl/comm/one_caller.h"

namespace shardrec::comm::mpi {

// Collective over the members of the host communicator whose Fortran handle is `fortran_comm`
// (0: MPI_COMM_WORLD). Initialises MPI when the host has not. `timeout` (0: kDefaultTimeout)
// bounds creation and is every operation's default. Host memory only.
// Errors: kInvalidArgument (a bad handle; an MPI world of one process where a launcher says the
// job has more, launcher_world.h), kUnsupported (no MPI plugin, a CUDA device), kInvalidUsage (an
// MPI thread level below SERIALIZED, MPI finalized), kTimeout (a member never arrived), kRemote.
Status CreateMpiCommunicator(int64_t fortran_comm, Device device, std::chrono::milliseconds timeout,
                             std::unique_ptr<Communicator>* out);

// False when SHARDREC_MPI_DIRECT is "0": every byte then goes as an MPI message, even between
// ranks of one host (for comparison, or where reading a peer's memory is unwanted). Read when a
// communicator is created; splits inherit it.
bool DirectAllowedByEnv();

class MpiCommunicator : public CheckedCommunicator, public Abortable {
 public:
  struct Config {
    const shardrec_mpi_plugin_table_t* table = nullptr;
    shardrec_mpi_comm_t* handle = nullptr;  // owned
    int rank = 0;
    int size = 1;
    std::chrono::milliseconds timeout = kDefaultTimeout;
    size_t max_message_bytes = 0;  // bound on one MPI message (chunking.h)
    bool direct_allowed = true;    // may read same-host peers' memory (mpi_direct.cc)
    std::shared_ptr<FailureDomain> domain;
    std::vector<uint64_t> lineage;  // ids of the ancestors (splits)
  };
  explicit MpiCommunicator(const Config& config);
  ~MpiCommunicator() override;

  int Rank() const override { return rank_; }
  int Size() const override { return size_; }
  Device device() const override { return Device::Host(); }
  const char* backend() const override { return "mpi"; }
  std::chrono::milliseconds timeout() const override { return timeout_.load(); }
  void set_timeout(std::chrono::milliseconds timeout) override;

  Status Split(int color, int key, std::unique_ptr<Communicator>* out) override;
  void Abort() override;
  Status AsyncError() const override;
  // Interrupts this communicator alone (FailureDomain::Abort calls it for every descendant of an
  // aborted communicator): its wait ends at the next poll with kAborted.
  void AbortLocal(const Status& why) override;

  // Polls the plugin until everything started on `handle` has completed, the deadline passes
  // (kTimeout), an MPI error or a mismatched message is reported (kRemote, message_tags.h) or
  // Abort() is called; the last three poison this communicator. Also used during creation,
  // before a communicator exists (self == null).
  static Status Complete(const shardrec_mpi_plugin_table_t* t, shardrec_mpi_comm_t* handle,
                         const char* what, std::chrono::milliseconds timeout, int rank, int size,
                         const std::atomic<bool>* aborted);

 protected:
  Status DoAllReduce(const void* send, void* recv, size_t count, DType dtype, ReduceOp op,
                     const Call& call) override;
  Status DoAllToAllV(const void* send, std::span<const size_t> send_counts, void* recv,
                     std::span<const size_t> recv_counts, DType dtype, const Call& call) override;
  Status DoAllGatherV(const void* send, size_t send_count, void* recv,
                      std::span<const size_t> recv_counts, DType dtype, const Call& call) override;
  Status DoReduceScatterV(const void* send, void* recv, std::span<const size_t> recv_counts,
                          DType dtype, ReduceOp op, const Call& call) override;
  Status DoBroadcast(void* buf, size_t count, DType dtype, int root, const Call& call) override;
  Status DoBarrier(const Call& call) override;

 private:
  struct Block {
    uint8_t* ptr;
    size_t bytes;
  };

  Status Usable() const;
  Status Poison(Status s);
  Status Wait(const char* what, std::chrono::milliseconds timeout);
  // Starts a plugin call and poisons on failure (operations may already be in flight).
  Status Start(int32_t rc, const shardrec_plugin_status_t& st);

  // Bodies (mpi_collectives.cc); arguments are validated. `part` tags the messages; `what` names
  // the call in errors. Every pair of ranks exchanges at least one message per block, empty
  // blocks included, so that counts that differ between ranks are always noticed.
  Status Exchange(Part part, const char* what, const std::vector<Block>& sends,
                  const std::vector<Block>& recvs, std::chrono::milliseconds timeout);
  // An empty message to and from every peer: returns once every rank has sent its own.
  Status EmptyExchange(Part part, const char* what, std::chrono::milliseconds timeout);
  Status GatherAllReduce(const void* send, void* recv, size_t count, DType dtype, ReduceOp op,
                         std::chrono::milliseconds timeout);
  Status HostAllToAllV(const void* send, std::span<const size_t> send_counts, void* recv,
                       std::span<const size_t> recv_counts, DType dtype,
                       std::chrono::milliseconds timeout);
  Status HostAllGatherV(Part part, const char* what, const void* send, size_t send_count,
                        void* recv, std::span<const size_t> recv_counts, DType dtype,
                        std::chrono::milliseconds timeout);
  Status HostReduceScatterV(Part part, const char* what, const void* send, void* recv,
                            std::span<const size_t> recv_counts, DType dtype, ReduceOp op,
                            std::chrono::milliseconds timeout);
  Status HostBroadcast(void* buf, size_t bytes, int root, std::chrono::milliseconds timeout);
  // Direct reads of same-host peers' memory (mpi_direct.cc). ProbeDirect is collective and sets
  // direct_. DirectReduce (direct_ == 1) reduce-scatters `send` by `blocks` (one per rank, the
  // same on every rank) into `out`, this rank's block; with `recv` (the whole output, `out`
  // inside it) it then gathers the other blocks into `recv`: an all-reduce.
  Status ProbeDirect(const char* what, std::chrono::milliseconds timeout);
  // Every rank's `n` words `mine` into `all` (rank-major); `what` names the collective served.
  Status GatherWords(Part part, const char* what, int64_t* mine, size_t n, int64_t* all,
                     std::chrono::milliseconds timeout);
  Status DirectReduce(Part part, const char* what, const void* send, void* out, void* recv,
                      std::span<const size_t> blocks, DType dtype, ReduceOp op,
                      std::chrono::milliseconds timeout);
  Status Pull(const char* what, int peer, uint64_t remote, void* local, size_t bytes);
  // Probes on first use; true when this collective of `bytes` in all goes by DirectReduce.
  Status UseDirect(const char* what, size_t bytes, std::chrono::milliseconds timeout, bool* out);
  static uint8_t* Scratch(std::vector<uint8_t>* buf, size_t bytes);
  // Time left until `deadline`, rounded up, never negative (0: one last poll, then kTimeout).
  static std::chrono::milliseconds Remaining(std::chrono::steady_clock::time_point deadline);

  const shardrec_mpi_plugin_table_t* t_;
  shardrec_mpi_comm_t* h_;
  int rank_;
  int size_;
  size_t max_message_bytes_;
  std::shared_ptr<FailureDomain> domain_;
  uint64_t id_ = 0;                // process-unique, for the domain's lineage
  std::vector<uint64_t> lineage_;  // ancestors' ids, then id_
  std::atomic<std::chrono::milliseconds> timeout_;
  std::atomic<bool> aborted_{false};
  mutable std::mutex mu_;
  Status poison_;
  // Reused by the all-reduce and the reduce-scatter (one thread at a time per communicator).
  std::vector<uint8_t> exchange_scratch_;
  // Whether every rank can read every other's memory (process_vm_readv): 0 not yet probed (the
  // first large all-reduce probes), 1 yes, -1 no (another host, a ptrace policy,
  // SHARDREC_MPI_DIRECT=0): then every byte goes as an MPI message.
  int direct_ = 0;
  bool direct_allowed_;
  std::vector<int64_t> peer_pids_;
  // The words the probe and the direct all-reduce exchange (addresses, pids): members, so that a
  // late peer's message after a timeout lands in memory that is still this communicator's.
  std::vector<int64_t> direct_words_;
};

}  // namespace shardrec::comm::mpi
