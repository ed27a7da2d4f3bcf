// MeshContext::ConnectMesh: pair creation, the address exchange and the deadline's watchdog.
#include "impl/comm/gloo/gloo_mesh.h"

#include <gloo/transport/context.h>
#include <gloo/transport/device.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "impl/comm/gloo/gloo_interrupt.h"
#include "impl/comm/rendezvous/rank_arrival.h"
#include "impl/core/check.h"

namespace shardrec::comm {

namespace {

using Clock = std::chrono::steady_clock;

std::string MeshKey(int rank) { return StrCat("gloo_mesh/", rank); }

std::string OpenFileLimit() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0) return "unknown";
  return limit.rlim_cur == RLIM_INFINITY ? std::string("unlimited") : StrCat(limit.rlim_cur);
}

// At the deadline, unless stopped first, marks the connection expired and fails the pair whose
// connect may be waiting (the loop connects one pair at a time, and no other wait is the
// pairs'): closing every pair cost a tick of Gloo's event loop each, 10 s for 1000 ranks.
class Watchdog {
 public:
  Watchdog(gloo::Context* context, Clock::time_point deadline, const std::atomic<int>* connecting)
      : thread_([this, context, deadline, connecting] {
          std::unique_lock<std::mutex> lock(mu_);
          if (cv_.wait_until(lock, deadline, [this] { return stopped_; })) return;
          expired_.store(true);
          // After expired_ is set: a connect that starts later sees it and does not wait. The
          // lock is held until the pair is failed, so Stop() reports an expiry it raced with.
          const int peer = connecting->load();
          if (peer >= 0) {
            InterruptGlooPair(*context, peer,
                              "shardrec: connecting the communicator passed its timeout");
          }
        }) {}
  ~Watchdog() { Stop(); }
  // Stops the watchdog; true when it expired first (a pair may have been failed).
  bool Stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopped_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
    return expired_.load();
  }
  bool expired() const { return expired_.load(); }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopped_ = false;
  std::atomic<bool> expired_{false};
  std::thread thread_;  // last: it starts once the members it uses exist
};

}  // namespace

MeshContext::~MeshContext() {
  if (transportContext_ != nullptr)
    InterruptGlooContext(*this, rank, size, "shardrec: communicator closed");
}

Status MeshContext::ConnectMesh(Store* store,
                                const std::shared_ptr<gloo::transport::Device>& device,
                                Clock::time_point deadline) {
  auto left = [&] {
    return std::max(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()),
                    std::chrono::milliseconds(1));
  };
  std::shared_ptr<gloo::transport::Context> pairs = device->createContext(rank, size);
  // A pair keeps this as its own timeout, which in Gloo's asynchronous mode bounds only its
  // first connection (five times it); the watchdog ends that wait at the deadline anyway.
  pairs->setTimeout(left());
  // getPair (the watchdog's interrupt, the destructor's close, and every collective later) reads
  // these; set first, so that pairs made before a failure are closed side by side too.
  device_ = device;
  transportContext_ = pairs;
  std::vector<uint8_t> addresses;
  size_t address_bytes = 0;
  for (int r = 0; r < size; ++r) {
    if (r == rank) continue;
    // Each pair listens on a port of its own, and binding one costs the kernel more the more
    // ports are taken: thousands of peers can use up the time alone (16000 took 30 s).
    if (Clock::now() >= deadline) {
      return Status::Timeout("making the connections to ", size - 1, " peers passed the deadline (",
                             addresses.size() / std::max<size_t>(address_bytes, 1),
                             " listening sockets made: each peer needs one)");
    }
    std::vector<char> bytes;
    try {
      bytes = pairs->createPair(r)->address().bytes();
    } catch (const std::exception& e) {
      // Out of descriptors, most likely: said as such, not as a peer that did not come.
      return Status::Io("cannot make the connection to rank ", r, " (each of the ", size - 1,
                        " peers needs its own socket; this process's open-file limit is ",
                        OpenFileLimit(), "): ", e.what());
    }
    address_bytes = bytes.size();
    addresses.insert(addresses.end(), bytes.begin(), bytes.end());
  }
  SR_RETURN_IF_ERROR(store->Set(MeshKey(rank), addresses));

  // Every peer's addresses first: a peer that never comes is named with every other absent one.
  SR_RETURN_IF_ERROR(WaitForRanks(*store, "gloo_mesh/", size, rank, deadline,
                                  StrCat("rank ", rank, " waiting for its peers' addresses")));
  std::atomic<int> connecting{-1};
  Watchdog watchdog(this, deadline, &connecting);
  for (int r = 0; r < size; ++r) {
    if (r == rank) continue;
    std::vector<uint8_t> theirs;
    SR_RETURN_IF_ERROR(store->Get(MeshKey(r), left(), &theirs));
    // Rank r listed one address per other rank, in rank order, skipping itself.
    const size_t index = static_cast<size_t>(rank < r ? rank : rank - 1);
    if (theirs.size() != static_cast<size_t>(size - 1) * address_bytes) {
      return Status::Remote("rank ", r, " published ", theirs.size(),
                            " bytes of pair addresses, expected ", (size - 1) * address_bytes,
                            " (a different libshardrec or Gloo build on that rank?)");
    }
    const auto begin = theirs.begin() + static_cast<std::ptrdiff_t>(index * address_bytes);
    // Published before the check, so the watchdog either finds this pair or was seen here.
    std::vector<char> pair_address(begin, begin + static_cast<std::ptrdiff_t>(address_bytes));
    PeerAddress peer;
    if (ParseGlooTcpAddress(r, pair_address, &peer)) peers_.push_back(std::move(peer));
    connecting.store(r);
    if (watchdog.expired()) {
      return Status::Timeout("connecting to rank ", r, " did not start before the deadline");
    }
    pairs->getPair(r)->connect(pair_address);
  }
  // The deadline may have passed just as the last connect returned: that pair was failed.
  if (watchdog.Stop()) return Status::Timeout("connecting the pairs passed the deadline");
  return Status::Ok();
}

}  // namespace shardrec::comm
