// The TCP store server: accept loop plus one thread per client connection. Before a connection
// has presented the nonce it may send one small frame within a short deadline, so a stranger
// costs a thread and a few hundred bytes for a few seconds, never a buffer of its choosing.
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <random>

#include "impl/comm/rendezvous/store_tcp.h"
#include "impl/comm/rendezvous/store_tcp_protocol.h"
#include "impl/core/check.h"

namespace shardrec::comm {

namespace {

// How often a request waiting for keys checks that its client is still there.
constexpr std::chrono::milliseconds kHangUpCheck{100};

// Compares every byte whatever the first difference, so the reply time says nothing about how
// much of a guessed nonce was right.
bool ConstantTimeEqual(const uint8_t* a, const uint8_t* b, size_t n) {
  volatile uint8_t diff = 0;
  for (size_t i = 0; i < n; ++i) diff = static_cast<uint8_t>(diff | (a[i] ^ b[i]));
  return diff == 0;
}

uint64_t NewInstance() {
  std::random_device rd;
  uint64_t v = 0;
  while (v == 0) v = (uint64_t{rd()} << 32) ^ rd();
  return v;
}

}  // namespace

Status TcpStoreServer::Start(const net::Endpoint& addr, bool any_interface, const Nonce& nonce,
                             std::shared_ptr<TcpStoreServer>* out, uint16_t want_port, bool* in_use,
                             uint64_t attempt) {
  int fd = -1;
  uint16_t port = 0;
  SR_RETURN_IF_ERROR(net::Listen(addr, any_interface, &fd, &port, want_port, in_use));
  std::shared_ptr<TcpStoreServer> server(new TcpStoreServer(fd, port, nonce, NewInstance()));
  server->attempt_ = attempt;
  server->accept_thread_ = std::thread([s = server.get()] { s->AcceptLoop(); });
  *out = std::move(server);
  return Status::Ok();
}

TcpStoreServer::~TcpStoreServer() { Stop(); }

void TcpStoreServer::Stop() {
  if (stop_.exchange(true)) return;
  cv_.notify_all();
  // Wakes the accept loop's poll now (Linux fails a shut-down listener's accept) rather than at
  // its next 100 ms turn, which every destroy of rank 0's communicator used to wait out.
  if (listen_fd_ >= 0) ::shutdown(listen_fd_, SHUT_RDWR);
  if (accept_thread_.joinable()) accept_thread_.join();
  std::list<Conn> conns;
  {
    std::lock_guard<std::mutex> lock(mu_);
    // Shutting the sockets down wakes clients blocked on a reply; they see kRemote.
    for (const Conn& c : conns_) {
      if (!c.done) ::shutdown(c.fd, SHUT_RDWR);
    }
    conns.splice(conns.end(), conns_);  // nodes keep their addresses for the serving threads
  }
  cv_.notify_all();
  for (auto& c : conns) c.thread.join();
  net::CloseFd(&listen_fd_);
}

bool TcpStoreServer::WaitForClients(int max_clients, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_for(lock, timeout, [&] { return active_ <= max_clients || stop_.load(); });
}

int TcpStoreServer::authenticated() const {
  std::lock_guard<std::mutex> lock(mu_);
  return active_;
}

int TcpStoreServer::pending() const {
  std::lock_guard<std::mutex> lock(mu_);
  return pending_;
}

void TcpStoreServer::ReapLocked() {
  for (auto it = conns_.begin(); it != conns_.end();) {
    if (it->done) {
      it->thread.join();  // the thread has left Serve; this only collects it
      it = conns_.erase(it);
    } else {
      ++it;
    }
  }
}

void TcpStoreServer::AcceptLoop() {
  while (!stop_.load()) {
    pollfd p{listen_fd_, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) {
      std::lock_guard<std::mutex> lock(mu_);
      ReapLocked();
      continue;
    }
    int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    std::lock_guard<std::mutex> lock(mu_);
    ReapLocked();
    if (stop_.load()) {
      net::CloseFd(&fd);
      break;
    }
    // Over either bound the connection is closed at once; a real rank's client retries until
    // its own deadline, so a burst of strangers delays it but cannot lock it out for good.
    if (pending_ >= tcp_store::kMaxPending || active_ >= tcp_store::kMaxConnections) {
      net::CloseFd(&fd);
      continue;
    }
    ++pending_;
    Conn& c = conns_.emplace_back();
    c.fd = fd;
    c.id = next_conn_id_++;
    c.thread = std::thread([this, conn = &c] { Serve(conn); });
  }
}

void TcpStoreServer::Serve(Conn* conn) {
  const int fd = conn->fd;
  std::vector<uint8_t> request;
  auto stopping = [this] { return stop_.load(); };
  bool greeted = net::RecvFrame(fd, &request, net::Clock::now() + tcp_store::kHelloTimeout,
                                stopping, tcp_store::kMaxHelloBytes)
                     .ok() &&
                 Hello(fd, request);
  if (greeted) {
    std::lock_guard<std::mutex> lock(mu_);
    conn->authenticated = true;
    --pending_;
    ++active_;
  }
  while (greeted) {
    // Idle authenticated connections wait indefinitely; Stop() or the client closing ends it.
    auto far = net::Clock::now() + std::chrono::hours(24 * 365);
    if (!net::RecvFrame(fd, &request, far, stopping).ok()) break;
    if (!Handle(*conn, request)) break;
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (conn->authenticated) {
    --active_;
  } else {
    --pending_;
  }
  for (auto it = claims_.begin(); it != claims_.end();) {
    it = it->second == conn->id ? claims_.erase(it) : std::next(it);
  }
  // Closed under the lock so Stop() never shuts down a reused descriptor.
  ::close(fd);
  conn->done = true;
  cv_.notify_all();
}

bool TcpStoreServer::Hello(int fd, const std::vector<uint8_t>& request) {
  net::Reader in(request);
  uint8_t op = 0;
  std::vector<uint8_t> nonce;
  if (!in.U8(&op) || op != tcp_store::kHello || !in.Bytes(&nonce)) return false;
  uint64_t attempt = 0;  // optional: absent from a client without a restart count
  if (!in.U64(&attempt)) attempt = 0;
  const bool ok =
      nonce.size() == nonce_.size() && ConstantTimeEqual(nonce.data(), nonce_.data(), nonce.size());
  std::vector<uint8_t> reply;
  net::PutU8(&reply, ok ? tcp_store::kOk : tcp_store::kMismatch);
  if (ok) net::PutU64(&reply, instance_);
  // A client that gave its attempt learns the store's, so one of an earlier attempt stops now.
  if (!ok && attempt > 0) net::PutU64(&reply, attempt_);
  return net::SendFrame(fd, reply, net::Clock::now() + tcp_store::kHelloTimeout).ok() && ok;
}

bool TcpStoreServer::HolderHungUp(uint64_t id) const {
  for (const Conn& c : conns_)
    if (c.id == id) return !c.done && net::PeerHungUp(c.fd);
  return false;
}

bool TcpStoreServer::Handle(const Conn& conn, const std::vector<uint8_t>& request) {
  net::Reader in(request);
  uint8_t op = 0;
  if (!in.U8(&op)) return false;
  std::vector<uint8_t> reply;
  const int fd = conn.fd;
  const auto send_deadline = net::Clock::now() + std::chrono::seconds(30);
  auto refuse = [&](uint8_t status, const std::string& what) {
    net::PutU8(&reply, status);
    net::PutBytes(&reply, what.data(), what.size());
  };
  if (op == tcp_store::kClaim) {
    std::string name;
    if (!in.String(&name)) return false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = claims_.find(name);
      if (it != claims_.end() && it->second != conn.id && HolderHungUp(it->second)) {
        // Its process died (a restart comes within the hang-up check's interval of the kill):
        // the name is free; the old connection's thread, when it ends, releases only its own.
        claims_.erase(it);
        it = claims_.end();
      }
      if (!conflict_.empty()) {
        refuse(tcp_store::kConflict, conflict_);
      } else if (it == claims_.end() || it->second == conn.id) {
        claims_[name] = conn.id;
        net::PutU8(&reply, tcp_store::kOk);
      } else {
        conflict_ = name;
        refuse(tcp_store::kTaken, name);
      }
    }
    cv_.notify_all();
    return net::SendFrame(fd, reply, send_deadline).ok();
  }
  if (op == tcp_store::kSet) {
    std::string key;
    std::vector<uint8_t> value;
    if (!in.String(&key) || !in.Bytes(&value)) return false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (conflict_.empty()) {
        data_[key] = std::move(value);
        net::PutU8(&reply, tcp_store::kOk);
      } else {
        refuse(tcp_store::kConflict, conflict_);
      }
    }
    cv_.notify_all();
    return net::SendFrame(fd, reply, send_deadline).ok();
  }
  if (op == tcp_store::kGet || op == tcp_store::kWait) {
    std::vector<std::string> keys;
    uint64_t n = 1, timeout_ms = 0;
    if (op == tcp_store::kWait && !in.U64(&n)) return false;
    for (uint64_t i = 0; i < n; ++i) {
      std::string key;
      if (!in.String(&key)) return false;
      keys.push_back(std::move(key));
    }
    if (!in.U64(&timeout_ms)) return false;
    std::unique_lock<std::mutex> lock(mu_);
    std::string missing;
    auto ready = [&] {
      for (const auto& k : keys) {
        if (data_.count(k) == 0) {
          missing = k;
          return false;
        }
      }
      return true;
    };
    // A year caps what a (trusted, authenticated) client may ask, so the deadline never wraps.
    timeout_ms = std::min<uint64_t>(timeout_ms, uint64_t{365} * 24 * 3600 * 1000);
    const auto deadline = net::Clock::now() + std::chrono::milliseconds(timeout_ms);
    auto done = [&] { return ready() || stop_.load() || !conflict_.empty(); };
    bool ok = false;
    while (
        !(ok = cv_.wait_until(lock, std::min(deadline, net::Clock::now() + kHangUpCheck), done)) &&
        net::Clock::now() < deadline) {
      // A client that hung up while it waited (its process killed) ends its connection now,
      // releasing the rank it claimed for a restarted process, not when its wait would have.
      if (net::PeerHungUp(fd)) return false;
    }
    ok = ok && !stop_.load();
    if (stop_.load()) return false;
    if (!conflict_.empty()) {
      refuse(tcp_store::kConflict, conflict_);
    } else if (ok) {
      net::PutU8(&reply, tcp_store::kOk);
      if (op == tcp_store::kGet)
        net::PutBytes(&reply, data_[keys[0]].data(), data_[keys[0]].size());
    } else {
      refuse(tcp_store::kTimedOut, missing);
    }
    lock.unlock();
    return net::SendFrame(fd, reply, send_deadline).ok();
  }
  return false;
}

}  // namespace shardrec::comm
