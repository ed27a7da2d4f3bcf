// InterruptGlooContext: wakes threads blocked in Gloo's waitRecv/waitSend through the TCP pair's
// own error path (the path a dead peer takes), which Gloo's closeConnections() does not take.
#include "impl/comm/gloo_interrupt.h"

#include <gloo/context.h>
#include <gloo/transport/pair.h>

#include <cstring>
#include <exception>
#include <typeinfo>

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
}  // namespace

void InterruptGlooContext(gloo::Context& context, int rank, int size, const std::string& why) {
  for (int r = 0; r < size; ++r) {
    if (r == rank) continue;
    ::gloo::transport::Pair* pair = nullptr;
    try {
      pair = context.getPair(r).get();
    } catch (...) {
      continue;  // no pair for this rank (never connected)
    }
    if (pair == nullptr || std::strcmp(typeid(*pair).name(), kTcpPairName) != 0) continue;
    try {
      static_cast<gloo::transport::tcp::Pair*>(pair)->signalExceptionExternal(why);
    } catch (...) {
    }
  }
}

}  // namespace shardrec::comm
