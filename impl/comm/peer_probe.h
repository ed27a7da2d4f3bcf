// Who a timed-out collective was cut off from. Gloo's timeout says only that a wait expired, not
// on which pair; a lost link or a partition then looks the same as a stalled peer. After a
// timeout the communicator tries a TCP connection to every peer's published Gloo address at once:
// a peer whose host neither accepts nor refuses it within a short budget is unreachable, and the
// message names those ranks with their host.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <chrono>
#include <string>
#include <vector>

namespace shardrec::comm {

// A peer rank and the address of its Gloo listener, as it published it at the rendezvous.
struct PeerAddress {
  int rank = -1;
  sockaddr_storage addr{};
  std::string host;  // numeric, for messages ("10.1.2.2")
};

// Reads a peer's host and port out of the address bytes Gloo's TCP transport published (a
// sockaddr_storage followed by a sequence number). False when they are not an IPv4 or IPv6
// address of that transport (another transport, or another Gloo build).
bool ParseGlooTcpAddress(int rank, const std::vector<char>& bytes, PeerAddress* out);

// The ranks of `peers` whose host did not answer a TCP connection to their address within
// `budget`: neither accepted nor refused (a refusal still proves the host is there), or failed
// with "host/network unreachable". Every probe runs at once, so the call returns within about
// `budget`. A probe that cannot be started (out of descriptors) is left out rather than guessed.
// A probe that connects is closed at once without sending anything. Thread-safe.
std::vector<int> UnreachablePeers(const std::vector<PeerAddress>& peers,
                                  std::chrono::milliseconds budget);

// "ranks 2, 3 at 10.1.2.2; rank 5 at 10.1.2.3": the ranks of `ranks` grouped by the host `peers`
// gives them, in rank order (a rank `peers` does not list is named without a host).
std::string DescribePeers(const std::vector<int>& ranks, const std::vector<PeerAddress>& peers);

}  // namespace shardrec::comm
