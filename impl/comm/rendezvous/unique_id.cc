// Unique id encoding and the process-wide registry of store servers created by CreateUniqueId.
#include "impl/comm/rendezvous/unique_id.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <random>

#include "impl/core/check.h"

namespace shardrec::comm {

namespace {

constexpr uint8_t kVersion = 1;
constexpr size_t kChecksumAt = kUniqueIdBytes - 4;

uint32_t Fnv1a(const uint8_t* p, size_t n) {
  uint32_t h = 2166136261u;
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 16777619u;
  return h;
}

// Servers whose id was created here and not yet claimed by a rank 0 in this process, with the
// process that started them: a child forked after CreateUniqueId inherits this map but not the
// server's threads, so its rank 0 must not own (and at its end join) them.
struct Hosted {
  pid_t pid = 0;
  std::shared_ptr<TcpStoreServer> server;
};
std::mutex g_registry_mu;
std::map<Nonce, Hosted>& Registry() {
  static auto* registry = new std::map<Nonce, Hosted>();
  return *registry;
}

}  // namespace

Status CreateUniqueId(UniqueId* out) {
  net::Endpoint host;
  SR_RETURN_IF_ERROR(net::DefaultAdvertisedHost(&host));
  Nonce nonce;
  std::random_device rd;
  for (size_t i = 0; i < nonce.size(); i += 4) {
    uint32_t r = rd();
    std::memcpy(nonce.data() + i, &r, 4);
  }
  std::shared_ptr<TcpStoreServer> server;
  const char* any = std::getenv("SHARDREC_STORE_BIND_ANY");
  const bool any_interface = any != nullptr && std::strcmp(any, "1") == 0;
  SR_RETURN_IF_ERROR(TcpStoreServer::Start(host, any_interface, nonce, &server));

  UniqueId id;
  std::memcpy(id.bytes, "SRID", 4);
  id.bytes[4] = kVersion;
  id.bytes[5] = host.family == AF_INET6 ? 6 : 4;
  id.bytes[6] = static_cast<uint8_t>(server->port() >> 8);
  id.bytes[7] = static_cast<uint8_t>(server->port() & 0xff);
  std::memcpy(id.bytes + 8, host.addr, 16);
  std::memcpy(id.bytes + 24, nonce.data(), nonce.size());
  const uint32_t sum = Fnv1a(id.bytes, kChecksumAt);
  std::memcpy(id.bytes + kChecksumAt, &sum, 4);
  {
    std::lock_guard<std::mutex> lock(g_registry_mu);
    Registry()[nonce] = Hosted{getpid(), std::move(server)};
  }
  *out = id;
  return Status::Ok();
}

Status DecodeUniqueId(const UniqueId& id, net::Endpoint* server, Nonce* nonce) {
  uint32_t sum = 0;
  std::memcpy(&sum, id.bytes + kChecksumAt, 4);
  if (std::memcmp(id.bytes, "SRID", 4) != 0 || sum != Fnv1a(id.bytes, kChecksumAt)) {
    return Status::Corrupt("unique id is not a libshardrec unique id (bad magic or checksum)");
  }
  if (id.bytes[4] != kVersion) {
    return Status::Corrupt("unique id has version ", int{id.bytes[4]},
                           ", this library reads version ", int{kVersion});
  }
  if (id.bytes[5] != 4 && id.bytes[5] != 6)
    return Status::Corrupt("unique id has a bad address family");
  net::Endpoint e;
  e.family = id.bytes[5] == 6 ? AF_INET6 : AF_INET;
  e.port = static_cast<uint16_t>((id.bytes[6] << 8) | id.bytes[7]);
  std::memcpy(e.addr, id.bytes + 8, 16);
  *server = e;
  std::memcpy(nonce->data(), id.bytes + 24, nonce->size());
  return Status::Ok();
}

Status ConnectUniqueIdStore(const UniqueId& id, int rank, std::chrono::milliseconds timeout,
                            std::shared_ptr<TcpStore>* out) {
  net::Endpoint server;
  Nonce nonce;
  SR_RETURN_IF_ERROR(DecodeUniqueId(id, &server, &nonce));
  std::shared_ptr<TcpStoreServer> hosted;
  if (rank == 0) {
    std::lock_guard<std::mutex> lock(g_registry_mu);
    auto it = Registry().find(nonce);
    // In a forked child the server runs in the parent: this rank 0 is one more client of it.
    if (it != Registry().end() && it->second.pid == getpid()) {
      hosted = it->second.server;
      Registry().erase(it);
    }
  }
  Status s = TcpStore::Connect(server, nonce, timeout, hosted, out);
  if (!s.ok()) {
    // Give the server back so a retry of rank 0's init can still claim it.
    if (hosted) {
      std::lock_guard<std::mutex> lock(g_registry_mu);
      Registry()[nonce] = Hosted{getpid(), hosted};
    }
    return s;
  }
  // The claim lives as long as this client's first connection: a rank that died or gave up
  // frees its number for a retry, while a second live process claiming it is refused.
  s = (*out)->Claim(StrCat("rank ", rank));
  if (!s.ok()) {
    // The session is refused for good; a hosting rank 0 stops its server after giving the
    // other ranks a moment to read the refusal.
    (*out)->set_linger(std::min(timeout, std::chrono::milliseconds(1000)));
    out->reset();
  }
  return s;
}

}  // namespace shardrec::comm
