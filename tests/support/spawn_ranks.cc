// Thread-per-rank runner for multi-rank tests.
#include "tests/support/spawn_ranks.h"

#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace shardrec::testing {

void SpawnRanks(int world, const std::function<void(int rank)>& fn) {
  std::vector<std::thread> threads;
  std::exception_ptr first;
  std::mutex mu;
  threads.reserve(world);
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      try {
        fn(r);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu);
        if (!first) first = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  if (first) std::rethrow_exception(first);
}

}  // namespace shardrec::testing
