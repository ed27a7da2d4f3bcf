// POSIX socket helpers for the TCP store.
#include "impl/comm/rendezvous/socket_util.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>

#include "impl/core/check.h"

namespace shardrec::comm::net {

namespace {

socklen_t ToSockaddr(const Endpoint& e, sockaddr_storage* ss) {
  std::memset(ss, 0, sizeof(*ss));
  if (e.family == AF_INET6) {
    auto* s6 = reinterpret_cast<sockaddr_in6*>(ss);
    s6->sin6_family = AF_INET6;
    s6->sin6_port = htons(e.port);
    std::memcpy(&s6->sin6_addr, e.addr, 16);
    return sizeof(sockaddr_in6);
  }
  auto* s4 = reinterpret_cast<sockaddr_in*>(ss);
  s4->sin_family = AF_INET;
  s4->sin_port = htons(e.port);
  std::memcpy(&s4->sin_addr, e.addr, 4);
  return sizeof(sockaddr_in);
}

int MsLeft(Clock::time_point deadline) {
  auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  if (left < 0) return 0;
  return left > 100 ? 100 : static_cast<int>(left);  // wake regularly to check `stop`
}

}  // namespace

std::string Endpoint::HostString() const {
  char buf[INET6_ADDRSTRLEN] = {};
  inet_ntop(family == AF_INET6 ? AF_INET6 : AF_INET, addr, buf, sizeof(buf));
  return buf;
}

std::string Endpoint::ToString() const {
  // StrCat rather than operator+ chains: GCC 12 reports a false -Wrestrict on those.
  return family == AF_INET6 ? StrCat('[', HostString(), "]:", port)
                            : StrCat(HostString(), ':', port);
}

Status ParseHost(const std::string& host, Endpoint* out) {
  Endpoint e;
  if (inet_pton(AF_INET, host.c_str(), e.addr) == 1) {
    e.family = AF_INET;
  } else if (inet_pton(AF_INET6, host.c_str(), e.addr) == 1) {
    e.family = AF_INET6;
  } else {
    return Status::InvalidArgument("address '", host, "' is not a numeric IPv4 or IPv6 address");
  }
  *out = e;
  return Status::Ok();
}

Status DefaultAdvertisedHost(Endpoint* out) {
  if (const char* env = std::getenv("SHARDREC_SOCKET_IFADDR"); env != nullptr && *env != '\0') {
    Status s = ParseHost(env, out);
    if (!s.ok()) return s.WithContext("SHARDREC_SOCKET_IFADDR");
    return Status::Ok();
  }
  // Connecting a UDP socket sends nothing; it only asks the kernel which source address the
  // default route would use.
  int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd >= 0) {
    Endpoint probe;
    (void)ParseHost("192.0.2.1", &probe);  // TEST-NET-1, never routed anywhere real
    probe.port = 9;
    sockaddr_storage ss;
    socklen_t len = ToSockaddr(probe, &ss);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&ss), len) == 0) {
      sockaddr_in local{};
      socklen_t llen = sizeof(local);
      if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &llen) == 0 &&
          local.sin_addr.s_addr != htonl(INADDR_ANY)) {
        ::close(fd);
        out->family = AF_INET;
        std::memcpy(out->addr, &local.sin_addr, 4);
        return Status::Ok();
      }
    }
    ::close(fd);
  }
  return ParseHost("127.0.0.1", out);
}

Status ResolveHost(const std::string& host, Endpoint* out) {
  if (ParseHost(host, out).ok()) return Status::Ok();
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &res);
  if (rc != 0 || res == nullptr) {
    return Status::InvalidArgument("cannot resolve host '", host, "': ", ::gai_strerror(rc));
  }
  const addrinfo* pick = nullptr;
  for (const addrinfo* a = res; a != nullptr; a = a->ai_next) {
    if (a->ai_family == AF_INET) {
      pick = a;
      break;
    }
    if (a->ai_family == AF_INET6 && pick == nullptr) pick = a;
  }
  Endpoint e;
  if (pick != nullptr && pick->ai_family == AF_INET) {
    e.family = AF_INET;
    std::memcpy(e.addr, &reinterpret_cast<const sockaddr_in*>(pick->ai_addr)->sin_addr, 4);
  } else if (pick != nullptr) {
    e.family = AF_INET6;
    std::memcpy(e.addr, &reinterpret_cast<const sockaddr_in6*>(pick->ai_addr)->sin6_addr, 16);
  }
  ::freeaddrinfo(res);
  if (pick == nullptr) return Status::InvalidArgument("host '", host, "' has no IP address");
  *out = e;
  return Status::Ok();
}

namespace {

// One ResolveHost of a name, given up at `deadline`: getaddrinfo takes no timeout (a resolver
// that does not answer holds it for its own retries, seconds each), so it runs on a detached
// thread that finishes on its own; the caller leaves on time. kTimeout when it has not answered.
Status ResolveOnceBy(const std::string& host, std::chrono::steady_clock::time_point deadline,
                     Endpoint* out) {
  struct Lookup {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    Status status;
    Endpoint endpoint;
  };
  auto lookup = std::make_shared<Lookup>();
  std::thread([lookup, host] {
    Endpoint e;
    Status s = ResolveHost(host, &e);
    std::lock_guard<std::mutex> hold(lookup->mu);
    lookup->status = std::move(s);
    lookup->endpoint = e;
    lookup->done = true;
    lookup->cv.notify_all();
  }).detach();
  std::unique_lock<std::mutex> hold(lookup->mu);
  if (!lookup->cv.wait_until(hold, deadline, [&] { return lookup->done; }))
    return Status::Timeout("the resolver did not answer");
  if (lookup->status.ok()) *out = lookup->endpoint;
  return lookup->status;
}

}  // namespace

Status ResolveHostBy(const std::string& host, std::chrono::steady_clock::time_point deadline,
                     Endpoint* out) {
  if (ParseHost(host, out).ok()) return Status::Ok();
  // Back off from 50 ms to 1 s: a resolver that fails at once is asked a few times a second,
  // and the last wait is cut to the deadline so the call ends on time.
  auto pause = std::chrono::milliseconds(50);
  // The resolver's last answer is what the error names: the final attempt, cut short by the
  // deadline, ends as "did not answer" even when every earlier one was answered at once.
  Status answered;
  for (;;) {
    Status s = ResolveOnceBy(host, deadline, out);
    if (s.ok()) return s;
    if (s.code() != Code::kTimeout) answered = s;
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) {
      return Status::Timeout("host '", host, "' did not resolve within the timeout (",
                             answered.ok() ? s.message() : answered.message(), ")");
    }
    std::this_thread::sleep_for(
        std::min<std::chrono::steady_clock::duration>(pause, deadline - now));
    pause = std::min(pause * 2, std::chrono::milliseconds(1000));
  }
}

Status Listen(const Endpoint& addr, bool any_interface, int* fd_out, uint16_t* port,
              uint16_t want_port, bool* in_use) {
  if (in_use != nullptr) *in_use = false;
  const int family = addr.family;
  int fd = ::socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Status::Io("socket: ", std::strerror(errno));
  int on = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
  Endpoint local;
  local.family = family;  // all-zero address: any interface
  local.port = want_port;
  if (!any_interface) std::memcpy(local.addr, addr.addr, sizeof(local.addr));
  sockaddr_storage ss;
  socklen_t len = ToSockaddr(local, &ss);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&ss), len) != 0 || ::listen(fd, 128) != 0) {
    int err = errno;
    ::close(fd);
    if (in_use != nullptr) *in_use = err == EADDRINUSE;
    return Status::Io("cannot listen for the rendezvous store on ",
                      any_interface ? std::string("any interface") : local.HostString(),
                      want_port != 0 ? StrCat(" port ", want_port) : std::string(), ": ",
                      std::strerror(err),
                      any_interface ? ""
                                    : " (set SHARDREC_SOCKET_IFADDR to a local address, or "
                                      "SHARDREC_STORE_BIND_ANY=1 to listen on every interface)");
  }
  sockaddr_storage bound{};
  socklen_t blen = sizeof(bound);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &blen);
  *port = family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
                             : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  *fd_out = fd;
  return Status::Ok();
}

Status ConnectWithRetry(const Endpoint& to, Clock::time_point deadline, int* fd_out,
                        bool retry_refused) {
  sockaddr_storage ss;
  socklen_t len = ToSockaddr(to, &ss);
  std::string last = "no attempt";
  do {
    int fd = ::socket(to.family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) return Status::Io("socket: ", std::strerror(errno));
    int rc = ::connect(fd, reinterpret_cast<sockaddr*>(&ss), len);
    if (rc != 0 && errno == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      int left = static_cast<int>(std::max<int64_t>(
          0,
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count()));
      rc = ::poll(&p, 1, std::min(left, 1000)) == 1 ? 0 : -1;
      int err = 0;
      socklen_t elen = sizeof(err);
      if (rc == 0) ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &elen);
      if (rc != 0 || err != 0) {
        errno = rc != 0 ? ETIMEDOUT : err;
        rc = -1;
      }
    }
    if (rc == 0) {
      int flags = ::fcntl(fd, F_GETFL);
      ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
      int on = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof(on));
      *fd_out = fd;
      return Status::Ok();
    }
    const int err = errno;
    last = std::strerror(err);
    ::close(fd);
    if (!retry_refused && err == ECONNREFUSED)
      return Status::Remote("the rendezvous store at ", to.ToString(),
                            " refused the connection: ", last);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  } while (Clock::now() < deadline);
  return Status::Timeout("could not connect to the rendezvous store at ", to.ToString(), ": ",
                         last);
}

Status LocalHost(int fd, std::string* host) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) {
    return Status::Io("getsockname: ", std::strerror(errno));
  }
  char buf[INET6_ADDRSTRLEN] = {};
  if (ss.ss_family == AF_INET6) {
    inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(&ss)->sin6_addr, buf, sizeof(buf));
  } else {
    inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(&ss)->sin_addr, buf, sizeof(buf));
  }
  *host = buf;
  return Status::Ok();
}

Status SendAll(int fd, const void* data, size_t len, Clock::time_point deadline) {
  const char* p = static_cast<const char*>(data);
  while (len > 0) {
    ssize_t n = ::send(fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      p += n;
      len -= static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (Clock::now() >= deadline)
        return Status::Timeout("sending to the rendezvous store timed out");
      pollfd pfd{fd, POLLOUT, 0};
      ::poll(&pfd, 1, MsLeft(deadline));
      continue;
    }
    return Status::Remote("the rendezvous store connection failed: ", std::strerror(errno));
  }
  return Status::Ok();
}

Status RecvAll(int fd, void* data, size_t len, Clock::time_point deadline,
               const std::function<bool()>& stop) {
  char* p = static_cast<char*>(data);
  while (len > 0) {
    pollfd pfd{fd, POLLIN, 0};
    int rc = ::poll(&pfd, 1, MsLeft(deadline));
    if (rc < 0 && errno != EINTR) return Status::Io("poll: ", std::strerror(errno));
    if (rc <= 0) {
      if (stop && stop()) return Status::InvalidUsage("the store connection was shut down");
      if (Clock::now() >= deadline)
        return Status::Timeout("no reply from the rendezvous store in time");
      continue;
    }
    ssize_t n = ::recv(fd, p, len, 0);
    if (n > 0) {
      p += n;
      len -= static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    return Status::Remote(n == 0 ? "the rendezvous store peer closed the connection"
                                 : std::string("the rendezvous store connection failed: ") +
                                       std::strerror(errno));
  }
  return Status::Ok();
}

Status SendFrame(int fd, const std::vector<uint8_t>& payload, Clock::time_point deadline) {
  std::vector<uint8_t> buf(4 + payload.size());
  const uint32_t n = static_cast<uint32_t>(payload.size());
  for (int i = 0; i < 4; ++i) buf[i] = static_cast<uint8_t>(n >> (8 * i));
  if (!payload.empty()) std::memcpy(buf.data() + 4, payload.data(), payload.size());
  return SendAll(fd, buf.data(), buf.size(), deadline);
}

Status RecvFrame(int fd, std::vector<uint8_t>* payload, Clock::time_point deadline,
                 const std::function<bool()>& stop, size_t max_len) {
  uint8_t hdr[4];
  SR_RETURN_IF_ERROR(RecvAll(fd, hdr, 4, deadline, stop));
  uint32_t n = 0;
  for (int i = 0; i < 4; ++i) n |= static_cast<uint32_t>(hdr[i]) << (8 * i);
  if (n > max_len) return Status::Corrupt("rendezvous store message of ", n, " bytes is too large");
  payload->resize(n);
  return n == 0 ? Status::Ok() : RecvAll(fd, payload->data(), n, deadline, stop);
}

bool PeerHungUp(int fd) {
  pollfd p{fd, POLLRDHUP, 0};
  return ::poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
}

void CloseFd(int* fd) {
  if (*fd >= 0) ::close(*fd);
  *fd = -1;
}

void PutU8(std::vector<uint8_t>* b, uint8_t v) { b->push_back(v); }

void PutU64(std::vector<uint8_t>* b, uint64_t v) {
  for (int i = 0; i < 8; ++i) b->push_back(static_cast<uint8_t>(v >> (8 * i)));
}

void PutBytes(std::vector<uint8_t>* b, const void* data, size_t len) {
  PutU64(b, len);
  const uint8_t* p = static_cast<const uint8_t*>(data);
  b->insert(b->end(), p, p + len);
}

bool Reader::U8(uint8_t* v) {
  if (pos_ + 1 > b_.size()) return false;
  *v = b_[pos_++];
  return true;
}

bool Reader::U64(uint64_t* v) {
  if (pos_ + 8 > b_.size()) return false;
  *v = 0;
  for (int i = 0; i < 8; ++i) *v |= static_cast<uint64_t>(b_[pos_ + i]) << (8 * i);
  pos_ += 8;
  return true;
}

bool Reader::Bytes(std::vector<uint8_t>* v) {
  uint64_t n = 0;
  if (!U64(&n) || n > b_.size() - pos_) return false;
  v->assign(b_.begin() + static_cast<ptrdiff_t>(pos_),
            b_.begin() + static_cast<ptrdiff_t>(pos_ + n));
  pos_ += n;
  return true;
}

bool Reader::String(std::string* v) {
  std::vector<uint8_t> b;
  if (!Bytes(&b)) return false;
  v->assign(b.begin(), b.end());
  return true;
}

}  // namespace shardrec::comm::net
