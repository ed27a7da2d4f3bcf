#include "impl/comm/shm/shm_communicator.h"

#include <vector>

#include "impl/comm/one_caller.h"
#include "impl/comm/shm/doorbell.h"
#include "impl/core/check.h"

namespace shardrec::comm::shm {

Status ShmCommunicator::Wrap(std::unique_ptr<Communicator> inner,
                             std::unique_ptr<Communicator>* out) {
  SR_CHECK(inner != nullptr && out != nullptr);
  std::unique_ptr<HostSegment> host;
  SR_RETURN_IF_ERROR(SetUpHostSegment(*inner, &host));
  out->reset(new ShmCommunicator(std::move(inner), std::move(host)));
  return Status::Ok();
}

ShmCommunicator::ShmCommunicator(std::unique_ptr<Communicator> inner,
                                 std::unique_ptr<HostSegment> host)
    : inner_(std::move(inner)), host_(std::move(host)) {
  if (!host_) return;
  exchanger_ = std::make_unique<Exchanger>(host_->layout, inner_->Rank());
  hooks_ = dynamic_cast<BackendFailureHooks*>(inner_.get());
  // An interrupt of the wrapped tree (a failure or abort on any communicator split from the same
  // root) flags this rank in the segment too: a peer waiting here wakes as it would on Gloo's
  // closed connections.
  if (hooks_) hooks_->OnInterrupt([this] { TellPeersAborted(); });
}

ShmCommunicator::~ShmCommunicator() {
  if (hooks_) hooks_->OnInterrupt(nullptr);  // before the segment goes
}

Status ShmCommunicator::AsyncError() const {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!failure_.ok()) return failure_;
  }
  Status s = inner_->AsyncError();
  if (s.ok() && aborted_.load(std::memory_order_acquire))
    return Status::Aborted("the communicator (rank ", Rank(), " of ", Size(), ") was aborted");
  return s;
}

void ShmCommunicator::Abort() {
  aborted_.store(true, std::memory_order_release);
  if (host_) TellPeersAborted();
  inner_->Abort();
}

Status ShmCommunicator::Stopped() const {
  if (aborted_.load(std::memory_order_acquire))
    return Status::Aborted("the communicator (rank ", Rank(), " of ", Size(), ") was aborted");
  return UsableNow(*inner_);
}

void ShmCommunicator::TellPeersAborted(bool timed_out) {
  const Layout& l = host_->layout;
  uint32_t none = kNotAborted;
  Shared(&l.rank(Rank())->aborted)
      .compare_exchange_strong(none, timed_out ? kTimedOut : kFailed, std::memory_order_acq_rel);
  for (int r = 0; r < Size(); ++r) Ring(l.rank(r));  // this rank's waiter and every peer's
}

Status ShmCommunicator::OwnCause() const {
  if (aborted_.load(std::memory_order_acquire))
    return Status::Aborted("the communicator (rank ", Rank(), " of ", Size(), ") was aborted");
  return inner_->AsyncError();
}

Status ShmCommunicator::Exchange(std::span<const OutMessage> out, std::span<const InMessage> in,
                                 const char* what, const Call& call) {
  Status s = exchanger_->Run(out, in, what, call.timeout, [this] { return Stopped(); });
  if (s.ok()) return s;
  bool spread = false;
  if (s.code() != Code::kAborted) {
    // This rank's own abort or interrupt explains the failure before a peer's flag does: the
    // peers flag their segments when they learn of it, and may be seen first. Whoever set it
    // has explained and spread it already.
    Status own = OwnCause();
    if (!own.ok()) {
      s = std::move(own);
    } else if (hooks_ && (s.code() == Code::kTimeout || s.code() == Code::kRemote)) {
      const std::string tail = hooks_->ExplainFailure(s.code() == Code::kTimeout, call.timeout);
      if (!tail.empty()) s = Status(s.code(), StrCat(s.message(), " (", tail, ")"));
      spread = true;
    }
  }
  // Either way the peers learn of it here, as they would from Gloo's closed connections (also of
  // an abort that reached the wrapped communicator from an ancestor).
  TellPeersAborted(s.code() == Code::kTimeout);
  if (s.code() == Code::kAborted) return s;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (failure_.ok()) failure_ = s;
  }
  // Outside mu_: the backend interrupts its whole tree, which calls back into TellPeersAborted.
  if (spread) hooks_->ReportFailure(s);
  return s;
}

Status ShmCommunicator::DoAllToAllV(const void* send, std::span<const size_t> send_counts,
                                    void* recv, std::span<const size_t> recv_counts, DType dtype,
                                    const Call& call) {
  if (!host_) return inner_->AllToAllV(send, send_counts, recv, recv_counts, dtype, Options(call));
  const size_t n = send_counts.size(), e = DTypeSize(dtype);
  std::vector<OutMessage> out(n);
  std::vector<InMessage> in(n);
  const auto* s = static_cast<const uint8_t*>(send);
  auto* r = static_cast<uint8_t*>(recv);
  size_t so = 0, ro = 0;
  for (size_t p = 0; p < n; ++p) {
    out[p] = {send_counts[p] > 0 ? s + so : nullptr, send_counts[p] * e};
    in[p] = {recv_counts[p] > 0 ? r + ro : nullptr, recv_counts[p] * e};
    so += send_counts[p] * e;
    ro += recv_counts[p] * e;
  }
  return Exchange(out, in, "alltoallv", call);
}

Status ShmCommunicator::DoAllGatherV(const void* send, size_t send_count, void* recv,
                                     std::span<const size_t> recv_counts, DType dtype,
                                     const Call& call) {
  if (!host_) return inner_->AllGatherV(send, send_count, recv, recv_counts, dtype, Options(call));
  const size_t n = recv_counts.size(), e = DTypeSize(dtype);
  const OutMessage mine{send_count > 0 ? static_cast<const uint8_t*>(send) : nullptr,
                        send_count * e};
  std::vector<OutMessage> out(n, mine);
  std::vector<InMessage> in(n);
  auto* r = static_cast<uint8_t*>(recv);
  size_t ro = 0;
  for (size_t p = 0; p < n; ++p) {
    in[p] = {recv_counts[p] > 0 ? r + ro : nullptr, recv_counts[p] * e};
    ro += recv_counts[p] * e;
  }
  return Exchange(out, in, "allgatherv", call);
}

// Every rank sends every other an empty message and waits for all of theirs: a rank that does
// not come is named in the timeout error, as a peer owing data is.
Status ShmCommunicator::DoBarrier(const Call& call) {
  if (!host_) return inner_->Barrier(Options(call));
  const std::vector<OutMessage> out(static_cast<size_t>(Size()));
  const std::vector<InMessage> in(static_cast<size_t>(Size()));
  return Exchange(out, in, "barrier", call);
}

// The root sends its buffer to every rank; the other pairs exchange empty messages, so ranks that
// name different roots see sizes that disagree (kRemote) instead of waiting out the timeout.
Status ShmCommunicator::DoBroadcast(void* buf, size_t count, DType dtype, int root,
                                    const Call& call) {
  if (!host_ || count == 0)  // an empty broadcast moves nothing on Gloo either
    return inner_->Broadcast(buf, count, dtype, root, Options(call));
  const auto n = static_cast<size_t>(Size()), me = static_cast<size_t>(Rank());
  const auto from = static_cast<size_t>(root);
  const size_t bytes = count * DTypeSize(dtype);
  std::vector<OutMessage> out(n);
  std::vector<InMessage> in(n);
  if (me == from) {
    for (size_t p = 0; p < n; ++p)
      if (p != me) out[p] = {static_cast<const uint8_t*>(buf), bytes};
  } else {
    in[from] = {static_cast<uint8_t*>(buf), bytes};
  }
  return Exchange(out, in, "broadcast", call);
}

Status ShmCommunicator::Split(int color, int key, std::unique_ptr<Communicator>* out) {
  if (out == nullptr) return inner_->Split(color, key, nullptr);  // a refusal, as the inner's
  out->reset();
  const OneCaller caller(busy());
  SR_RETURN_IF_ERROR(caller.Usable(*this));
  std::unique_ptr<Communicator> child;
  SR_RETURN_IF_ERROR(inner_->Split(color, key, &child));
  if (child == nullptr) return Status::Ok();  // not a member of any group
  if (child->Size() < 2) {
    *out = std::move(child);
    return Status::Ok();
  }
  return Wrap(std::move(child), out);
}

}  // namespace shardrec::comm::shm
