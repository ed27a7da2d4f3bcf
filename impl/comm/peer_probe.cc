// Connection probes for a timed-out collective (peer_probe.h).
#include "impl/comm/peer_probe.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <gloo/transport/tcp/address.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <map>

namespace shardrec::comm {

namespace {

using Clock = std::chrono::steady_clock;

socklen_t SockaddrLength(const sockaddr_storage& ss) {
  return ss.ss_family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
}

// An error that says the host itself could not be reached, rather than that it answered.
bool MeansUnreachable(int err) {
  return err == EHOSTUNREACH || err == ENETUNREACH || err == ETIMEDOUT || err == EHOSTDOWN ||
         err == ENETDOWN;
}

}  // namespace

bool ParseGlooTcpAddress(int rank, const std::vector<char>& bytes, PeerAddress* out) {
  if (bytes.size() != gloo::transport::tcp::Address().bytes().size()) return false;
  gloo::transport::tcp::Address parsed(bytes);
  const sockaddr_storage& ss = parsed.getSockaddr();
  char text[INET6_ADDRSTRLEN] = {};
  const void* ip = nullptr;
  if (ss.ss_family == AF_INET) {
    ip = &reinterpret_cast<const sockaddr_in*>(&ss)->sin_addr;
  } else if (ss.ss_family == AF_INET6) {
    ip = &reinterpret_cast<const sockaddr_in6*>(&ss)->sin6_addr;
  } else {
    return false;
  }
  if (::inet_ntop(ss.ss_family, ip, text, sizeof(text)) == nullptr) return false;
  out->rank = rank;
  out->addr = ss;
  out->host = text;
  return true;
}

std::vector<int> UnreachablePeers(const std::vector<PeerAddress>& peers,
                                  std::chrono::milliseconds budget) {
  struct Probe {
    int rank;
    int fd;
  };
  std::vector<Probe> pending;
  std::vector<int> unreachable;
  for (const PeerAddress& p : peers) {
    const int fd = ::socket(p.addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    const int rc =
        ::connect(fd, reinterpret_cast<const sockaddr*>(&p.addr), SockaddrLength(p.addr));
    if (rc == 0 || (rc < 0 && errno == ECONNREFUSED)) {
      ::close(fd);
    } else if (rc < 0 && errno == EINPROGRESS) {
      pending.push_back({p.rank, fd});
    } else {
      if (MeansUnreachable(errno)) unreachable.push_back(p.rank);
      ::close(fd);
    }
  }
  const auto deadline = Clock::now() + budget;
  while (!pending.empty()) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) break;
    std::vector<pollfd> fds;
    for (const Probe& p : pending) fds.push_back({p.fd, POLLOUT, 0});
    const int n = ::poll(fds.data(), fds.size(), static_cast<int>(left));
    if (n < 0 && errno != EINTR) break;
    std::vector<Probe> still;
    for (size_t i = 0; i < pending.size(); ++i) {
      if (fds[i].revents == 0) {
        still.push_back(pending[i]);
        continue;
      }
      int err = 0;
      socklen_t len = sizeof(err);
      ::getsockopt(pending[i].fd, SOL_SOCKET, SO_ERROR, &err, &len);
      if (MeansUnreachable(err)) unreachable.push_back(pending[i].rank);
      ::close(pending[i].fd);
    }
    pending.swap(still);
  }
  // Neither accepted nor refused within the budget: the host did not answer.
  for (const Probe& p : pending) {
    unreachable.push_back(p.rank);
    ::close(p.fd);
  }
  std::sort(unreachable.begin(), unreachable.end());
  return unreachable;
}

std::string DescribePeers(const std::vector<int>& ranks, const std::vector<PeerAddress>& peers) {
  std::map<int, std::string> host_of;
  for (const PeerAddress& p : peers) host_of[p.rank] = p.host;
  // Hosts in the order of their first rank, each with its ranks.
  std::vector<std::pair<std::string, std::vector<int>>> groups;
  std::vector<int> sorted(ranks);
  std::sort(sorted.begin(), sorted.end());
  for (int r : sorted) {
    auto it = host_of.find(r);
    const std::string host = it == host_of.end() ? std::string() : it->second;
    auto g = std::find_if(groups.begin(), groups.end(),
                          [&](const auto& entry) { return entry.first == host; });
    if (g == groups.end()) {
      groups.push_back({host, {r}});
    } else {
      g->second.push_back(r);
    }
  }
  std::string out;
  for (const auto& [host, rs] : groups) {
    if (!out.empty()) out += "; ";
    out += rs.size() == 1 ? "rank " : "ranks ";
    for (size_t i = 0; i < rs.size(); ++i) out += (i ? ", " : "") + std::to_string(rs[i]);
    if (!host.empty()) out += " at " + host;
  }
  return out;
}

}  // namespace shardrec::comm
