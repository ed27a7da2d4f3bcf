// Helpers shared by the comm tests: local groups and per-rank runners.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <vector>

#include "impl/comm/factory.h"
#include "tests/support/spawn_ranks.h"

namespace shardrec::comm::testutil {

using Comms = std::vector<std::unique_ptr<Communicator>>;

inline Comms MakeGroup(int n,
                       std::chrono::milliseconds timeout = std::chrono::milliseconds(20000)) {
  CommOptions opts;
  opts.timeout = timeout;
  Comms comms;
  Status s = CreateLocalGroup(n, opts, &comms);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return comms;
}

// Runs fn(rank, comm) on one thread per rank.
template <typename Fn>
void OnRanks(Comms& comms, Fn&& fn) {
  shardrec::testing::SpawnRanks(static_cast<int>(comms.size()),
                                [&](int r) { fn(r, *comms[static_cast<size_t>(r)]); });
}

}  // namespace shardrec::comm::testutil
