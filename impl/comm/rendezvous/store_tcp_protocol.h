// Wire constants of the TCP store protocol (framed messages, see socket_util.h).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>

namespace shardrec::comm::tcp_store {

// Requests: u8 opcode, then fields. kHello(bytes nonce[, u64 attempt]): attempt is a launcher's
// restart count + 1 (TORCHELASTIC_RESTART_COUNT), absent (or 0) when it gave none;
// kSet(str key, bytes value);
// kGet(str key, u64 timeout_ms); kWait(u64 n, n x str key, u64 timeout_ms); kClaim(str name).
inline constexpr uint8_t kHello = 1;
inline constexpr uint8_t kSet = 2;
inline constexpr uint8_t kGet = 3;
inline constexpr uint8_t kWait = 4;
inline constexpr uint8_t kClaim = 5;

// Replies: u8 status, then kHello's server instance (u64) or kGet's value (bytes) on kOk, the
// missing key (str) on kTimedOut, or the reason (str) on kTaken and kConflict. kMismatch carries
// the server's attempt (u64) when the hello gave one (a client of an earlier attempt of a
// restarted job is then refused at once rather than at its timeout), nothing otherwise.
inline constexpr uint8_t kOk = 0;
inline constexpr uint8_t kTimedOut = 1;
inline constexpr uint8_t kMismatch = 2;
inline constexpr uint8_t kTaken = 3;     // this claim is held by another connection
inline constexpr uint8_t kConflict = 4;  // a name was claimed twice: the session is refused

// Limits on connections that have not presented the nonce yet: their one frame (the hello,
// 1 + 8 + 16 bytes) must fit in kMaxHelloBytes and arrive within kHelloTimeout, and at most
// kMaxPending of them are served at once (more are closed on accept). Authenticated
// connections are bounded by kMaxConnections.
inline constexpr size_t kMaxHelloBytes = 256;
inline constexpr std::chrono::milliseconds kHelloTimeout{3000};
inline constexpr int kMaxPending = 32;
inline constexpr int kMaxConnections = 1024;

}  // namespace shardrec::comm::tcp_store
