// MpiCommunicator: creation from a host communicator, the deadline-bounded wait that stands in
// for MPI's missing per-operation timeout, poisoning, Split and Abort, and argument checks. The
// collective bodies live in mpi_collectives.cc.
#include "impl/comm/mpi/mpi_communicator.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include "impl/comm/agree.h"
#include "impl/comm/mpi/chunking.h"
#include "impl/comm/mpi/launcher_world.h"
#include "impl/comm/mpi/mpi_plugin_loader.h"
#include "impl/core/check.h"

namespace shardrec::comm::mpi {

namespace {

using Clock = std::chrono::steady_clock;

// All-reduces whose buffer, times the number of peers, is at most this many bytes gather every
// rank's whole buffer and reduce locally (one round of messages); larger ones go as
// reduce-scatter + all-gather (two rounds, each rank moving 2(W-1)/W of the buffer).
constexpr size_t kGatherAllReduceBytes = size_t{256} << 10;

// All-reduces and reduce-scatters of at least this many bytes in all read same-host peers'
// buffers directly (mpi_direct.cc) where the ranks can.
constexpr size_t kDirectMinBytes = size_t{1} << 20;

// Polls before a waiting rank starts yielding its core after each one: enough to catch a reply
// that is microseconds away, few enough that oversubscribed ranks (more processes than cores,
// as in CI) let their peers run.
constexpr uint64_t kSpinPolls = 32;

const char* LevelName(int32_t level) {
  switch (level) {
    case SHARDREC_MPI_THREAD_SINGLE:
      return "MPI_THREAD_SINGLE";
    case SHARDREC_MPI_THREAD_FUNNELED:
      return "MPI_THREAD_FUNNELED";
    case SHARDREC_MPI_THREAD_SERIALIZED:
      return "MPI_THREAD_SERIALIZED";
    default:
      return "MPI_THREAD_MULTIPLE";
  }
}

}  // namespace

Status MpiCommunicator::Complete(const shardrec_mpi_plugin_table_t* t, shardrec_mpi_comm_t* handle,
                                 const char* what, std::chrono::milliseconds timeout, int rank,
                                 int size, const std::atomic<bool>* aborted) {
  const auto deadline = Clock::now() + timeout;
  for (uint64_t polls = 0;; ++polls) {
    if (aborted != nullptr && aborted->load(std::memory_order_relaxed)) {
      return Status::Aborted("MPI ", what, " on rank ", rank, " of ", size,
                             " was interrupted by an abort");
    }
    shardrec_plugin_status_t st{};
    shardrec_mpi_mismatch_t mismatch{};
    int32_t done = 0;
    if (const int32_t rc = t->test(handle, &done, &mismatch, &st); rc != 0) {
      const Status s = FromMpiPlugin(rc, st);
      return Status(s.code(),
                    StrCat("MPI ", what, " failed on rank ", rank, " of ", size, ": ",
                           mismatch.peer >= 0 ? DescribeMismatch(mismatch) : s.message()));
    }
    if (done) return Status::Ok();
    // Each test drives MPI's progress engine; after a short spin, give the core away so that
    // oversubscribed ranks (more processes than cores) can reach the collective.
    if (polls > kSpinPolls) std::this_thread::yield();
    if ((polls & 63) == 0 && Clock::now() >= deadline) {
      return Status::Timeout("MPI ", what, " did not complete within ", timeout.count(),
                             " ms on rank ", rank, " of ", size,
                             " (a peer is missing or stalled; its MPI requests stay outstanding "
                             "and the communicator is unusable)");
    }
  }
}

Status CreateMpiCommunicator(int64_t fortran_comm, Device device, std::chrono::milliseconds timeout,
                             std::unique_ptr<Communicator>* out) {
  if (out == nullptr) return Status::InvalidArgument("out must not be null");
  out->reset();
  if (timeout.count() < 0)
    return Status::InvalidArgument("timeout ", timeout.count(), " ms must not be negative");
  if (timeout.count() == 0) timeout = kDefaultTimeout;
  if (!device.is_host()) {
    return Status::Unsupported("the MPI backend carries host memory only, got ", device.ToString(),
                               "; use NCCL (or Gloo, which stages through host memory) for GPU "
                               "buffers");
  }
  const shardrec_mpi_plugin_table_t* t = nullptr;
  SR_RETURN_IF_ERROR(GetMpiPlugin(&t));
  shardrec_mpi_comm_t* handle = nullptr;
  shardrec_mpi_comm_info_t info{};
  shardrec_plugin_status_t st{};
  // One deadline for the whole creation: MPI_Init_thread (when the plugin initialises MPI), then
  // the duplicate of the communicator.
  const auto start = std::chrono::steady_clock::now();
  SR_RETURN_IF_ERROR(
      FromMpiPlugin(t->create(fortran_comm, timeout.count(), &handle, &info, &st), st));
  const auto spent = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::steady_clock::now() - start);
  Status s = MpiCommunicator::Complete(t, handle, "communicator creation (MPI_Comm_idup)",
                                       std::max(timeout - spent, std::chrono::milliseconds(1)),
                                       info.rank, info.size, nullptr);
  if (!s.ok()) {
    t->destroy(handle);
    return s.WithContext(
        "not every member of the MPI communicator called shardrec_comm_create_mpi");
  }
  // The communication worker (pipelined input distribution, DDP buckets) calls MPI from its own
  // thread; the plugin serialises its calls, which MPI_THREAD_SERIALIZED allows.
  if (info.thread_level < SHARDREC_MPI_THREAD_SERIALIZED) {
    t->destroy(handle);
    return Status::InvalidUsage(
        "MPI was initialised with ", LevelName(info.thread_level),
        " but libshardrec calls MPI from its communication worker thread and needs "
        "MPI_THREAD_SERIALIZED or MPI_THREAD_MULTIPLE: call MPI_Init_thread with "
        "MPI_THREAD_MULTIPLE (or let libshardrec initialise MPI) [",
        info.library, "]");
  }
  if (Status w = CheckWorldAgainstLauncher(ProcessEnv(), info.world_size); !w.ok()) {
    t->destroy(handle);
    return w;
  }
  MpiCommunicator::Config config;
  config.table = t;
  config.handle = handle;
  config.rank = info.rank;
  config.size = info.size;
  config.timeout = timeout;
  config.max_message_bytes = MaxMessageBytesFromEnv();
  config.direct_allowed = DirectAllowedByEnv();
  *out = std::make_unique<MpiCommunicator>(config);
  return Status::Ok();
}

MpiCommunicator::MpiCommunicator(const Config& config)
    : t_(config.table),
      h_(config.handle),
      rank_(config.rank),
      size_(config.size),
      max_message_bytes_(config.max_message_bytes > 0 ? config.max_message_bytes
                                                      : kDefaultMaxMessageBytes),
      domain_(config.domain ? config.domain : std::make_shared<FailureDomain>()),
      lineage_(config.lineage),
      timeout_(config.timeout),
      direct_allowed_(config.direct_allowed) {
  id_ = NewCommunicatorId();
  lineage_.push_back(id_);
  domain_->Join(this, lineage_);
}

MpiCommunicator::~MpiCommunicator() {
  domain_->Leave(this);
  t_->destroy(h_);
}

void MpiCommunicator::set_timeout(std::chrono::milliseconds timeout) {
  if (timeout.count() > 0) timeout_.store(timeout);
}

Status MpiCommunicator::AsyncError() const {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!poison_.ok()) return poison_;
  }
  Status shared = domain_->first();
  if (shared.ok()) return shared;
  return Status(shared.code(),
                StrCat("a communicator split from the same root failed: ", shared.message()));
}

Status MpiCommunicator::Usable() const { return UsableNow(*this); }

Status MpiCommunicator::Poison(Status s) {
  std::lock_guard<std::mutex> lock(mu_);
  if (poison_.ok()) poison_ = s;
  if (s.code() == Code::kTimeout || s.code() == Code::kRemote) domain_->Fail(s);
  return s;
}

void MpiCommunicator::Abort() {
  // Aborting a communicator aborts every one split from it (a collection's or a mesh's private
  // splits included), as on Gloo.
  domain_->Abort(id_, Status::Aborted("the communicator (rank ", rank_, " of ", size_,
                                      ") or one it was split from was aborted"));
}

void MpiCommunicator::AbortLocal(const Status& why) {
  // MPI cannot cancel a collective: the flag ends this process's wait at its next poll; the
  // requests stay outstanding and the handle is never freed (see mpi_plugin.cc).
  std::lock_guard<std::mutex> lock(mu_);
  aborted_.store(true);
  if (poison_.ok()) poison_ = why;
}

Status MpiCommunicator::Wait(const char* what, std::chrono::milliseconds timeout) {
  Status s = Complete(t_, h_, what, timeout, rank_, size_, &aborted_);
  return s.ok() ? s : Poison(std::move(s));
}

Status MpiCommunicator::Start(int32_t rc, const shardrec_plugin_status_t& st) {
  Status s = FromMpiPlugin(rc, st);
  return s.ok() ? s : Poison(std::move(s));
}

Status MpiCommunicator::Split(int color, int key, std::unique_ptr<Communicator>* out) {
  const bool refused = out == nullptr;
  if (!refused) out->reset();
  const OneCaller caller(busy());
  SR_RETURN_IF_ERROR(caller.Usable(*this));
  // A bounded exchange first: MPI_Comm_split waits for every member without a timeout, so it is
  // only started once every member has shown up. It then runs on a plugin thread, waited for
  // here against the deadline and this communicator's abort like any operation: another thread
  // of this process splitting another communicator meanwhile is never held up by it.
  const auto deadline = Clock::now() + timeout_.load();
  const int64_t mine[3] = {refused ? kRefusedSplitColor : color, key, rank_};
  std::vector<int64_t> all(3 * static_cast<size_t>(size_));
  std::vector<size_t> counts(size_, 3);
  SR_RETURN_IF_ERROR(HostAllGatherV(Part::kSplit, "split", mine, 3, all.data(), counts,
                                    DType::kInt64, timeout_.load()));
  SR_RETURN_IF_ERROR(SplitRefusal(all, refused));
  // One color everywhere, keys in rank order (a collection's, DDP's or FSDP's private copy): a
  // duplicate, which MPI makes without blocking. No color anywhere: nothing to create.
  bool dup = true, none = true;
  for (int r = 0; r < size_; ++r) {
    dup = dup && all[3 * r] == color && (r == 0 || all[3 * r + 1] >= all[3 * r - 2]);
    none = none && all[3 * r] < 0;
  }
  if (none) return Status::Ok();
  shardrec_mpi_comm_t* child = nullptr;
  shardrec_plugin_status_t st{};
  SR_RETURN_IF_ERROR(
      Start(dup ? t_->dup(h_, &child, &st) : t_->split(h_, color, key, &child, &st), st));
  Status s = Complete(t_, child, dup ? "split (MPI_Comm_idup)" : "split (MPI_Comm_split)",
                      Remaining(deadline), rank_, size_, &aborted_);
  shardrec_mpi_comm_info_t info{};
  if (s.ok()) s = FromMpiPlugin(t_->describe(child, &info, &st), st);
  if (!s.ok()) {
    t_->destroy(child);  // leaked by the plugin while its split thread still runs
    return Poison(std::move(s));
  }
  if (info.size == 0) {  // a negative color
    t_->destroy(child);
    return Status::Ok();
  }
  Config config;
  config.table = t_;
  config.handle = child;
  config.rank = info.rank;
  config.size = info.size;
  config.timeout = timeout_.load();
  config.max_message_bytes = max_message_bytes_;
  config.direct_allowed = direct_allowed_;
  config.domain = domain_;
  config.lineage = lineage_;
  *out = std::make_unique<MpiCommunicator>(config);
  return Status::Ok();
}

// ---- Validation and dispatch ----

Status MpiCommunicator::UseDirect(const char* what, size_t bytes, std::chrono::milliseconds timeout,
                                  bool* out) {
  // Every rank decides alike: `bytes` is the same on all (an all-reduce's buffer, a
  // reduce-scatter's whole input), and the probe is collective. Smaller ones stay on messages:
  // the direct path's three rounds cost more than its saved copy below about 1 MiB (a 128 KiB
  // all-reduce at world 4 took 2x the message path's time, tests/bench/RESULTS.md).
  *out = false;
  if (bytes < kDirectMinBytes) return Status::Ok();
  if (direct_ == 0) SR_RETURN_IF_ERROR(ProbeDirect(what, timeout));
  *out = direct_ == 1;
  return Status::Ok();
}

Status MpiCommunicator::DoAllReduce(const void* send, void* recv, size_t count, DType dtype,
                                    ReduceOp op, const Call& call) {
  const std::chrono::milliseconds t = call.timeout;
  const size_t bytes = count * DTypeSize(dtype);
  if (size_ == 1) {
    if (bytes > 0 && send != recv) std::memmove(recv, send, bytes);
    return Status::Ok();
  }
  if (bytes * static_cast<size_t>(size_ - 1) <= kGatherAllReduceBytes)
    return GatherAllReduce(send, recv, count, dtype, op, t);
  // A rank-ordered reduce-scatter of even blocks straight into this rank's block of `recv`, then
  // an all-gather in place, both point-to-point. Not MPI_Iallreduce: MPI has no 16-bit float
  // type, and Open MPI 4.1's nonblocking all-reduce (libnbc) was slower at every size measured
  // (comm_mpi_bench: 1.6-1.9x the time of the gather at 8 B-16 KiB, 3-6x Gloo's time at
  // 16-64 MiB); every rank gets the same bits, summed in rank order, whatever the size. Ranks
  // that can read each other's memory (one host) do the same sum reading it directly.
  std::vector<size_t> blocks(size_);
  size_t mine_offset = 0;
  for (int r = 0; r < size_; ++r) {
    blocks[r] = count / size_ + (static_cast<size_t>(r) < count % size_ ? 1 : 0);
    if (r < rank_) mine_offset += blocks[r];
  }
  uint8_t* mine = static_cast<uint8_t*>(recv) + mine_offset * DTypeSize(dtype);
  const auto deadline = Clock::now() + t;
  bool direct = false;
  SR_RETURN_IF_ERROR(UseDirect("allreduce", bytes, t, &direct));
  if (direct) {
    return DirectReduce(Part::kDirectAllReduce, "allreduce", send, mine, recv, blocks, dtype, op,
                        Remaining(deadline));
  }
  SR_RETURN_IF_ERROR(
      HostReduceScatterV(Part::kAllReduceScatter, "allreduce", send, mine, blocks, dtype, op, t));
  return HostAllGatherV(Part::kAllReduceGather, "allreduce", mine, blocks[rank_], recv, blocks,
                        dtype, Remaining(deadline));
}

Status MpiCommunicator::DoAllToAllV(const void* send, std::span<const size_t> send_counts,
                                    void* recv, std::span<const size_t> recv_counts, DType dtype,
                                    const Call& call) {
  return HostAllToAllV(send, send_counts, recv, recv_counts, dtype, call.timeout);
}

Status MpiCommunicator::DoAllGatherV(const void* send, size_t send_count, void* recv,
                                     std::span<const size_t> recv_counts, DType dtype,
                                     const Call& call) {
  const std::chrono::milliseconds t = call.timeout;
  return HostAllGatherV(Part::kAllGather, "allgatherv", send, send_count, recv, recv_counts, dtype,
                        t);
}

Status MpiCommunicator::DoReduceScatterV(const void* send, void* recv,
                                         std::span<const size_t> recv_counts, DType dtype,
                                         ReduceOp op, const Call& call) {
  const std::chrono::milliseconds t = call.timeout;
  const size_t total = call.send_total;
  bool direct = false;
  if (size_ > 1) {
    const auto deadline = Clock::now() + t;
    SR_RETURN_IF_ERROR(UseDirect("reducescatterv", total * DTypeSize(dtype), t, &direct));
    if (direct) {
      return DirectReduce(Part::kDirectReduceScatter, "reducescatterv", send, recv, nullptr,
                          recv_counts, dtype, op, Remaining(deadline));
    }
  }
  return HostReduceScatterV(Part::kReduceScatter, "reducescatterv", send, recv, recv_counts, dtype,
                            op, t);
}

Status MpiCommunicator::DoBroadcast(void* buf, size_t count, DType dtype, int root,
                                    const Call& call) {
  const std::chrono::milliseconds t = call.timeout;
  return HostBroadcast(buf, count * DTypeSize(dtype), root, t);
}

Status MpiCommunicator::DoBarrier(const Call& call) {
  const std::chrono::milliseconds t = call.timeout;
  if (size_ == 1) return Status::Ok();
  return EmptyExchange(Part::kBarrier, "barrier", t);
}

}  // namespace shardrec::comm::mpi
