// GlooCommunicator: creation, validation, error mapping and poisoning, CUDA staging, Split and
// Abort. The collective bodies live in gloo_collectives.cc.
#include "impl/comm/gloo/gloo_communicator.h"

#include <gloo/barrier.h>
#include <gloo/context.h>
#include <gloo/transport/tcp/device.h>

#include <algorithm>
#include <csignal>
#include <cstring>
#include <mutex>

#include "impl/comm/agree.h"
#include "impl/comm/gloo/gloo_interrupt.h"
#include "impl/comm/gloo/gloo_mesh.h"
#include "impl/comm/rendezvous/stores.h"
#include "impl/core/check.h"
#include "impl/core/cuda_plugin.h"

namespace shardrec::comm {

namespace {

// Gloo writes to its sockets with writev(), which raises SIGPIPE when a peer has gone. A host
// that installed its own handler keeps it; one that left the default (terminate) gets SIG_IGN,
// once, process-wide, so that a dead peer becomes an error status instead of killing the host.
void IgnoreSigpipeIfDefault() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction current {};
    if (sigaction(SIGPIPE, nullptr, &current) != 0) return;
    if ((current.sa_flags & SA_SIGINFO) == 0 && current.sa_handler == SIG_DFL) {
      struct sigaction ignore {};
      ignore.sa_handler = SIG_IGN;
      sigemptyset(&ignore.sa_mask);
      sigaction(SIGPIPE, &ignore, nullptr);
    }
  });
}

bool LooksLikeTimeout(const std::string& msg) {
  std::string lower(msg);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  return lower.find("timed out") != std::string::npos || lower.find("timeout") != std::string::npos;
}

// `who`, when given, replaces the generic "a peer is missing or stalled" of a timeout.
Status MapGlooError(const std::string& what, const std::string& detail, bool timed_out, int rank,
                    int size, std::chrono::milliseconds timeout, const std::string& who = "") {
  if (timed_out || LooksLikeTimeout(detail)) {
    return Status::Timeout(what, " did not complete within ", timeout.count(), " ms on rank ", rank,
                           " of ", size, " (", who.empty() ? "a peer is missing or stalled" : who,
                           "): ", detail);
  }
  return Status::Remote(what, " failed on rank ", rank, " of ", size,
                        " (a peer died or the connection broke): ", detail);
}

}  // namespace

Status CreateGlooCommunicator(const GlooConfig& config, std::unique_ptr<Communicator>* out) {
  if (out == nullptr) return Status::InvalidArgument("out must not be null");
  if (!config.store) return Status::InvalidArgument("store must not be null");
  if (config.world < 1)
    return Status::InvalidArgument("world size ", config.world, " must be >= 1");
  if (config.rank < 0 || config.rank >= config.world) {
    return Status::InvalidArgument("rank ", config.rank, " is outside [0, ", config.world, ")");
  }
  if (config.timeout.count() <= 0) {
    return Status::InvalidArgument("timeout ", config.timeout.count(), " ms must be positive");
  }
  SR_RETURN_IF_ERROR(core::CheckDevice(config.device));
  IgnoreSigpipeIfDefault();

  std::shared_ptr<gloo::transport::Device> device = config.gloo_device;
  const std::string where = StrCat("rank ", config.rank, " of ", config.world);
  try {
    if (!device) {
      gloo::transport::tcp::attr attr;
      attr.hostname = config.bind_host.empty() ? "127.0.0.1" : config.bind_host;
      device = gloo::transport::tcp::CreateDevice(attr);
    }
  } catch (const std::exception& e) {
    return Status::Io(where, ": cannot bind the Gloo TCP device to '", config.bind_host,
                      "' (set bind_address or SHARDREC_SOCKET_IFADDR): ", e.what());
  }

  // One deadline for the whole creation, so that a rank whose peers never arrive returns within
  // the timeout it was given, not after one timeout per phase.
  const auto budget = config.create_timeout.count() > 0 ? config.create_timeout : config.timeout;
  const auto start = std::chrono::steady_clock::now();
  const auto deadline = start + budget;
  auto left = [&] {
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    return std::max(ms, std::chrono::milliseconds(1));
  };
  PrefixStore store(config.store, config.prefix);
  std::shared_ptr<MeshContext> context;
  try {
    context = std::make_shared<MeshContext>(config.rank, config.world);
    Status s = context->ConnectMesh(&store, device, deadline);
    if (!s.ok()) return s.WithContext(where + ": rendezvous failed");
    // A rank's pairs can all be connected while a peer is still completing its side of the
    // handshake; a rank that then destroyed the new communicator would break the peer's setup.
    // The barrier makes creation complete on every member before any of them returns.
    if (config.world > 1) {
      gloo::BarrierOptions barrier(context);
      barrier.setTimeout(left());
      gloo::barrier(barrier);
    }
    context->setTimeout(config.timeout);
    // A process that claimed a rank number already held (another job on the same store, or a
    // rank started twice) refuses the rendezvous on the store; a member whose store calls had all
    // passed before that would still return a communicator. One last store call after the
    // barrier hears of the refusal, so every member whose creation is still running fails too.
    if (config.world > 1) {
      Status s = store.Set(StrCat("created/", config.rank), {1});
      if (!s.ok()) return s.WithContext(where + ": rendezvous failed");
    }
  } catch (const std::exception& e) {
    return MapGlooError("connecting the communicator", e.what(),
                        std::chrono::steady_clock::now() >= deadline, config.rank, config.world,
                        budget);
  }
  std::vector<PeerAddress> peers = context->peers();
  *out = std::make_unique<GlooCommunicator>(config, std::move(context), std::move(device),
                                            std::move(peers));
  return Status::Ok();
}

GlooCommunicator::GlooCommunicator(const GlooConfig& config, std::shared_ptr<gloo::Context> context,
                                   std::shared_ptr<gloo::transport::Device> gloo_device,
                                   std::vector<PeerAddress> peers)
    : config_(config),
      rank_(config.rank),
      size_(config.world),
      device_(config.device),
      timeout_(config.timeout),
      context_(std::move(context)),
      gloo_device_(std::move(gloo_device)),
      peers_(std::move(peers)) {
  config_.gloo_device = gloo_device_;
  if (!config_.domain) config_.domain = std::make_shared<FailureDomain>();
  if (config_.root_rank < 0) {
    config_.root_prefix = config_.prefix;
    config_.root_rank = rank_;
    config_.root_world = size_;
  }
  id_ = NewCommunicatorId();
  config_.lineage.push_back(id_);
  config_.domain->Join(this, config_.lineage);
}

GlooCommunicator::~GlooCommunicator() { config_.domain->Leave(this); }

void GlooCommunicator::set_timeout(std::chrono::milliseconds timeout) {
  if (timeout.count() > 0) timeout_.store(timeout);
}

Status GlooCommunicator::AsyncError() const {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!poison_.ok()) return poison_;
  }
  Status shared = config_.domain->first();
  if (shared.ok()) return shared;
  return Status(shared.code(),
                StrCat("a communicator split from the same root failed: ", shared.message()));
}

Status GlooCommunicator::Poison(Status s) {
  // A call that failed because its connections were torn down by an abort reports the abort,
  // not the broken pipe it saw. The domain is told outside mu_: an abort holds the domain's
  // lock while it takes each member's.
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (aborted_.load()) return poison_;
    if (poison_.ok()) poison_ = s;
  }
  if ((s.code() == Code::kTimeout || s.code() == Code::kRemote) && config_.domain->Fail(s)) {
    LeaveNote(s);
    // Then close every connection of the tree: a peer blocked waiting for this rank (not on the
    // rank this one lost) learns of the failure now, reads the note, and fails its own peers in
    // turn, so every survivor errors at once rather than at its timeout. The note comes first
    // so that the peers woken find it.
    config_.domain->InterruptAll(this, s);
  }
  if (aborted_.load()) {
    std::lock_guard<std::mutex> lock(mu_);
    return poison_;
  }
  return s;
}

void GlooCommunicator::Abort() {
  // Aborting a root aborts its whole tree: destroying rank 0's communicators must then not wait
  // for peers to leave its rendezvous server. (A split's abort leaves the store to its root.)
  if (config_.lineage.size() == 1) config_.store->Abandon();
  config_.domain->Abort(id_, Status::Aborted("the communicator (rank ", rank_, " of ", size_,
                                             ") or one it was split from was aborted"));
}

void GlooCommunicator::AbortLocal(const Status& why) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (aborted_.exchange(true)) return;
    poison_ = why;
    if (on_interrupt_) on_interrupt_();
  }
  // Gloo's closeConnections() alone closes the sockets but leaves a thread blocked in waitRecv
  // or waitSend waiting for its timeout; the interrupt wakes it first.
  InterruptGlooContext(*context_, rank_, size_, "shardrec: communicator aborted");
  try {
    context_->closeConnections();
  } catch (...) {
  }
}

Status GlooCommunicator::Run(const char* what, std::chrono::milliseconds timeout,
                             const std::function<void()>& body) {
  const auto start = Clock::now();
  std::string detail;
  try {
    body();
    return Status::Ok();
  } catch (const StatusError& e) {
    return Poison(e.status());
  } catch (const std::exception& e) {
    detail = e.what();
  } catch (...) {
    detail = "unknown exception";
  }
  const bool timed_out = Clock::now() - start >= timeout || LooksLikeTimeout(detail);
  // An abort's interrupt is not a failure to explain; Poison reports the abort. A broken
  // connection is probed too: in a partition, a peer of this side that timed out first and
  // exited breaks its pairs before this rank's own wait ends, and the probe still names the
  // hosts across the cut.
  if (aborted_.load()) return Poison(MapGlooError(what, detail, timed_out, rank_, size_, timeout));
  std::string who = WhoIsUnreachable(timeout, /*quiet_when_all_answer=*/!timed_out);
  const std::string notes = PeersNotes(timeout);
  if (!timed_out) {
    std::string tail = who;
    if (!notes.empty()) tail = tail.empty() ? notes : StrCat(tail, "; ", notes);
    return Poison(Status::Remote(what, " failed on rank ", rank_, " of ", size_,
                                 " (a peer died or the connection broke): ", detail,
                                 tail.empty() ? "" : StrCat(" (", tail, ")")));
  }
  if (!notes.empty()) who = StrCat(who, "; ", notes);
  return Poison(MapGlooError(what, detail, timed_out, rank_, size_, timeout, who));
}

namespace {
constexpr const char* kNoteKey = "failed/";

// A short budget for the notes (a 40th of the timeout, within [20 ms, 250 ms]): on top of the
// probe, it must leave a failing rank inside its timeout plus the probe and a step.
std::chrono::milliseconds NoteBudget(std::chrono::milliseconds timeout) {
  return std::clamp(timeout / 40, std::chrono::milliseconds(20), std::chrono::milliseconds(250));
}
}  // namespace

void GlooCommunicator::LeaveNote(const Status& s) const {
  if (config_.root_world <= 1) return;
  const std::string msg(s.message());
  PrefixStore store(config_.store, config_.root_prefix);
  // Best effort: a store that is gone or cut off leaves the peers without the note.
  (void)store.SetWithin(StrCat(kNoteKey, config_.root_rank),
                        std::vector<uint8_t>(msg.begin(), msg.end()), NoteBudget(timeout_.load()));
}

std::string GlooCommunicator::PeersNotes(std::chrono::milliseconds timeout) const {
  if (config_.root_world <= 1) return "";
  PrefixStore store(config_.store, config_.root_prefix);
  const auto end = Clock::now() + NoteBudget(timeout);
  std::string out;
  for (int r = 0; r < config_.root_world; ++r) {
    if (r == config_.root_rank) continue;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - Clock::now());
    if (left.count() <= 0) break;
    std::vector<uint8_t> note;
    const Status got = store.GetWithin(StrCat(kNoteKey, r), left, &note);
    // A rank without a note times out at once; any other failure is the store's own (its host
    // gone with the rank that died): no other note can be read then.
    if (!got.ok() && got.code() != Code::kTimeout) break;
    if (!got.ok()) continue;
    out += StrCat(out.empty() ? "" : "; ", "rank ", r,
                  " had failed first: ", std::string(note.begin(), note.end()));
  }
  return out;
}

std::string GlooCommunicator::WhoIsUnreachable(std::chrono::milliseconds timeout,
                                               bool quiet_when_all_answer) const {
  if (peers_.empty()) return "";
  // A tenth of the timeout, within [50 ms, 1 s]: a round trip on any network a job spans, and
  // little beside the timeout already spent.
  const auto budget =
      std::clamp(timeout / 10, std::chrono::milliseconds(50), std::chrono::milliseconds(1000));
  const std::vector<int> lost = UnreachablePeers(peers_, budget);
  if (lost.empty()) {
    if (quiet_when_all_answer) return "";
    // A refusal answers too, and cannot tell a dead peer from a live one: Gloo closes each
    // pair's listening socket once the pair is connected. Nor can the probe tell a stalled peer
    // from a transfer still under way on a link too slow for the timeout (through a saturated
    // 1 Mbit/s link the probe's connection waited behind the data and did not answer at all).
    return StrCat("every peer's host answered a connection probe within ", budget.count(),
                  " ms: no link is down now; a peer is stalled, not calling, or gone, or the "
                  "operation's transfers need longer than the timeout (a slow or congested "
                  "link: raise the timeout)");
  }
  return StrCat(DescribePeers(lost, peers_),
                " unreachable, no answer to a connection probe within ", budget.count(),
                " ms: a link down or a partition, or a link too slow or congested to answer in "
                "time");
}

std::string GlooCommunicator::ExplainFailure(bool timed_out,
                                             std::chrono::milliseconds timeout) const {
  std::string who = WhoIsUnreachable(timeout, /*quiet_when_all_answer=*/!timed_out);
  const std::string notes = PeersNotes(timeout);
  if (notes.empty()) return who;
  return who.empty() ? notes : StrCat(who, "; ", notes);
}

void GlooCommunicator::ReportFailure(const Status& s) {
  SR_CHECK(s.code() == Code::kTimeout || s.code() == Code::kRemote);
  (void)Poison(s);  // this rank's caller already has s
}

void GlooCommunicator::OnInterrupt(std::function<void()> fn) {
  std::lock_guard<std::mutex> lock(mu_);
  on_interrupt_ = std::move(fn);
}

Status GlooCommunicator::Staged(
    const std::vector<HostBuf>& in, const std::vector<HostBuf>& out, Stream stream,
    const std::function<Status(std::vector<void*>&, std::vector<void*>&)>& fn) {
  const core::CudaRuntime* cuda = nullptr;
  SR_RETURN_IF_ERROR(core::GetCudaRuntime(&cuda));
  const int dev = device_.index;
  const int64_t wait_ms = timeout_.load().count();
  // One pinned region holds every input copy, then every output, each 64-byte aligned.
  constexpr size_t kAlign = 64;
  auto rounded = [](size_t b) { return (b + kAlign - 1) / kAlign * kAlign; };
  size_t total = 0;
  for (const HostBuf& b : in) total += rounded(b.bytes);
  for (const HostBuf& b : out) total += rounded(b.bytes);
  // Allocated with this communicator's device current: the block joins its context, and a
  // calling thread with no current device creates none on device 0.
  pinned_.SetDevice(dev);
  SR_RETURN_IF_ERROR(pinned_.Reserve(total));
  auto* base = static_cast<uint8_t*>(pinned_.data());
  std::vector<void*> in_ptrs, out_ptrs;
  for (const HostBuf& b : in) {
    if (b.bytes > 0) {
      SR_RETURN_IF_ERROR(
          cuda->MemcpyAsync(dev, base, b.ptr, b.bytes, core::CopyKind::kDeviceToHost, stream));
    }
    in_ptrs.push_back(base);
    base += rounded(b.bytes);
  }
  for (const HostBuf& b : out) {
    out_ptrs.push_back(base);
    base += rounded(b.bytes);
  }
  SR_RETURN_IF_ERROR(cuda->StreamWait(dev, stream, wait_ms));
  SR_RETURN_IF_ERROR(fn(in_ptrs, out_ptrs));
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i].bytes == 0) continue;
    SR_RETURN_IF_ERROR(cuda->MemcpyAsync(dev, const_cast<void*>(out[i].ptr), out_ptrs[i],
                                         out[i].bytes, core::CopyKind::kHostToDevice, stream));
  }
  // The pinned region is reused by the next call, so the copies out of it must be done.
  return cuda->StreamWait(dev, stream, wait_ms);
}

Status GlooCommunicator::Split(int color, int key, std::unique_ptr<Communicator>* out) {
  const OneCaller caller(busy());
  SR_RETURN_IF_ERROR(caller.Usable(*this));
  // Every member learns every (color, key, rank) triple; the groups follow deterministically.
  const bool refused = out == nullptr;
  const int64_t mine[3] = {refused ? kRefusedSplitColor : color, key, rank_};
  std::vector<int64_t> all(3 * static_cast<size_t>(size_));
  std::vector<size_t> counts(size_, 3);
  SR_RETURN_IF_ERROR(HostAllGatherV(mine, 3, all.data(), counts, DType::kInt64, timeout_.load()));
  const int seq = split_seq_++;
  SR_RETURN_IF_ERROR(SplitRefusal(all, refused));
  out->reset();
  if (color < 0) return Status::Ok();
  std::vector<std::pair<int64_t, int64_t>> members;  // (key, old rank)
  for (int r = 0; r < size_; ++r) {
    if (all[3 * r] == color) members.emplace_back(all[3 * r + 1], all[3 * r + 2]);
  }
  std::sort(members.begin(), members.end());
  GlooConfig config = config_;
  config.world = static_cast<int>(members.size());
  config.rank = static_cast<int>(
      std::find(members.begin(), members.end(), std::pair<int64_t, int64_t>(key, rank_)) -
      members.begin());
  config.prefix = StrCat(config_.prefix, "/split", seq, "/color", color);
  config.timeout = timeout_.load();
  Status s = CreateGlooCommunicator(config, out);
  if (!s.ok() && (s.code() == Code::kTimeout || s.code() == Code::kRemote)) return Poison(s);
  return s;
}

// ---- Dispatch (host or staged); the arguments were checked (checked_communicator.cc) ----

Status GlooCommunicator::DoAllReduce(const void* send, void* recv, size_t count, DType dtype,
                                     ReduceOp op, const Call& call) {
  const std::chrono::milliseconds t = call.timeout;
  if (device_.is_host()) return HostAllReduce(send, recv, count, dtype, op, t);
  const size_t bytes = count * DTypeSize(dtype);
  return Staged({{send, bytes}}, {{recv, bytes}}, call.stream, [&](auto& in, auto& out) {
    return HostAllReduce(in[0], out[0], count, dtype, op, t);
  });
}

Status GlooCommunicator::DoAllToAllV(const void* send, std::span<const size_t> send_counts,
                                     void* recv, std::span<const size_t> recv_counts, DType dtype,
                                     const Call& call) {
  const std::chrono::milliseconds t = call.timeout;
  if (device_.is_host()) return HostAllToAllV(send, send_counts, recv, recv_counts, dtype, t);
  const size_t es = DTypeSize(dtype);
  return Staged({{send, call.send_total * es}}, {{recv, call.recv_total * es}}, call.stream,
                [&](auto& in, auto& out) {
                  return HostAllToAllV(in[0], send_counts, out[0], recv_counts, dtype, t);
                });
}

Status GlooCommunicator::DoAllGatherV(const void* send, size_t send_count, void* recv,
                                      std::span<const size_t> recv_counts, DType dtype,
                                      const Call& call) {
  const std::chrono::milliseconds t = call.timeout;
  if (device_.is_host()) return HostAllGatherV(send, send_count, recv, recv_counts, dtype, t);
  const size_t es = DTypeSize(dtype);
  return Staged({{send, send_count * es}}, {{recv, call.recv_total * es}}, call.stream,
                [&](auto& in, auto& out) {
                  return HostAllGatherV(in[0], send_count, out[0], recv_counts, dtype, t);
                });
}

Status GlooCommunicator::DoReduceScatterV(const void* send, void* recv,
                                          std::span<const size_t> recv_counts, DType dtype,
                                          ReduceOp op, const Call& call) {
  const std::chrono::milliseconds t = call.timeout;
  if (device_.is_host()) return HostReduceScatterV(send, recv, recv_counts, dtype, op, t);
  const size_t es = DTypeSize(dtype);
  return Staged({{send, call.send_total * es}}, {{recv, recv_counts[rank_] * es}}, call.stream,
                [&](auto& in, auto& out) {
                  return HostReduceScatterV(in[0], out[0], recv_counts, dtype, op, t);
                });
}

Status GlooCommunicator::DoBroadcast(void* buf, size_t count, DType dtype, int root,
                                     const Call& call) {
  const std::chrono::milliseconds t = call.timeout;
  if (device_.is_host()) return HostBroadcast(buf, count, dtype, root, t);
  const size_t bytes = count * DTypeSize(dtype);
  return Staged({{buf, bytes}}, {{buf, bytes}}, call.stream, [&](auto& in, auto& out) {
    std::memcpy(out[0], in[0], bytes);
    return HostBroadcast(out[0], count, dtype, root, t);
  });
}

Status GlooCommunicator::DoBarrier(const Call& call) {
  const std::chrono::milliseconds t = call.timeout;
  if (size_ == 1) return Status::Ok();
  return Run("barrier", t, [&] {
    gloo::BarrierOptions o(context_);
    o.setTimeout(t);
    gloo::barrier(o);
  });
}

}  // namespace shardrec::comm
