// The rendezvous store under hostile clients: frames before authentication are small and
// short-lived, connections are bounded, the server listens only where it is advertised, idle
// strangers do not hold up rank 0's teardown, and a rank claimed twice refuses the session on
// every side within the timeout.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <functional>
#include <mutex>
#include <thread>

#include "impl/comm/factory.h"
#include "impl/comm/rendezvous/store_tcp_protocol.h"
#include "impl/comm/rendezvous/unique_id.h"
#include "tests/support/slowdown.h"
#include "tests/support/spawn_ranks.h"

namespace shardrec::comm {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

std::vector<uint8_t> Bytes(const std::string& s) { return {s.begin(), s.end()}; }

long ResidentKiB() {
  long pages = 0, resident = 0;
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return -1;
  if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = -1;
  std::fclose(f);
  return resident * (sysconf(_SC_PAGESIZE) / 1024);
}

// A raw TCP connection to the store, as a stranger would open it.
int RawConnect(const net::Endpoint& e) {
  int fd = -1;
  Status s = net::ConnectWithRetry(e, Clock::now() + milliseconds(2000), &fd);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return fd;
}

// Waits until the server closes fd (recv sees EOF or a reset); false if it stays open.
bool ClosedByServerWithin(int fd, milliseconds limit) {
  uint8_t b[64];
  Status s = net::RecvAll(fd, b, sizeof(b), Clock::now() + limit);
  return s.code() == Code::kRemote;
}

struct Session {
  UniqueId id;
  net::Endpoint server;
  Nonce nonce;
};

Session NewSession() {
  Session s;
  EXPECT_TRUE(CreateUniqueId(&s.id).ok());
  EXPECT_TRUE(DecodeUniqueId(s.id, &s.server, &s.nonce).ok());
  return s;
}

TEST(StoreHardening, OversizedFrameBeforeHelloCostsNoMemory) {
  Session session = NewSession();
  const long before = ResidentKiB();
  std::vector<int> fds;
  for (int i = 0; i < 8; ++i) {
    int fd = RawConnect(session.server);
    const uint8_t len[4] = {0x00, 0x00, 0x00, 0x10};  // 256 MiB announced, nothing sent
    ASSERT_TRUE(net::SendAll(fd, len, 4, Clock::now() + milliseconds(1000)).ok());
    fds.push_back(fd);
  }
  for (int fd : fds) {
    EXPECT_TRUE(ClosedByServerWithin(fd, milliseconds(2000)));
    ::close(fd);
  }
  const long after = ResidentKiB();
  // Eight honoured length prefixes would have cost 2 GiB; allow thread stacks and noise.
  EXPECT_LT(after - before, 16 * 1024) << before << " KiB -> " << after << " KiB";
  std::shared_ptr<TcpStore> owner;
  ASSERT_TRUE(ConnectUniqueIdStore(session.id, 0, milliseconds(2000), &owner).ok());
}

TEST(StoreHardening, SilentStrangerIsClosedAfterTheHelloDeadline) {
  Session session = NewSession();
  std::shared_ptr<TcpStore> owner;
  ASSERT_TRUE(ConnectUniqueIdStore(session.id, 0, milliseconds(2000), &owner).ok());
  int fd = RawConnect(session.server);
  const auto start = Clock::now();
  EXPECT_TRUE(ClosedByServerWithin(fd, tcp_store::kHelloTimeout + milliseconds(2000)));
  EXPECT_GE(Clock::now() - start, tcp_store::kHelloTimeout - milliseconds(200));
  ::close(fd);
  // A wrong nonce is answered and closed at once.
  std::shared_ptr<TcpStore> stranger;
  Nonce wrong = session.nonce;
  wrong[15] ^= 0x80;
  EXPECT_EQ(TcpStore::Connect(session.server, wrong, milliseconds(2000), nullptr, &stranger).code(),
            Code::kRemote);
}

TEST(StoreHardening, UnauthenticatedConnectionsAreBoundedAndRanksStillGetIn) {
  Session session = NewSession();
  std::vector<int> fds;
  for (int i = 0; i < tcp_store::kMaxPending + 16; ++i) fds.push_back(RawConnect(session.server));
  std::this_thread::sleep_for(milliseconds(300));
  // The ones over the bound were closed on accept.
  int closed = 0;
  for (int fd : fds) closed += ClosedByServerWithin(fd, milliseconds(1)) ? 1 : 0;
  EXPECT_GE(closed, 16);
  // A real rank retries until the strangers' slots expire, well within its timeout.
  const auto start = Clock::now();
  std::shared_ptr<TcpStore> rank1;
  Status s = ConnectUniqueIdStore(session.id, 1, milliseconds(10000), &rank1);
  EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_LT(Clock::now() - start, tcp_store::kHelloTimeout + milliseconds(3000));
  for (int fd : fds) ::close(fd);
  std::shared_ptr<TcpStore> owner;
  ASSERT_TRUE(ConnectUniqueIdStore(session.id, 0, milliseconds(2000), &owner).ok());
  rank1.reset();
}

// Whether a plain connect to host:port is accepted.
bool Accepts(const std::string& host, uint16_t port) {
  net::Endpoint e;
  EXPECT_TRUE(net::ParseHost(host, &e).ok());
  e.port = port;
  int fd = -1;
  Status s = net::ConnectWithRetry(e, Clock::now() + milliseconds(200), &fd);
  net::CloseFd(&fd);
  return s.ok();
}

TEST(StoreHardening, ListensOnTheAdvertisedAddressUnlessAskedForAny) {
  net::Endpoint loop;
  ASSERT_TRUE(net::ParseHost("127.0.0.1", &loop).ok());
  Nonce nonce{};
  std::shared_ptr<TcpStoreServer> only, any;
  ASSERT_TRUE(TcpStoreServer::Start(loop, false, nonce, &only).ok());
  ASSERT_TRUE(TcpStoreServer::Start(loop, true, nonce, &any).ok());
  EXPECT_TRUE(Accepts("127.0.0.1", only->port()));
  EXPECT_FALSE(Accepts("127.0.0.2", only->port()));  // another loopback address: not bound
  EXPECT_TRUE(Accepts("127.0.0.2", any->port()));
  // A unique id's store listens on the address the id advertises.
  Session session = NewSession();
  const std::string other = session.server.HostString() == "127.0.0.2" ? "127.0.0.3" : "127.0.0.2";
  EXPECT_TRUE(Accepts(session.server.HostString(), session.server.port));
  EXPECT_FALSE(Accepts(other, session.server.port));
  std::shared_ptr<TcpStore> owner;
  ASSERT_TRUE(ConnectUniqueIdStore(session.id, 0, milliseconds(2000), &owner).ok());
}

TEST(StoreHardening, IdleStrangerDoesNotHoldUpRankZerosDestroy) {
  Session session = NewSession();
  std::shared_ptr<TcpStore> owner, rank1;
  ASSERT_TRUE(ConnectUniqueIdStore(session.id, 0, milliseconds(5000), &owner).ok());
  ASSERT_TRUE(ConnectUniqueIdStore(session.id, 1, milliseconds(5000), &rank1).ok());
  int idle = RawConnect(session.server);  // connects and says nothing
  std::this_thread::sleep_for(milliseconds(100));
  rank1.reset();
  owner->set_linger(milliseconds(5000));
  const auto start = Clock::now();
  owner.reset();  // only the authenticated rank 1 counted, and it has left
  EXPECT_LT(Clock::now() - start, milliseconds(1000));
  ::close(idle);
}

TEST(StoreHardening, SecondClaimOfARankIsRefusedOnBothSides) {
  Session session = NewSession();
  std::shared_ptr<TcpStore> owner, first, second;
  ASSERT_TRUE(ConnectUniqueIdStore(session.id, 0, milliseconds(5000), &owner).ok());
  ASSERT_TRUE(ConnectUniqueIdStore(session.id, 1, milliseconds(5000), &first).ok());
  std::vector<uint8_t> v;
  Status blocked;
  std::thread waiter([&] { blocked = first->Get("never", milliseconds(5000), &v); });
  std::this_thread::sleep_for(milliseconds(100));
  const auto start = Clock::now();
  Status s = ConnectUniqueIdStore(session.id, 1, milliseconds(5000), &second);
  EXPECT_EQ(s.code(), Code::kInvalidUsage) << s.ToString();
  EXPECT_NE(s.message().find("rank 1"), std::string::npos) << s.message();
  EXPECT_EQ(second, nullptr);
  waiter.join();
  EXPECT_LT(Clock::now() - start, milliseconds(2000));
  EXPECT_EQ(blocked.code(), Code::kInvalidUsage) << blocked.ToString();
  EXPECT_NE(blocked.message().find("rank 1"), std::string::npos) << blocked.message();
  EXPECT_EQ(first->Set("k", Bytes("v")).code(), Code::kInvalidUsage);
  first.reset();
}

TEST(StoreHardening, ARankFreedByItsHolderCanBeClaimedAgain) {
  Session session = NewSession();
  std::shared_ptr<TcpStore> owner, gone, again;
  ASSERT_TRUE(ConnectUniqueIdStore(session.id, 0, milliseconds(5000), &owner).ok());
  ASSERT_TRUE(ConnectUniqueIdStore(session.id, 1, milliseconds(5000), &gone).ok());
  gone.reset();  // its connection closes, and with it the claim
  std::this_thread::sleep_for(milliseconds(100));
  Status s = ConnectUniqueIdStore(session.id, 1, milliseconds(5000), &again);
  EXPECT_TRUE(s.ok()) << s.ToString();
  again.reset();
}

// A process killed while its connection waited for a key (a rank mid-creation): the server
// used to keep the connection, and the rank it claimed, until that wait's timeout, refusing a
// restarted rank as a duplicate. It notices the hang-up within a fraction of a second now.
TEST(StoreHardening, AKilledClaimantWaitingForAKeyFreesItsRankAtOnce) {
  Session session = NewSession();
  std::shared_ptr<TcpStore> owner, again;
  ASSERT_TRUE(ConnectUniqueIdStore(session.id, 0, milliseconds(5000), &owner).ok());
  int fd = RawConnect(session.server);
  ASSERT_GE(fd, 0);
  const auto deadline = net::Clock::now() + milliseconds(5000);
  auto call = [&](const std::vector<uint8_t>& request) {
    std::vector<uint8_t> reply;
    EXPECT_TRUE(net::SendFrame(fd, request, deadline).ok());
    EXPECT_TRUE(net::RecvFrame(fd, &reply, deadline).ok());
    return reply.empty() ? uint8_t{255} : reply[0];
  };
  std::vector<uint8_t> hello, claim, get;
  net::PutU8(&hello, tcp_store::kHello);
  net::PutBytes(&hello, session.nonce.data(), session.nonce.size());
  ASSERT_EQ(call(hello), tcp_store::kOk);
  const std::string name = "rank 1";
  net::PutU8(&claim, tcp_store::kClaim);
  net::PutBytes(&claim, name.data(), name.size());
  ASSERT_EQ(call(claim), tcp_store::kOk);
  const std::string key = "never";
  net::PutU8(&get, tcp_store::kGet);
  net::PutBytes(&get, key.data(), key.size());
  net::PutU64(&get, 60000);
  ASSERT_TRUE(net::SendFrame(fd, get, deadline).ok());  // waits for a minute on the server
  std::this_thread::sleep_for(milliseconds(100));
  ::close(fd);  // the process dies while its request waits
  const auto start = Clock::now();
  Status s = ConnectUniqueIdStore(session.id, 1, milliseconds(5000), &again);
  EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_LT(Clock::now() - start, milliseconds(2000));
  again.reset();
}

TEST(StoreHardening, DuplicateRankFailsEveryCreateWithinTheTimeout) {
  Session session = NewSession();
  CommOptions opts;
  opts.timeout = milliseconds(2000);
  const int ranks[3] = {1, 1, 0};
  Status results[3];
  milliseconds took[3];
  shardrec::testing::SpawnRanks(3, [&](int i) {
    std::this_thread::sleep_for(milliseconds(100 * i));  // both rank-1 claims before rank 0
    const auto start = Clock::now();
    std::unique_ptr<Communicator> c;
    results[i] = CreateCommunicatorFromUniqueId(session.id, 2, ranks[i], opts, &c);
    took[i] = std::chrono::duration_cast<milliseconds>(Clock::now() - start);
  });
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(results[i].code(), Code::kInvalidUsage) << i << ": " << results[i].ToString();
    EXPECT_NE(results[i].message().find("rank 1"), std::string::npos) << results[i].message();
    EXPECT_LT(took[i], opts.timeout) << i;
  }
}

// Forwards to a rank's store, but once the rank has read its peer's pair addresses (its last
// wait on the store before the data connections) runs `after` once: here, a second process
// claiming rank 1 while the members connect.
class InterceptedStore : public Store {
 public:
  InterceptedStore(std::shared_ptr<Store> inner, std::function<void()> after)
      : inner_(std::move(inner)), after_(std::move(after)) {}
  Status Set(const std::string& key, const std::vector<uint8_t>& value) override {
    return inner_->Set(key, value);
  }
  Status Get(const std::string& key, std::chrono::milliseconds timeout,
             std::vector<uint8_t>* value) override {
    Status s = inner_->Get(key, timeout, value);
    if (s.ok() && key.find("gloo_mesh/") != std::string::npos && after_) {
      after_();
      after_ = nullptr;
    }
    return s;
  }
  Status Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    return inner_->Wait(keys, timeout);
  }
  Status RefusalReason(std::chrono::milliseconds within) override {
    return inner_->RefusalReason(within);
  }

 private:
  std::shared_ptr<Store> inner_;
  std::function<void()> after_;
};

// A rank number claimed a second time while the members' data connections are up (their store
// calls for the addresses all done): every member is refused with the duplicate, none returns a
// communicator. It used to form a world with whichever process had claimed the rank first.
TEST(StoreHardening, DuplicateClaimDuringConnectionRefusesEveryMember) {
  Session session = NewSession();
  CommOptions opts;
  opts.timeout = milliseconds(3000);
  std::mutex mu;
  std::condition_variable cv;
  bool intruded = false;
  Status intruder;
  Status results[2];
  bool made[2] = {false, false};
  shardrec::testing::SpawnRanks(2, [&](int r) {
    std::shared_ptr<TcpStore> tcp;
    ASSERT_TRUE(ConnectUniqueIdStore(session.id, r, opts.timeout, &tcp).ok());
    auto after = [&, r] {
      std::unique_lock<std::mutex> lock(mu);
      if (r == 1) {
        std::shared_ptr<TcpStore> second;
        intruder = ConnectUniqueIdStore(session.id, 1, opts.timeout, &second);
        intruded = true;
        cv.notify_all();
      } else {
        cv.wait(lock, [&] { return intruded; });
      }
    };
    auto store = std::make_shared<InterceptedStore>(tcp, after);
    std::unique_ptr<Communicator> c;
    results[r] = CreateCommunicator(store, "comm", 2, r, opts, &c);
    made[r] = c != nullptr;
  });
  EXPECT_EQ(intruder.code(), Code::kInvalidUsage) << intruder.ToString();
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(results[r].code(), Code::kInvalidUsage) << r << ": " << results[r].ToString();
    EXPECT_NE(results[r].message().find("rank 1"), std::string::npos) << results[r].message();
    EXPECT_FALSE(made[r]) << r;
  }
}

TEST(StoreHardening, MissingRankFailsCreateWithinTheTimeout) {
  Session session = NewSession();
  CommOptions opts;
  opts.timeout = milliseconds(1000);
  milliseconds took[2];
  Status results[2];
  shardrec::testing::SpawnRanks(2, [&](int r) {
    const auto start = Clock::now();
    std::unique_ptr<Communicator> c;
    results[r] = CreateCommunicatorFromUniqueId(session.id, 3, r, opts, &c);  // rank 2 never comes
    took[r] = std::chrono::duration_cast<milliseconds>(Clock::now() - start);
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(results[r].code(), Code::kTimeout) << results[r].ToString();
    // The timeout is the promise; the slack is overhead, which sanitized builds multiply.
    const auto slack = milliseconds(static_cast<int64_t>(500 * shardrec::testing::kSlowdown));
    EXPECT_LT(took[r], opts.timeout + slack) << r;
  }
}

}  // namespace
}  // namespace shardrec::comm
