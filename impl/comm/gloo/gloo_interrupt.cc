// InterruptGlooContext: wakes threads blocked in Gloo's waitRecv/waitSend through the TCP pair's
// own error path (the path a dead peer takes), which Gloo's closeConnections() does not take.
#include "impl/comm/gloo/gloo_interrupt.h"

#include <gloo/context.h>
#include <gloo/transport/pair.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <thread>
#include <typeinfo>
#include <vector>

// Debian's libgloo-dev (0.0~git20220518) ships gloo/transport/tcp/pair.h without the
// gloo/common/memory.h it includes, so that header cannot be compiled. The one member used here
// is declared instead; it is a public, exported, non-virtual function of the library
// (Pair::signalExceptionExternal, the call a timed-out buffer makes on every pair of its
// context). Nothing relies on the class's layout: the object is only ever reached through
// the pointer Gloo hands out, after its dynamic type has been checked by name, and
// transport::Pair is tcp::Pair's first base, so the pointer needs no adjustment.
namespace gloo::transport::tcp {
class Pair : public ::gloo::transport::Pair {
 public:
  std::exception_ptr signalExceptionExternal(const std::string& msg);
};
}  // namespace gloo::transport::tcp

namespace shardrec::comm {

namespace {

// Itanium mangled name of gloo::transport::tcp::Pair, as typeid(...).name() reports it.
constexpr const char* kTcpPairName = "N4gloo9transport3tcp4PairE";

// Enough threads that a world of a thousand ranks closes its pairs in about 16 loop ticks; each
// thread only waits.
constexpr size_t kMaxThreads = 64;

gloo::transport::tcp::Pair* TcpPair(gloo::Context& context, int peer) {
  ::gloo::transport::Pair* pair = nullptr;
  try {
    pair = context.getPair(peer).get();
  } catch (...) {
    return nullptr;  // no pair for this rank (never connected)
  }
  if (pair == nullptr || std::strcmp(typeid(*pair).name(), kTcpPairName) != 0) return nullptr;
  return static_cast<gloo::transport::tcp::Pair*>(pair);
}

void Signal(gloo::transport::tcp::Pair* pair, const std::string& why) {
  try {
    pair->signalExceptionExternal(why);
  } catch (...) {
  }
}

}  // namespace

void InterruptGlooPair(gloo::Context& context, int peer, const std::string& why) {
  if (gloo::transport::tcp::Pair* pair = TcpPair(context, peer)) Signal(pair, why);
}

void InterruptGlooContext(gloo::Context& context, int rank, int size, const std::string& why) {
  std::vector<gloo::transport::tcp::Pair*> pairs;
  for (int r = 0; r < size; ++r) {
    if (r == rank) continue;
    if (gloo::transport::tcp::Pair* pair = TcpPair(context, r)) pairs.push_back(pair);
  }
  // Each close waits for the event loop's next tick, which wakes every waiter at once: threads
  // that close pairs side by side share their ticks (one thread per pair took 10 ms per peer).
  const size_t threads = std::min(pairs.size(), kMaxThreads);
  auto close_stride = [&](size_t first) {
    for (size_t i = first; i < pairs.size(); i += threads) Signal(pairs[i], why);
  };
  std::vector<std::thread> pool;
  size_t started = 1;
  try {
    for (; started < threads; ++started) pool.emplace_back(close_stride, started);
  } catch (...) {
    // No more threads: the strides not started are closed here.
  }
  close_stride(0);
  for (size_t k = started; k < threads; ++k) close_stride(k);
  for (std::thread& t : pool) t.join();
}

}  // namespace shardrec::comm
