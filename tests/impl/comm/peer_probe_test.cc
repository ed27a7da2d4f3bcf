// The connection probe that names the peers a timed-out collective was cut off from: reachable
// hosts (listening or refusing), one that does not answer, Gloo's address bytes, the wording.
#include "impl/comm/peer_probe.h"

#include <arpa/inet.h>
#include <gloo/transport/tcp/address.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstring>

namespace shardrec::comm {
namespace {

using std::chrono::milliseconds;

PeerAddress Loopback(int rank, uint16_t port) {
  PeerAddress p;
  p.rank = rank;
  auto* in = reinterpret_cast<sockaddr_in*>(&p.addr);
  in->sin_family = AF_INET;
  in->sin_port = htons(port);
  in->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  p.host = "127.0.0.1";
  return p;
}

// A listening socket on 127.0.0.1 with an ephemeral port; `backlog` as given.
int ListenOn(int backlog, uint16_t* port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  EXPECT_EQ(::listen(fd, backlog), 0);
  socklen_t len = sizeof(a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  *port = ntohs(a.sin_port);
  return fd;
}

TEST(CommPeerProbe, ListeningAndRefusingHostsAreReachable) {
  uint16_t open_port = 0;
  const int listener = ListenOn(16, &open_port);
  // A port bound but not listening refuses: the host answered, so it is reachable too.
  const int closed = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(closed, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  socklen_t len = sizeof(a);
  ::getsockname(closed, reinterpret_cast<sockaddr*>(&a), &len);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_TRUE(
      UnreachablePeers({Loopback(1, open_port), Loopback(2, ntohs(a.sin_port))}, milliseconds(2000))
          .empty());
  // Answers come at once: the budget is a bound, not a wait.
  EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(1000));
  ::close(closed);
  ::close(listener);
}

TEST(CommPeerProbe, AHostThatDoesNotAnswerIsNamedWithinTheBudget) {
  // A listener whose accept queue is full drops further connection requests unanswered, as a
  // host behind a downed link does.
  uint16_t port = 0;
  const int listener = ListenOn(0, &port);
  std::vector<int> fillers;
  for (int i = 0; i < 4; ++i) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    PeerAddress p = Loopback(0, port);
    ::connect(fd, reinterpret_cast<sockaddr*>(&p.addr), sizeof(sockaddr_in));
    fillers.push_back(fd);
  }
  ::usleep(50 * 1000);
  const auto start = std::chrono::steady_clock::now();
  const std::vector<int> lost = UnreachablePeers({Loopback(3, port)}, milliseconds(200));
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(lost, std::vector<int>{3});
  EXPECT_GE(took, milliseconds(150));
  EXPECT_LT(took, milliseconds(1500));
  for (int fd : fillers) ::close(fd);
  ::close(listener);
}

TEST(CommPeerProbe, ReadsGlooTcpAddressBytes) {
  PeerAddress want = Loopback(0, 4242);
  const gloo::transport::tcp::Address gloo_address(want.addr, 7);
  PeerAddress got;
  ASSERT_TRUE(ParseGlooTcpAddress(5, gloo_address.bytes(), &got));
  EXPECT_EQ(got.rank, 5);
  EXPECT_EQ(got.host, "127.0.0.1");
  EXPECT_EQ(ntohs(reinterpret_cast<const sockaddr_in*>(&got.addr)->sin_port), 4242);
  EXPECT_FALSE(ParseGlooTcpAddress(5, std::vector<char>(3, 'x'), &got));
}

TEST(CommPeerProbe, DescribesRanksGroupedByHost) {
  std::vector<PeerAddress> peers;
  for (int r : {1, 2, 3, 5}) {
    PeerAddress p = Loopback(r, 1);
    p.host = r < 4 ? "10.0.0.2" : "10.0.0.3";
    peers.push_back(p);
  }
  EXPECT_EQ(DescribePeers({3, 5, 2}, peers), "ranks 2, 3 at 10.0.0.2; rank 5 at 10.0.0.3");
  EXPECT_EQ(DescribePeers({9}, peers), "rank 9");
}

}  // namespace
}  // namespace shardrec::comm
