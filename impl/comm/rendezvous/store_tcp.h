// The TCP rendezvous store: a small key-value server hosted by rank 0 and one client connection
// per communicator tree. Addressed by the 128-byte unique id (unique_id.h).
#pragma once

#include <array>
#include <atomic>
#include <condition_variable>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "impl/comm/rendezvous/socket_util.h"
#include "impl/comm/rendezvous/store.h"

namespace shardrec::comm {

using Nonce = std::array<uint8_t, 16>;

// Serves set/get/wait/claim to its clients, one thread per connection (worlds are small and
// each communicator tree holds a few connections). A connection must present the session nonce
// in its first frame, which is capped in size and time before anything is allocated for it;
// unauthenticated and authenticated connections are bounded separately (store_tcp_protocol.h).
class TcpStoreServer {
 public:
  // Listens on `addr` (or every interface of its family with `any_interface`), on `port` or,
  // with 0, an ephemeral one. `in_use`: as net::Listen's.
  // `attempt`: the launcher's restart count + 1, 0 for none (store_tcp_protocol.h, kHello).
  static Status Start(const net::Endpoint& addr, bool any_interface, const Nonce& nonce,
                      std::shared_ptr<TcpStoreServer>* out, uint16_t port = 0,
                      bool* in_use = nullptr, uint64_t attempt = 0);
  ~TcpStoreServer();
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;

  uint16_t port() const { return port_; }
  // Blocks until at most `max_clients` authenticated connections remain or the timeout expires;
  // false on timeout. Used by the hosting rank to outlive the other ranks' last store
  // operations; connections that never presented the nonce do not count.
  bool WaitForClients(int max_clients, std::chrono::milliseconds timeout);
  // Closes every connection; blocked clients get kRemote. Idempotent.
  void Stop();

  // Connections currently open: authenticated, and still expected to present the nonce.
  int authenticated() const;
  int pending() const;

 private:
  struct Conn {
    int fd = -1;
    uint64_t id = 0;
    bool authenticated = false;
    bool done = false;
    std::thread thread;
  };

  // Whether connection `id`'s client has hung up while its thread still serves it (mu_ held).
  bool HolderHungUp(uint64_t id) const;
  TcpStoreServer(int fd, uint16_t port, const Nonce& nonce, uint64_t instance)
      : listen_fd_(fd), port_(port), nonce_(nonce), instance_(instance) {}
  void AcceptLoop();
  void ReapLocked();
  void Serve(Conn* conn);
  bool Hello(int fd, const std::vector<uint8_t>& request);
  bool Handle(const Conn& conn, const std::vector<uint8_t>& request);

  int listen_fd_;
  uint16_t port_;
  Nonce nonce_;
  // Random, never 0, sent with every accepted hello: a client tells this server from a later one
  // on the same port (a launcher's fixed port, re-created after an abort).
  uint64_t instance_;
  uint64_t attempt_ = 0;  // the launcher's restart count + 1; 0 for none
  std::atomic<bool> stop_{false};
  std::thread accept_thread_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::vector<uint8_t>> data_;
  std::list<Conn> conns_;
  uint64_t next_conn_id_ = 1;
  int active_ = 0;   // authenticated connections
  int pending_ = 0;  // connections that have not presented the nonce yet
  // Claimed names (a rank of the session) and the connection holding each; a claim ends with
  // its connection. The first name claimed twice refuses the whole session (conflict_).
  std::map<std::string, uint64_t> claims_;
  std::string conflict_;
};

// A client. Thread-safe: concurrent requests (sub-communicators splitting on different threads)
// each take a pooled connection, so a blocking wait never delays another thread's set. When the
// server disappears every request fails with kRemote instead of waiting.
class TcpStore : public Store {
 public:
  // Whose store the address names. kOneSession (a unique id's): a store there of another session
  // is a stale id, refused at once. kReused (a launcher's fixed port, which every re-creation
  // after an abort reuses): the store there may still be the previous session's, going away
  // while rank 0 re-creates; a store of another session, or one this process's clients have
  // already left, is tried again until the timeout instead.
  enum class Address { kOneSession, kReused };

  // `hosted` is the server when this client lives in the hosting process as rank 0; the client
  // then keeps it alive and, on destruction, waits up to `linger` for the other ranks'
  // connections to close before stopping it. Every later connection of the client must reach
  // the same server instance: a store replaced under it fails with kRemote. `attempt`: the
  // launcher's restart count + 1 (0 for none): a store of a later attempt refuses this client
  // at once (kRemote), even on a kReused address, since its session is over for good.
  static Status Connect(const net::Endpoint& server, const Nonce& nonce,
                        std::chrono::milliseconds timeout, std::shared_ptr<TcpStoreServer> hosted,
                        std::shared_ptr<TcpStore>* out, Address address = Address::kOneSession,
                        uint64_t attempt = 0);
  ~TcpStore() override;

  Status Set(const std::string& key, const std::vector<uint8_t>& value) override;
  Status Get(const std::string& key, std::chrono::milliseconds timeout,
             std::vector<uint8_t>* value) override;
  Status Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  Status SetWithin(const std::string& key, const std::vector<uint8_t>& value,
                   std::chrono::milliseconds within) override;
  Status GetWithin(const std::string& key, std::chrono::milliseconds within,
                   std::vector<uint8_t>* value) override;
  // Claims `name` for this client for as long as it is connected. A name already held by
  // another client gives kInvalidUsage here and refuses the whole session: every pending and
  // later request of every client then fails with kInvalidUsage naming it.
  Status Claim(const std::string& name);
  // Why the session was refused, asked on a connection this client already holds (none is
  // opened, so a store that is gone answers at once): kInvalidUsage naming the name claimed
  // twice, or OK when the store does not say so (or cannot be asked). Waits at most `within`
  // for the answer.
  Status RefusalReason(std::chrono::milliseconds within) override;

  // The local address of the connection: the interface that routes to the store host.
  const std::string& local_host() const { return local_host_; }
  // How long a hosting client's destruction waits for the other ranks to disconnect.
  void set_linger(std::chrono::milliseconds linger) { linger_ = linger; }
  void Abandon() override { linger_ = std::chrono::milliseconds(0); }

 private:
  TcpStore() = default;
  // `cap`, when set, bounds the whole call (a new connection included).
  Status Call(const std::vector<uint8_t>& request, std::chrono::milliseconds wait,
              std::vector<uint8_t>* reply, std::optional<net::Clock::time_point> cap = {});
  Status Open(int* fd, std::optional<net::Clock::time_point> cap = {});  // presented the nonce
  Status Acquire(int* fd, std::optional<net::Clock::time_point> cap = {});
  // Set, bounded as a whole by `cap` when one is given (SetWithin).
  Status SetCapped(const std::string& key, const std::vector<uint8_t>& value,
                   std::optional<net::Clock::time_point> cap);
  void Release(int fd);

  std::mutex mu_;
  std::vector<int> idle_;
  Status broken_;
  net::Endpoint server_;
  Nonce nonce_{};
  Address address_ = Address::kOneSession;
  uint64_t instance_ = 0;  // the server's, from the first connection; 0 before it
  uint64_t attempt_ = 0;   // the launcher's restart count + 1; 0 for none
  std::string server_name_;
  std::string local_host_;
  std::chrono::milliseconds io_timeout_{30000};
  std::atomic<std::chrono::milliseconds> linger_{std::chrono::milliseconds(30000)};
  std::shared_ptr<TcpStoreServer> hosted_;
};

}  // namespace shardrec::comm
