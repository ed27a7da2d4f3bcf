// Wire constants of the TCP store protocol (framed messages, see socket_util.h).
#pragma once

#include <cstdint>

namespace shardrec::comm::tcp_store {

// Requests: u8 opcode, then fields. kHello(bytes nonce); kSet(str key, bytes value);
// kGet(str key, u64 timeout_ms); kWait(u64 n, n x str key, u64 timeout_ms).
inline constexpr uint8_t kHello = 1;
inline constexpr uint8_t kSet = 2;
inline constexpr uint8_t kGet = 3;
inline constexpr uint8_t kWait = 4;

// Replies: u8 status, then kGet's value (bytes) on kOk or the missing key (str) on kTimedOut.
inline constexpr uint8_t kOk = 0;
inline constexpr uint8_t kTimedOut = 1;
inline constexpr uint8_t kMismatch = 2;

}  // namespace shardrec::comm::tcp_store
