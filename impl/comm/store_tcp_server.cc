// The TCP store server: accept loop plus one thread per client connection.
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>

#include "impl/comm/store_tcp.h"
#include "impl/comm/store_tcp_protocol.h"
#include "impl/core/check.h"

namespace shardrec::comm {

Status TcpStoreServer::Start(int family, const Nonce& nonce, std::shared_ptr<TcpStoreServer>* out) {
  int fd = -1;
  uint16_t port = 0;
  SR_RETURN_IF_ERROR(net::Listen(family, &fd, &port));
  std::shared_ptr<TcpStoreServer> server(new TcpStoreServer(fd, port, nonce));
  server->accept_thread_ = std::thread([s = server.get()] { s->AcceptLoop(); });
  *out = std::move(server);
  return Status::Ok();
}

TcpStoreServer::~TcpStoreServer() { Stop(); }

void TcpStoreServer::Stop() {
  if (stop_.exchange(true)) return;
  cv_.notify_all();
  if (accept_thread_.joinable()) accept_thread_.join();
  std::vector<std::thread> threads;
  {
    std::lock_guard<std::mutex> lock(mu_);
    // Shutting the sockets down wakes clients blocked on a reply; they see kRemote.
    for (int fd : conn_fds_) ::shutdown(fd, SHUT_RDWR);
    threads.swap(conn_threads_);
  }
  cv_.notify_all();
  for (auto& t : threads) t.join();
  net::CloseFd(&listen_fd_);
}

bool TcpStoreServer::WaitForClients(int max_clients, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_for(lock, timeout, [&] { return active_ <= max_clients || stop_.load(); });
}

void TcpStoreServer::AcceptLoop() {
  while (!stop_.load()) {
    pollfd p{listen_fd_, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_.load()) {
      net::CloseFd(&fd);
      break;
    }
    ++active_;
    conn_fds_.push_back(fd);
    conn_threads_.emplace_back([this, fd] { Serve(fd); });
  }
}

void TcpStoreServer::Serve(int fd) {
  bool greeted = false;
  std::vector<uint8_t> request;
  auto stopping = [this] { return stop_.load(); };
  for (;;) {
    // Idle connections wait indefinitely; Stop() or the client closing ends the loop.
    auto far = net::Clock::now() + std::chrono::hours(24 * 365);
    if (!net::RecvFrame(fd, &request, far, stopping).ok()) break;
    if (!Handle(fd, request, &greeted)) break;
  }
  std::lock_guard<std::mutex> lock(mu_);
  --active_;
  // The fd is closed here under the lock so Stop() never shuts down a reused descriptor.
  conn_fds_.erase(std::remove(conn_fds_.begin(), conn_fds_.end(), fd), conn_fds_.end());
  ::close(fd);
  cv_.notify_all();
}

bool TcpStoreServer::Handle(int fd, const std::vector<uint8_t>& request, bool* greeted) {
  net::Reader in(request);
  uint8_t op = 0;
  if (!in.U8(&op)) return false;
  std::vector<uint8_t> reply;
  const auto send_deadline = net::Clock::now() + std::chrono::seconds(30);
  if (op == tcp_store::kHello) {
    std::vector<uint8_t> nonce;
    if (!in.Bytes(&nonce)) return false;
    *greeted =
        nonce.size() == nonce_.size() && std::equal(nonce.begin(), nonce.end(), nonce_.begin());
    net::PutU8(&reply, *greeted ? tcp_store::kOk : tcp_store::kMismatch);
    return net::SendFrame(fd, reply, send_deadline).ok() && *greeted;
  }
  if (!*greeted) return false;
  if (op == tcp_store::kSet) {
    std::string key;
    std::vector<uint8_t> value;
    if (!in.String(&key) || !in.Bytes(&value)) return false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      data_[key] = std::move(value);
    }
    cv_.notify_all();
    net::PutU8(&reply, tcp_store::kOk);
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
    const bool ok = cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), [&] {
      return ready() || stop_.load();
    }) && !stop_.load();
    if (stop_.load()) return false;
    if (ok) {
      net::PutU8(&reply, tcp_store::kOk);
      if (op == tcp_store::kGet)
        net::PutBytes(&reply, data_[keys[0]].data(), data_[keys[0]].size());
    } else {
      net::PutU8(&reply, tcp_store::kTimedOut);
      net::PutBytes(&reply, missing.data(), missing.size());
    }
    lock.unlock();
    return net::SendFrame(fd, reply, send_deadline).ok();
  }
  return false;
}

}  // namespace shardrec::comm
