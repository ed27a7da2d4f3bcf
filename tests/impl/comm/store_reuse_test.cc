// A launcher's fixed port serves one store after another: a client connecting there for a new
// session waits out the previous session's store (one it has left, or one of another nonce)
// and reaches its successor; on a unique id's address the same meetings fail at once.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "impl/comm/rendezvous/store_tcp.h"

namespace shardrec::comm {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

net::Endpoint Loopback(uint16_t port) {
  net::Endpoint e;
  EXPECT_TRUE(net::ParseHost("127.0.0.1", &e).ok());
  e.port = port;
  return e;
}

Nonce NonceOf(uint8_t b) {
  Nonce n{};
  n.fill(b);
  return n;
}

// The old store is stopped `after` from now and a new one (nonce `next`) started on its port;
// meanwhile `connect` runs. Returns the new server, which `connect`'s client must have reached.
template <typename Connect>
std::shared_ptr<TcpStoreServer> Replace(std::shared_ptr<TcpStoreServer>* old, const Nonce& next,
                                        milliseconds after, Connect connect) {
  const uint16_t port = (*old)->port();
  std::shared_ptr<TcpStoreServer> successor;
  std::thread swap([&] {
    std::this_thread::sleep_for(after);
    (*old)->Stop();
    old->reset();
    EXPECT_TRUE(TcpStoreServer::Start(Loopback(port), false, next, &successor, port).ok());
  });
  connect();
  swap.join();
  return successor;
}

TEST(StoreReuse, AStoreThisProcessLeftIsWaitedOutForItsSuccessor) {
  const Nonce nonce = NonceOf(7);
  std::shared_ptr<TcpStoreServer> old;
  ASSERT_TRUE(TcpStoreServer::Start(Loopback(0), false, nonce, &old).ok());
  const net::Endpoint at = Loopback(old->port());
  {
    std::shared_ptr<TcpStore> previous;
    ASSERT_TRUE(TcpStore::Connect(at, nonce, milliseconds(2000), nullptr, &previous).ok());
    ASSERT_TRUE(previous->Set("previous round", {1}).ok());
  }  // left: the old store is now one this process is done with
  std::shared_ptr<TcpStore> next;
  Status s;
  const auto start = Clock::now();
  const auto successor = Replace(&old, nonce, milliseconds(300), [&] {
    s = TcpStore::Connect(at, nonce, milliseconds(5000), nullptr, &next,
                          TcpStore::Address::kReused);
  });
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_GE(Clock::now() - start, milliseconds(250));
  std::vector<uint8_t> v;  // the successor has none of the previous session's keys
  EXPECT_EQ(next->Get("previous round", milliseconds(0), &v).code(), Code::kTimeout);
}

TEST(StoreReuse, AStoreOfAnotherNonceIsWaitedOutOnlyOnAReusedPort) {
  std::shared_ptr<TcpStoreServer> old;
  ASSERT_TRUE(TcpStoreServer::Start(Loopback(0), false, NonceOf(1), &old).ok());
  const net::Endpoint at = Loopback(old->port());
  std::shared_ptr<TcpStore> client;
  // A unique id's address: refused at once.
  const auto start = Clock::now();
  EXPECT_EQ(TcpStore::Connect(at, NonceOf(2), milliseconds(5000), nullptr, &client).code(),
            Code::kRemote);
  EXPECT_LT(Clock::now() - start, milliseconds(1000));
  Status s;
  const auto successor = Replace(&old, NonceOf(2), milliseconds(300), [&] {
    s = TcpStore::Connect(at, NonceOf(2), milliseconds(5000), nullptr, &client,
                          TcpStore::Address::kReused);
  });
  EXPECT_TRUE(s.ok()) << s.ToString();
}

TEST(StoreReuse, AStoreThatStaysForeignFailsAtTheTimeoutSayingWhy) {
  std::shared_ptr<TcpStoreServer> other;
  ASSERT_TRUE(TcpStoreServer::Start(Loopback(0), false, NonceOf(1), &other).ok());
  std::shared_ptr<TcpStore> client;
  const auto start = Clock::now();
  const Status s = TcpStore::Connect(Loopback(other->port()), NonceOf(2), milliseconds(600),
                                     nullptr, &client, TcpStore::Address::kReused);
  EXPECT_GE(Clock::now() - start, milliseconds(550));
  EXPECT_EQ(s.code(), Code::kRemote) << s.ToString();
  EXPECT_NE(s.message().find("belongs to another session"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("tried until the timeout"), std::string::npos) << s.ToString();

  const Nonce nonce = NonceOf(3);
  std::shared_ptr<TcpStoreServer> left;
  ASSERT_TRUE(TcpStoreServer::Start(Loopback(0), false, nonce, &left).ok());
  const net::Endpoint at = Loopback(left->port());
  ASSERT_TRUE(TcpStore::Connect(at, nonce, milliseconds(2000), nullptr, &client).ok());
  client.reset();
  const Status t =
      TcpStore::Connect(at, nonce, milliseconds(300), nullptr, &client, TcpStore::Address::kReused);
  EXPECT_EQ(t.code(), Code::kTimeout) << t.ToString();
  EXPECT_NE(t.message().find("this process has left"), std::string::npos) << t.ToString();
}

// A restarted job (TORCHELASTIC_RESTART_COUNT raised, the attempt is the count + 1): a rank of
// an earlier attempt is refused at once by the later attempt's store, even on a reused port,
// while a rank of a later attempt still waits out an earlier attempt's store (it may be going
// away). A client or store without an attempt keeps the patient behaviour.
TEST(StoreReuse, ARankOfAnEarlierAttemptIsRefusedAtOnce) {
  std::shared_ptr<TcpStoreServer> later;
  ASSERT_TRUE(TcpStoreServer::Start(Loopback(0), false, NonceOf(1), &later, 0, nullptr, 2).ok());
  const net::Endpoint at = Loopback(later->port());
  std::shared_ptr<TcpStore> client;
  auto start = Clock::now();
  Status s = TcpStore::Connect(at, NonceOf(2), milliseconds(5000), nullptr, &client,
                               TcpStore::Address::kReused, /*attempt=*/1);
  EXPECT_LT(Clock::now() - start, milliseconds(1000));
  EXPECT_EQ(s.code(), Code::kRemote) << s.ToString();
  EXPECT_NE(s.message().find("TORCHELASTIC_RESTART_COUNT is 1, this rank's 0"), std::string::npos)
      << s.ToString();
  // A later attempt meeting an earlier attempt's store, or a client that gave no attempt: the
  // store there may be going away, so both wait out their timeout.
  for (uint64_t attempt : {uint64_t{3}, uint64_t{0}}) {
    start = Clock::now();
    s = TcpStore::Connect(at, NonceOf(2), milliseconds(400), nullptr, &client,
                          TcpStore::Address::kReused, attempt);
    EXPECT_GE(Clock::now() - start, milliseconds(350)) << attempt;
    EXPECT_NE(s.message().find("tried until the timeout"), std::string::npos) << s.ToString();
  }
  // The store's own attempt meets it.
  EXPECT_TRUE(TcpStore::Connect(at, NonceOf(1), milliseconds(2000), nullptr, &client,
                                TcpStore::Address::kReused, 2)
                  .ok());
}

}  // namespace
}  // namespace shardrec::comm
