// Interrupting a Gloo TCP context from another thread: every thread blocked in one of its pairs
// wakes with an exception at once, instead of at its timeout.
#pragma once

#include <string>

namespace gloo {
class Context;
}  // namespace gloo

namespace shardrec::comm {

// Signals `why` as an I/O error on every TCP pair of `context` (rank `rank` of `size`): each
// pending send and receive of the pair fails immediately and the pair's socket is closed, so
// the peers see the connection drop. Pairs of another transport are left alone. Thread-safe
// against a collective running on the context (each pair takes its own lock). Closing a pair
// waits for a tick of Gloo's event loop (up to 10 ms), so the pairs are closed from up to 64
// threads at once: a few ticks in all rather than one per peer.
void InterruptGlooContext(gloo::Context& context, int rank, int size, const std::string& why);

// The same for the pair to rank `peer` alone (none: nothing happens).
void InterruptGlooPair(gloo::Context& context, int peer, const std::string& why);

}  // namespace shardrec::comm
