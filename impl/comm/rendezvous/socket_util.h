// Small POSIX socket helpers for the TCP store: framed messages, poll-based deadlines, and
// MSG_NOSIGNAL on every send, so that a vanished peer is an error status and never a SIGPIPE.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "impl/core/status.h"

namespace shardrec::comm::net {

using Clock = std::chrono::steady_clock;

// A resolved socket address (IPv4 or IPv6) in printable form plus its raw sockaddr bytes.
struct Endpoint {
  int family = 0;  // AF_INET or AF_INET6
  uint8_t addr[16] = {};
  uint16_t port = 0;
  std::string ToString() const;    // "1.2.3.4:5" or "[::1]:5"
  std::string HostString() const;  // "1.2.3.4" or "::1"
};

// Parses a numeric IPv4/IPv6 literal (no name resolution).
Status ParseHost(const std::string& host, Endpoint* out);

// The address other hosts should use to reach this machine: SHARDREC_SOCKET_IFADDR when set,
// else the source address of the default route, else 127.0.0.1.
Status DefaultAdvertisedHost(Endpoint* out);

// Parses a numeric address, else resolves a host name (the first IPv4, else IPv6, result).
// kInvalidArgument naming the host when it cannot be resolved.
Status ResolveHost(const std::string& host, Endpoint* out);
// ResolveHost, retried until `deadline` while the name does not resolve (a Kubernetes service or
// a new node's name appears in DNS some time after the pods start): kTimeout naming the host and
// the last resolver error when it never does.
Status ResolveHostBy(const std::string& host, std::chrono::steady_clock::time_point deadline,
                     Endpoint* out);

// Listening socket on `addr` (its port is ignored: `want_port`, or with 0 an ephemeral port, is
// bound and written into *port). With `any_interface` the socket binds the wildcard address of
// addr's family instead. `in_use`, when given, says whether a failure was the port being taken
// (EADDRINUSE), which callers explain in their own terms.
Status Listen(const Endpoint& addr, bool any_interface, int* fd, uint16_t* port,
              uint16_t want_port = 0, bool* in_use = nullptr);

// Connects with retries (the server may not be up yet) until the deadline. With
// `retry_refused` false a refused connection ends the attempts at once with kRemote: for a
// server known to have been up, whose host process has gone.
Status ConnectWithRetry(const Endpoint& to, Clock::time_point deadline, int* fd,
                        bool retry_refused = true);

// The local address of a connected socket.
Status LocalHost(int fd, std::string* host);

// Sends the whole buffer (MSG_NOSIGNAL); kRemote when the peer is gone.
Status SendAll(int fd, const void* data, size_t len, Clock::time_point deadline);

// Receives exactly len bytes before the deadline. `stop` (optional) is polled every 100 ms and
// aborts with kInvalidUsage when it returns true. EOF or reset gives kRemote.
Status RecvAll(int fd, void* data, size_t len, Clock::time_point deadline,
               const std::function<bool()>& stop = nullptr);

// A message is a 4-byte little-endian length followed by that many bytes. RecvFrame refuses
// (kCorrupt, before allocating) a length above max_len.
inline constexpr size_t kMaxFrameBytes = size_t{256} << 20;
Status SendFrame(int fd, const std::vector<uint8_t>& payload, Clock::time_point deadline);
Status RecvFrame(int fd, std::vector<uint8_t>* payload, Clock::time_point deadline,
                 const std::function<bool()>& stop = nullptr, size_t max_len = kMaxFrameBytes);

void CloseFd(int* fd);
// Whether the peer of connected socket `fd` has closed its end or the connection failed,
// without reading anything and without waiting.
bool PeerHungUp(int fd);

// Append/consume helpers for the store protocol.
void PutU8(std::vector<uint8_t>* b, uint8_t v);
void PutU64(std::vector<uint8_t>* b, uint64_t v);
void PutBytes(std::vector<uint8_t>* b, const void* data, size_t len);  // length-prefixed
class Reader {
 public:
  explicit Reader(const std::vector<uint8_t>& b) : b_(b) {}
  bool U8(uint8_t* v);
  bool U64(uint64_t* v);
  bool Bytes(std::vector<uint8_t>* v);
  bool String(std::string* v);

 private:
  const std::vector<uint8_t>& b_;
  size_t pos_ = 0;
};

}  // namespace shardrec::comm::net
