// MeshContext::ConnectMesh: pair creation, the address exchange and the deadline's watchdog.
#include "impl/comm/gloo_mesh.h"

#include <gloo/transport/context.h>
#include <gloo/transport/device.h>

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "impl/comm/gloo_interrupt.h"
#include "impl/core/check.h"

namespace shardrec::comm {

namespace {

using Clock = std::chrono::steady_clock;

std::string MeshKey(int rank) { return StrCat("gloo_mesh/", rank); }

// Fails the context's pairs at the deadline unless stopped first.
class Watchdog {
 public:
  Watchdog(gloo::Context* context, Clock::time_point deadline)
      : thread_([this, context, deadline] {
          std::unique_lock<std::mutex> lock(mu_);
          if (cv_.wait_until(lock, deadline, [this] { return stopped_; })) return;
          InterruptGlooContext(*context, context->rank, context->size,
                               "shardrec: connecting the communicator passed its timeout");
        }) {}
  ~Watchdog() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopped_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopped_ = false;
  std::thread thread_;  // last: it starts once the members it uses exist
};

}  // namespace

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
  std::vector<uint8_t> addresses;
  size_t address_bytes = 0;
  for (int r = 0; r < size; ++r) {
    if (r == rank) continue;
    const std::vector<char> bytes = pairs->createPair(r)->address().bytes();
    address_bytes = bytes.size();
    addresses.insert(addresses.end(), bytes.begin(), bytes.end());
  }
  SR_RETURN_IF_ERROR(store->Set(MeshKey(rank), addresses));
  // getPair (the watchdog's interrupt, and every collective later) reads these.
  device_ = device;
  transportContext_ = pairs;

  Watchdog watchdog(this, deadline);
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
    pairs->getPair(r)->connect(
        std::vector<char>(begin, begin + static_cast<std::ptrdiff_t>(address_bytes)));
  }
  return Status::Ok();
}

}  // namespace shardrec::comm
