// The CPU backend: a Communicator over a Gloo context with the TCP transport. Internal header;
// everything else creates communicators through factory.h.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "impl/comm/checked_communicator.h"
#include "impl/comm/failure_domain.h"
#include "impl/comm/failure_hooks.h"
#include "impl/comm/one_caller.h"
#include "impl/comm/peer_probe.h"
#include "impl/comm/rendezvous/store.h"
#include "impl/core/pinned_buffer.h"

namespace gloo {
class Context;
namespace transport {
class Device;
}
}  // namespace gloo

namespace shardrec::comm {

inline constexpr std::chrono::milliseconds kDefaultTimeout{5 * 60 * 1000};

struct GlooConfig {
  std::shared_ptr<Store> store;  // rendezvous; this communicator uses keys under `prefix`
  std::string prefix;
  int world = 1;
  int rank = 0;
  Device device;  // host, or CUDA (staged through host memory)
  std::chrono::milliseconds timeout = kDefaultTimeout;
  // Bound on creation as a whole (store waits, connections and the closing barrier together);
  // 0: `timeout`. Later operations use `timeout`.
  std::chrono::milliseconds create_timeout{0};
  std::string bind_host;                                 // address for the Gloo TCP device
  std::shared_ptr<gloo::transport::Device> gloo_device;  // reused by splits; else created
  std::shared_ptr<FailureDomain> domain;                 // shared by splits; else created
  std::vector<uint64_t> lineage;                         // ids of the ancestors (splits)
  // The root communicator's prefix, rank and size (splits inherit them; empty / -1 at the root
  // mean this one's): the keys of the failure notes (Poison) are by root rank under it, so every
  // communicator of a tree reads and writes the same ones.
  std::string root_prefix;
  int root_rank = -1;
  int root_world = -1;
};

// Validates the config, checks the device (kNoDevice for an unusable GPU), ignores SIGPIPE once
// per process if the host left it at SIG_DFL (Gloo writes to sockets without MSG_NOSIGNAL, so a
// dead peer would otherwise kill the process), and connects the full mesh through the store.
Status CreateGlooCommunicator(const GlooConfig& config, std::unique_ptr<Communicator>* out);

class GlooCommunicator : public CheckedCommunicator, public Abortable, public BackendFailureHooks {
 public:
  // `peers`: each other rank's Gloo address from the rendezvous, to name the unreachable ones
  // when a collective times out.
  GlooCommunicator(const GlooConfig& config, std::shared_ptr<gloo::Context> context,
                   std::shared_ptr<gloo::transport::Device> gloo_device,
                   std::vector<PeerAddress> peers);
  ~GlooCommunicator() override;

  int Rank() const override { return rank_; }
  int Size() const override { return size_; }
  Device device() const override { return device_; }
  const char* backend() const override { return "gloo"; }
  std::chrono::milliseconds timeout() const override { return timeout_.load(); }
  void set_timeout(std::chrono::milliseconds timeout) override;

  Status Split(int color, int key, std::unique_ptr<Communicator>* out) override;
  void Abort() override;
  Status AsyncError() const override;

  // Interrupts this communicator alone (FailureDomain::Abort calls it for every member, and
  // InterruptAll after the domain's first failure): blocked Gloo waits fail at once and later
  // calls return `why` (kAborted from an abort; the failure's code after a failure).
  void AbortLocal(const Status& why) override;

  // The shared-memory transport's failures, as this communicator's own (failure_hooks.h).
  std::string ExplainFailure(bool timed_out, std::chrono::milliseconds timeout) const override;
  void ReportFailure(const Status& s) override;
  void OnInterrupt(std::function<void()> fn) override;

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
  using Clock = std::chrono::steady_clock;
  struct HostBuf {
    const void* ptr;
    size_t bytes;
  };

  // Runs a Gloo call, turning any exception into kTimeout/kRemote and poisoning on failure.
  Status Run(const char* what, std::chrono::milliseconds timeout,
             const std::function<void()>& body);
  Status Poison(Status s);
  // A timeout's "who": the peers whose host did not answer a connection probe, with their host,
  // or that every host answered (a stalled peer, not a cut link).
  // `quiet_when_all_answer`: "" rather than "every peer's host answered" (a broken connection,
  // which that says nothing about).
  std::string WhoIsUnreachable(std::chrono::milliseconds timeout,
                               bool quiet_when_all_answer = false) const;
  // The failure notes other ranks of the tree left in the store before failing (their own first
  // error, which names whom they lost), read within a short budget: a rank whose pair broke
  // because a peer failed and exited learns from the note whom that peer had lost.
  // "" when there are none.
  std::string PeersNotes(std::chrono::milliseconds timeout) const;
  // Leaves this rank's first failure in the store for the others (see PeersNotes).
  void LeaveNote(const Status& s) const;
  // CUDA buffers: copy `in` to pinned host memory, run `fn` on the host copies, copy the host
  // results to `out`; each stream wait is bounded by the communicator's timeout.
  Status Staged(const std::vector<HostBuf>& in, const std::vector<HostBuf>& out, Stream stream,
                const std::function<Status(std::vector<void*>&, std::vector<void*>&)>& fn);

  // Host bodies (gloo_collectives.cc); arguments are already validated.
  Status HostAllReduce(const void* send, void* recv, size_t count, DType dtype, ReduceOp op,
                       std::chrono::milliseconds timeout);
  Status HostAllToAllV(const void* send, std::span<const size_t> send_counts, void* recv,
                       std::span<const size_t> recv_counts, DType dtype,
                       std::chrono::milliseconds timeout);
  Status HostAllGatherV(const void* send, size_t send_count, void* recv,
                        std::span<const size_t> recv_counts, DType dtype,
                        std::chrono::milliseconds timeout);
  Status HostReduceScatterV(const void* send, void* recv, std::span<const size_t> recv_counts,
                            DType dtype, ReduceOp op, std::chrono::milliseconds timeout);
  Status HostBroadcast(void* buf, size_t count, DType dtype, int root,
                       std::chrono::milliseconds timeout);

  GlooConfig config_;  // kept for splits (store, prefix, bind address, lineage incl. this one)
  int rank_;
  int size_;
  Device device_;
  std::atomic<std::chrono::milliseconds> timeout_;
  std::shared_ptr<gloo::Context> context_;
  std::shared_ptr<gloo::transport::Device> gloo_device_;
  std::vector<PeerAddress> peers_;
  uint64_t id_ = 0;  // process-unique, for the domain's lineage
  int split_seq_ = 0;
  std::atomic<bool> aborted_{false};
  mutable std::mutex mu_;
  std::function<void()> on_interrupt_;  // guarded by mu_ (OnInterrupt)
  Status poison_;
  // Pinned staging for CUDA buffers, grown on demand and kept: page-locked memory is slow to
  // allocate, and copies from pageable memory are synchronous and slower.
  core::PinnedBuffer pinned_;
};

}  // namespace shardrec::comm
