// The 128-byte unique id: how ranks find rank 0's TCP store, NCCL-style. Rank 0 creates it
// (starting the store server), the host program ships it to every rank by its own means.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>

#include "impl/comm/rendezvous/store_tcp.h"

namespace shardrec::comm {

inline constexpr size_t kUniqueIdBytes = 128;

// Layout: "SRID", version (1 byte), family (4 or 6), port (big-endian u16), address (16 bytes),
// session nonce (16 bytes), zeros, FNV-1a checksum of the first 124 bytes (last 4 bytes).
struct UniqueId {
  uint8_t bytes[kUniqueIdBytes] = {};
};

// Starts a store server in this process (kept in a process-wide registry under the id's nonce)
// and returns its id. The advertised address is SHARDREC_SOCKET_IFADDR, else the source
// address of the default route, else 127.0.0.1. The server listens on that address only, or on
// every interface when SHARDREC_STORE_BIND_ANY=1.
Status CreateUniqueId(UniqueId* out);

// Checks magic, version and checksum (kCorrupt otherwise) and extracts the server address.
Status DecodeUniqueId(const UniqueId& id, net::Endpoint* server, Nonce* nonce);

// Connects a client to the id's store and claims `rank` for it (kInvalidUsage when another live
// client holds that rank: the whole session is then refused). Rank 0 takes ownership of the
// server when it was created in this process, so the server lives as long as rank 0's
// communicators.
Status ConnectUniqueIdStore(const UniqueId& id, int rank, std::chrono::milliseconds timeout,
                            std::shared_ptr<TcpStore>* out);

}  // namespace shardrec::comm
