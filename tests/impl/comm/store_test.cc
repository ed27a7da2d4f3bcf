// Tests for the rendezvous stores: memory, prefix, host callbacks, TCP and the unique id.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>

#include "impl/comm/rendezvous/stores.h"
#include "impl/comm/rendezvous/unique_id.h"

namespace shardrec::comm {
namespace {

using std::chrono::milliseconds;

std::vector<uint8_t> Bytes(const std::string& s) { return {s.begin(), s.end()}; }

// Exercises set/get/wait semantics shared by every store.
void CheckStoreBasics(Store& store) {
  ASSERT_TRUE(store.Set("a", Bytes("one")).ok());
  std::vector<uint8_t> v;
  ASSERT_TRUE(store.Get("a", milliseconds(1000), &v).ok());
  EXPECT_EQ(v, Bytes("one"));
  std::thread late([&] {
    std::this_thread::sleep_for(milliseconds(50));
    EXPECT_TRUE(store.Set("b", Bytes(std::string(5000, 'x'))).ok());
  });
  Status w = store.Wait({"a", "b"}, milliseconds(5000));
  late.join();
  EXPECT_TRUE(w.ok()) << w.ToString();
  ASSERT_TRUE(store.Get("b", milliseconds(1000), &v).ok());
  EXPECT_EQ(v.size(), 5000u);
  const auto start = std::chrono::steady_clock::now();
  Status s = store.Get("never", milliseconds(150), &v);
  EXPECT_EQ(s.code(), Code::kTimeout) << s.ToString();
  EXPECT_NE(s.message().find("never"), std::string::npos);
  EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(3000));
  EXPECT_EQ(store.Wait({"a", "never"}, milliseconds(100)).code(), Code::kTimeout);
}

TEST(CommStore, MemoryStoreSetGetWait) {
  MemoryStore store;
  CheckStoreBasics(store);
}

TEST(CommStore, PrefixStoreIsolatesNamespaces) {
  auto base = std::make_shared<MemoryStore>();
  PrefixStore a(base, "g1"), b(base, "g2");
  ASSERT_TRUE(a.Set("k", Bytes("1")).ok());
  std::vector<uint8_t> v;
  EXPECT_EQ(b.Get("k", milliseconds(20), &v).code(), Code::kTimeout);
  ASSERT_TRUE(base->Get("g1/k", milliseconds(20), &v).ok());
  EXPECT_EQ(v, Bytes("1"));
  CheckStoreBasics(b);
}

// A host store in the style of the C API callbacks, backed by a MemoryStore.
struct HostStore {
  MemoryStore inner;
  int calls = 0;
  std::mutex mu;
};

int32_t HostSet(void* p, const char* key, const void* value, size_t len) {
  auto* h = static_cast<HostStore*>(p);
  const uint8_t* b = static_cast<const uint8_t*>(value);
  return static_cast<int32_t>(h->inner.Set(key, std::vector<uint8_t>(b, b + len)).code());
}

int32_t HostGet(void* p, const char* key, int64_t timeout_ms, void* buf, size_t buf_len,
                size_t* len) {
  auto* h = static_cast<HostStore*>(p);
  {
    std::lock_guard<std::mutex> lock(h->mu);
    ++h->calls;
  }
  std::vector<uint8_t> v;
  Status s = h->inner.Get(key, milliseconds(timeout_ms), &v);
  if (!s.ok()) return static_cast<int32_t>(s.code());
  *len = v.size();
  if (v.size() <= buf_len && !v.empty()) std::memcpy(buf, v.data(), v.size());
  return 0;
}

TEST(CommStore, CallbackStoreRetriesLargeValuesAndEmulatesWait) {
  HostStore host;
  StoreCallbacks cb;
  cb.set = &HostSet;
  cb.get = &HostGet;
  cb.payload = &host;  // no wait callback: emulated with get
  CallbackStore store(cb);
  CheckStoreBasics(store);
  EXPECT_GT(host.calls, 0);
}

TEST(CommStore, CallbackStoreReportsHostFailure) {
  StoreCallbacks cb;
  cb.set = [](void*, const char*, const void*, size_t) -> int32_t { return -8; };
  cb.get = &HostGet;
  CallbackStore store(cb);
  Status s = store.Set("k", Bytes("v"));
  EXPECT_EQ(s.code(), Code::kRemote);
  EXPECT_NE(s.message().find("'k'"), std::string::npos) << s.message();
}

TEST(CommStore, UniqueIdStoreServesSeveralClients) {
  UniqueId id;
  ASSERT_TRUE(CreateUniqueId(&id).ok());
  std::shared_ptr<TcpStore> rank1, rank0;
  ASSERT_TRUE(ConnectUniqueIdStore(id, 1, milliseconds(5000), &rank1).ok());
  ASSERT_TRUE(ConnectUniqueIdStore(id, 0, milliseconds(5000), &rank0).ok());
  EXPECT_FALSE(rank0->local_host().empty());
  CheckStoreBasics(*rank1);
  std::vector<uint8_t> v;
  ASSERT_TRUE(rank0->Get("a", milliseconds(1000), &v).ok());
  EXPECT_EQ(v, Bytes("one"));
  rank0->set_linger(milliseconds(100));
  rank0.reset();  // stops the server (rank 1 is still connected: linger expires)
  const auto start = std::chrono::steady_clock::now();
  Status s = rank1->Get("a", milliseconds(5000), &v);
  EXPECT_EQ(s.code(), Code::kRemote) << s.ToString();
  EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(2000));
  EXPECT_EQ(rank1->Set("x", Bytes("y")).code(), Code::kRemote);  // stays failed, fast
}

TEST(CommStore, HostingClientWaitsForOthersToLeave) {
  UniqueId id;
  ASSERT_TRUE(CreateUniqueId(&id).ok());
  std::shared_ptr<TcpStore> rank0, rank1;
  ASSERT_TRUE(ConnectUniqueIdStore(id, 0, milliseconds(5000), &rank0).ok());
  ASSERT_TRUE(ConnectUniqueIdStore(id, 1, milliseconds(5000), &rank1).ok());
  std::thread leaver([&] {
    std::this_thread::sleep_for(milliseconds(100));
    EXPECT_TRUE(rank1->Set("done", Bytes("1")).ok());
    rank1.reset();
  });
  const auto start = std::chrono::steady_clock::now();
  rank0.reset();  // returns once rank 1 disconnects, well before the 5 s linger
  EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(3000));
  leaver.join();
}

TEST(CommStore, CorruptOrStaleIdsAreRejected) {
  UniqueId id;
  ASSERT_TRUE(CreateUniqueId(&id).ok());
  UniqueId bad = id;
  bad.bytes[30] ^= 0xff;
  net::Endpoint e;
  Nonce n;
  EXPECT_EQ(DecodeUniqueId(bad, &e, &n).code(), Code::kCorrupt);
  std::shared_ptr<TcpStore> client;
  EXPECT_EQ(ConnectUniqueIdStore(UniqueId{}, 1, milliseconds(100), &client).code(), Code::kCorrupt);
  ASSERT_TRUE(DecodeUniqueId(id, &e, &n).ok());
  Nonce other = n;
  other[0] ^= 1;
  std::shared_ptr<TcpStore> stranger;
  Status s = TcpStore::Connect(e, other, milliseconds(2000), nullptr, &stranger);
  EXPECT_EQ(s.code(), Code::kRemote) << s.ToString();
  EXPECT_NE(s.message().find("belongs to another session"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("WORLD_SIZE"), std::string::npos) << s.ToString();
  std::shared_ptr<TcpStore> owner;
  ASSERT_TRUE(ConnectUniqueIdStore(id, 0, milliseconds(2000), &owner).ok());  // release the server
}

// Something else listening on the store's address (a web server answering "HTTP/1.1 ..."): the
// error says it is not a rendezvous store, rather than that a frame was too large.
TEST(CommStore, AForeignServiceIsNamedAsNotAStore) {
  const int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(listener, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(::listen(listener, 4), 0);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  std::thread web([listener] {
    const int fd = ::accept(listener, nullptr, nullptr);
    if (fd < 0) return;
    const char reply[] = "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n";
    (void)!::write(fd, reply, sizeof(reply) - 1);
    ::shutdown(fd, SHUT_WR);
    std::this_thread::sleep_for(milliseconds(200));
    ::close(fd);
  });
  net::Endpoint e;
  ASSERT_TRUE(net::ParseHost("127.0.0.1", &e).ok());
  e.port = ntohs(addr.sin_port);
  std::shared_ptr<TcpStore> client;
  const Status s = TcpStore::Connect(e, Nonce{}, milliseconds(2000), nullptr, &client);
  web.join();
  ::close(listener);
  EXPECT_EQ(s.code(), Code::kRemote) << s.ToString();
  EXPECT_NE(s.message().find("is not a libshardrec rendezvous store"), std::string::npos)
      << s.ToString();
  EXPECT_NE(s.message().find("MASTER_ADDR"), std::string::npos) << s.ToString();
}

}  // namespace
}  // namespace shardrec::comm
