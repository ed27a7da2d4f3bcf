// The TCP store client: one connection, requests serialised, fail-fast once the server is gone.
#include "impl/comm/rendezvous/store_tcp.h"

#include <algorithm>
#include <thread>

#include "impl/comm/rendezvous/store_tcp_protocol.h"
#include "impl/core/check.h"

namespace shardrec::comm {

namespace {
// Slack on top of a server-side wait so the server's own timeout reply arrives first.
constexpr std::chrono::milliseconds kReplySlack{5000};
// Pauses between tries while the store on a reused port is still a previous session's: short
// at first (rank 0 usually re-creates within milliseconds), then no more than a few a second.
constexpr std::chrono::milliseconds kFirstRetryPause{10};
constexpr std::chrono::milliseconds kMaxRetryPause{200};

// Server instances this process's clients have left. A re-created communicator's first
// connection can reach the previous store while rank 0 is still leaving it (its keys would
// send this rank to rank 0's old, closed addresses); remembering it tells it from its
// successor on the same port. Bounded: only the latest few matter.
class LeftStores {
 public:
  void Add(uint64_t instance) {
    std::lock_guard<std::mutex> lock(mu_);
    if (left_.size() == kMax) left_.erase(left_.begin());
    left_.push_back(instance);
  }
  bool Has(uint64_t instance) {
    std::lock_guard<std::mutex> lock(mu_);
    return std::find(left_.begin(), left_.end(), instance) != left_.end();
  }

 private:
  static constexpr size_t kMax = 256;
  std::mutex mu_;
  std::vector<uint64_t> left_;
};

LeftStores& Left() {
  static LeftStores* left = new LeftStores();  // never destroyed: clients may outlive statics
  return *left;
}

}  // namespace

Status TcpStore::Connect(const net::Endpoint& server, const Nonce& nonce,
                         std::chrono::milliseconds timeout, std::shared_ptr<TcpStoreServer> hosted,
                         std::shared_ptr<TcpStore>* out, Address address, uint64_t attempt) {
  std::shared_ptr<TcpStore> store(new TcpStore());
  store->attempt_ = attempt;
  store->server_ = server;
  store->nonce_ = nonce;
  store->address_ = address;
  store->server_name_ = server.ToString();
  store->io_timeout_ = timeout;
  store->linger_ = timeout;
  int fd = -1;
  SR_RETURN_IF_ERROR(store->Open(&fd));
  Status s = net::LocalHost(fd, &store->local_host_);
  store->Release(fd);
  SR_RETURN_IF_ERROR(s);
  // Only a connected client owns the server: a failed attempt must not stop it.
  store->hosted_ = std::move(hosted);
  *out = std::move(store);
  return Status::Ok();
}

Status TcpStore::Open(int* fd_out, std::optional<net::Clock::time_point> cap) {
  int fd = -1;
  const auto deadline =
      std::min(net::Clock::now() + io_timeout_, cap.value_or(net::Clock::time_point::max()));
  // A reused port's first connection tries again while the store there is not this session's;
  // `foreign` says why the last one was not, for the error at the deadline.
  const bool patient = address_ == Address::kReused && instance_ == 0;
  Status foreign;
  std::chrono::milliseconds pause = kFirstRetryPause;
  for (;;) {
    // A bounded call (best effort, its own short time) to a store this session has met does
    // not wait out a refused connection: the store's process is gone, and the caller (a rank
    // collecting failure notes) must not spend its time on it.
    Status s = net::ConnectWithRetry(server_, deadline, &fd, !(cap && instance_ != 0));
    if (!s.ok()) return foreign.ok() ? s : foreign;
    std::vector<uint8_t> request, reply;
    net::PutU8(&request, tcp_store::kHello);
    net::PutBytes(&request, nonce_.data(), nonce_.size());
    if (attempt_ > 0) net::PutU64(&request, attempt_);
    const auto reply_by = std::min(deadline, net::Clock::now() + tcp_store::kHelloTimeout);
    s = net::SendFrame(fd, request, reply_by);
    if (s.ok()) s = net::RecvFrame(fd, &reply, reply_by);
    net::Reader in(reply);
    uint8_t status = 255;
    uint64_t instance = 0;
    const bool accepted = s.ok() && in.U8(&status) && status == tcp_store::kOk && in.U64(&instance);
    if (accepted && instance_ == 0 && !(patient && Left().Has(instance))) {
      instance_ = instance;
      break;
    }
    if (accepted && instance == instance_) break;
    net::CloseFd(&fd);
    if (accepted && !patient) {
      return Status::Remote("the rendezvous store at ", server_name_,
                            " was replaced by a new one (rank 0 re-created it): this "
                            "communicator's session is over");
    }
    if (accepted) {
      foreign = Status::Timeout(
          "the rendezvous store at ", server_name_,
          " is still the one of a session this process has left (or that had formed before "
          "this process started): rank 0 did not re-create it within the timeout (rank 0 must "
          "destroy its previous communicator and call create again)");
    } else if (uint64_t theirs = 0; s.ok() && !reply.empty() && reply[0] == tcp_store::kMismatch &&
                                    attempt_ > 0 && in.U64(&theirs) && theirs > attempt_) {
      // The store is of a later attempt of this restarted job: this rank's session is over for
      // good, so waiting for it to go away would only cost the timeout.
      return Status::Remote("the rendezvous store at ", server_name_,
                            " belongs to a later attempt of this job (its "
                            "TORCHELASTIC_RESTART_COUNT is ",
                            theirs - 1, ", this rank's ", attempt_ - 1,
                            "): this rank is left from an earlier attempt; it must not join");
    } else if (s.ok() && !reply.empty() && reply[0] == tcp_store::kMismatch) {
      // The session's nonce comes from the unique id, or, under a launcher, from the variables
      // every rank must share.
      foreign = Status::Remote(
          "the rendezvous store at ", server_name_,
          " belongs to another session: a stale unique id, or, under a launcher, ranks started "
          "with different WORLD_SIZE (or launcher size), port, SHARDREC_RENDEZVOUS_TOKEN or "
          "TORCHELASTIC_RESTART_COUNT (a rank of an earlier attempt of a restarted job), or "
          "another job on that port (how each rank spells the address does not matter)",
          patient ? " (tried until the timeout: a previous session's store would have gone)" : "");
      if (!patient) return foreign;
    } else if (!foreign.ok() && net::Clock::now() >= deadline) {
      return foreign;  // the last try only ran out of time
    } else if (s.ok() || s.code() == Code::kCorrupt) {
      // A reply, but not one of the store's: something else listens there.
      return Status::Remote("the service at ", server_name_,
                            " is not a libshardrec rendezvous store (its reply is not the store "
                            "protocol's",
                            s.ok() ? "" : ": ", s.ok() ? "" : s.message(),
                            "): check the address and port (MASTER_ADDR / MASTER_PORT)");
    } else if (s.code() != Code::kRemote || net::Clock::now() >= deadline) {
      return Status::Remote("the rendezvous store at ", server_name_,
                            " did not accept this rank: ", s.message());
    }
    // Closed without a reply: the server is at its connection bound (strangers hold the
    // pre-authentication slots) or going away; or, on a reused port, the previous session's
    // store has not gone yet. Try again until the deadline.
    const auto now = net::Clock::now();
    if (now >= deadline) return foreign.ok() ? s : foreign;
    std::this_thread::sleep_for(std::min<net::Clock::duration>(pause, deadline - now));
    pause = std::min(2 * pause, kMaxRetryPause);
  }
  *fd_out = fd;
  return Status::Ok();
}

Status TcpStore::Acquire(int* fd, std::optional<net::Clock::time_point> cap) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!broken_.ok()) return broken_;
    if (!idle_.empty()) {
      *fd = idle_.back();
      idle_.pop_back();
      return Status::Ok();
    }
  }
  Status s = Open(fd, cap);
  // A bounded call that ran out of its own short time says nothing of the store.
  if (!s.ok() && !cap) {
    std::lock_guard<std::mutex> lock(mu_);
    if (broken_.ok()) broken_ = s;
  }
  return s;
}

void TcpStore::Release(int fd) {
  std::lock_guard<std::mutex> lock(mu_);
  idle_.push_back(fd);
}

TcpStore::~TcpStore() {
  for (int& fd : idle_) net::CloseFd(&fd);
  if (instance_ != 0) Left().Add(instance_);
  if (hosted_) {
    // Other ranks may still be in a store operation (a split in a group without rank 0); keep
    // the server up until they disconnect or the linger time passes.
    hosted_->WaitForClients(0, linger_.load());
    hosted_->Stop();
  }
}

Status TcpStore::Call(const std::vector<uint8_t>& request, std::chrono::milliseconds wait,
                      std::vector<uint8_t>* reply, std::optional<net::Clock::time_point> cap) {
  int fd = -1;
  SR_RETURN_IF_ERROR(Acquire(&fd, cap));
  const auto deadline = std::min(net::Clock::now() + io_timeout_ + wait + kReplySlack,
                                 cap.value_or(net::Clock::time_point::max()));
  Status s = net::SendFrame(fd, request, deadline);
  if (s.ok()) s = net::RecvFrame(fd, reply, deadline);
  if (!s.ok()) {
    // A failed connection is out of step, and the server is gone or unresponsive: later
    // requests fail the same way at once.
    net::CloseFd(&fd);
    if (cap) return s;  // its own short time ran out: the store may still be fine
    std::lock_guard<std::mutex> lock(mu_);
    if (broken_.ok()) {
      broken_ = Status(s.code() == Code::kTimeout ? Code::kTimeout : Code::kRemote,
                       StrCat("rendezvous store at ", server_name_, ": ", s.message()));
    }
    return broken_;
  }
  Release(fd);
  return Status::Ok();
}

namespace {

// The session was refused because a name (a rank) was claimed twice.
Status ConflictError(const std::string& name) {
  return Status::InvalidUsage(
      "the rendezvous was refused: ", name,
      " was claimed twice (two processes or threads were given the same rank number, or another "
      "job uses the same unique id or launch port); every rank still meeting on it fails");
}

Status ParseStatusReply(net::Reader* in, bool* ok) {
  uint8_t status = 0;
  *ok = false;
  if (!in->U8(&status)) return Status::Corrupt("empty reply from the rendezvous store");
  if (status == tcp_store::kOk) {
    *ok = true;
    return Status::Ok();
  }
  std::string what;
  in->String(&what);
  if (status == tcp_store::kConflict) return ConflictError(what);
  if (status == tcp_store::kTaken) {
    return Status::InvalidUsage(
        what,
        " of this rendezvous is already held by another process or thread; refused, and so is "
        "every rank whose creation on it has not finished (a communicator that already formed "
        "on it is not affected: two jobs on one store? give each its own port or "
        "SHARDREC_RENDEZVOUS_TOKEN)");
  }
  if (status == tcp_store::kTimedOut) return Status::Timeout(what);
  return Status::Corrupt("bad reply status ", int{status}, " from the store");
}

}  // namespace

Status TcpStore::SetCapped(const std::string& key, const std::vector<uint8_t>& value,
                           std::optional<net::Clock::time_point> cap) {
  std::vector<uint8_t> request, reply;
  net::PutU8(&request, tcp_store::kSet);
  net::PutBytes(&request, key.data(), key.size());
  net::PutBytes(&request, value.data(), value.size());
  SR_RETURN_IF_ERROR(Call(request, std::chrono::milliseconds(0), &reply, cap));
  net::Reader in(reply);
  bool ok = false;
  return ParseStatusReply(&in, &ok);
}

Status TcpStore::Set(const std::string& key, const std::vector<uint8_t>& value) {
  return SetCapped(key, value, std::nullopt);
}

Status TcpStore::SetWithin(const std::string& key, const std::vector<uint8_t>& value,
                           std::chrono::milliseconds within) {
  return SetCapped(key, value, net::Clock::now() + within);
}

Status TcpStore::Claim(const std::string& name) {
  std::vector<uint8_t> request, reply;
  net::PutU8(&request, tcp_store::kClaim);
  net::PutBytes(&request, name.data(), name.size());
  SR_RETURN_IF_ERROR(Call(request, std::chrono::milliseconds(0), &reply));
  net::Reader in(reply);
  bool ok = false;
  return ParseStatusReply(&in, &ok);
}

namespace {

Status ParseWaitReply(const std::vector<uint8_t>& reply, std::chrono::milliseconds timeout,
                      std::vector<uint8_t>* value) {
  net::Reader in(reply);
  bool ok = false;
  Status s = ParseStatusReply(&in, &ok);
  if (s.code() == Code::kTimeout) {
    return Status::Timeout("store key '", s.message(), "' did not appear within ", timeout.count(),
                           " ms");
  }
  SR_RETURN_IF_ERROR(s);
  if (value != nullptr && !in.Bytes(value))
    return Status::Corrupt("truncated reply from the store");
  return Status::Ok();
}

std::vector<uint8_t> GetRequest(const std::string& key, std::chrono::milliseconds timeout) {
  std::vector<uint8_t> request;
  net::PutU8(&request, tcp_store::kGet);
  net::PutBytes(&request, key.data(), key.size());
  net::PutU64(&request, static_cast<uint64_t>(std::max<int64_t>(0, timeout.count())));
  return request;
}

}  // namespace

Status TcpStore::Get(const std::string& key, std::chrono::milliseconds timeout,
                     std::vector<uint8_t>* value) {
  std::vector<uint8_t> reply;
  SR_RETURN_IF_ERROR(Call(GetRequest(key, timeout), timeout, &reply));
  return ParseWaitReply(reply, timeout, value);
}

Status TcpStore::GetWithin(const std::string& key, std::chrono::milliseconds within,
                           std::vector<uint8_t>* value) {
  std::vector<uint8_t> reply;
  const std::chrono::milliseconds now_only(0);
  SR_RETURN_IF_ERROR(Call(GetRequest(key, now_only), now_only, &reply, net::Clock::now() + within));
  return ParseWaitReply(reply, now_only, value);
}

Status TcpStore::RefusalReason(std::chrono::milliseconds within) {
  int fd = -1;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!broken_.ok() || idle_.empty()) return Status::Ok();
    fd = idle_.back();
    idle_.pop_back();
  }
  std::vector<uint8_t> reply;
  const auto deadline = net::Clock::now() + within;
  Status s = net::SendFrame(fd, GetRequest("shardrec/refusal-probe", {}), deadline);
  if (s.ok()) s = net::RecvFrame(fd, &reply, deadline);
  if (!s.ok()) {
    net::CloseFd(&fd);
    return Status::Ok();
  }
  Release(fd);
  const Status why = ParseWaitReply(reply, std::chrono::milliseconds(0), nullptr);
  return why.code() == Code::kInvalidUsage ? why : Status::Ok();
}

Status TcpStore::Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  std::vector<uint8_t> request, reply;
  net::PutU8(&request, tcp_store::kWait);
  net::PutU64(&request, keys.size());
  for (const auto& k : keys) net::PutBytes(&request, k.data(), k.size());
  net::PutU64(&request, static_cast<uint64_t>(std::max<int64_t>(0, timeout.count())));
  SR_RETURN_IF_ERROR(Call(request, timeout, &reply));
  return ParseWaitReply(reply, timeout, nullptr);
}

}  // namespace shardrec::comm
