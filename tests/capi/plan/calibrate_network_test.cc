// shardrec_topology_calibrate_network through the public C API on ranks that are threads of one
// process (one host): nothing crosses a network, so the figure is 0 and inter_node_bandwidth is
// left as it is, while a collective round of both ranks is timed into collective_latency; a rank
// refusing its arguments fails every rank at once, nothing written. Measuring
// across hosts is the multihost_netbw test (network namespaces).
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>

#include "shardrec/comm.h"
#include "shardrec/config.h"
#include "shardrec/plan.h"

namespace {

TEST(CapiCalibrateNetwork, OneHostMeasuresNothingAndLeavesTheTopology) {
  shardrec_comm_t* comms[2] = {};
  ASSERT_EQ(shardrec_comm_create_local_group(comms, 2, nullptr), SHARDREC_OK);
  shardrec_topology_t t[2] = {SHARDREC_TOPOLOGY_INIT, SHARDREC_TOPOLOGY_INIT};
  double measured[2] = {-1, -1};
  auto run = [&](int r) {
    t[r].inter_node_bandwidth = 123.0;
    t[r].collective_latency = 123.0;
    EXPECT_EQ(shardrec_topology_calibrate_network(&t[r], comms[r], 0.2, &measured[r]), SHARDREC_OK)
        << shardrec_last_error();
  };
  std::thread other(run, 1);
  run(0);
  other.join();
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(measured[r], 0.0);
    EXPECT_EQ(t[r].inter_node_bandwidth, 123.0);
    // The round measured (seconds): far below the sentinel, the same on both ranks.
    EXPECT_GT(t[r].collective_latency, 0.0);
    EXPECT_LT(t[r].collective_latency, 1.0);
    EXPECT_EQ(t[r].collective_latency, t[0].collective_latency);
  }
  for (auto* c : comms) shardrec_comm_destroy(c);
}

TEST(CapiCalibrateNetwork, ARankRefusingItsArgumentsFailsEveryRankAtOnce) {
  shardrec_comm_t* comms[2] = {};
  shardrec_comm_options_t o = SHARDREC_COMM_OPTIONS_INIT;
  o.timeout_ms = 60000;
  ASSERT_EQ(shardrec_comm_create_local_group(comms, 2, &o), SHARDREC_OK);
  shardrec_topology_t t[2] = {SHARDREC_TOPOLOGY_INIT, SHARDREC_TOPOLOGY_INIT};
  std::string why[2];
  auto run = [&](int r) {
    for (double bad : {-1.0, 1e9}) {
      const auto start = std::chrono::steady_clock::now();
      EXPECT_EQ(shardrec_topology_calibrate_network(&t[r], comms[r], r == 1 ? bad : 0.2, nullptr),
                SHARDREC_EINVAL);
      why[r] = shardrec_last_error();
      EXPECT_NE(why[r].find(r == 0 ? "rank 1 refused its arguments" : "time_budget"),
                std::string::npos)
          << why[r];
      EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
    }
    t[r].version = 0;  // not initialised: refused on every rank, none waits
    EXPECT_EQ(shardrec_topology_calibrate_network(&t[r], comms[r], 0.2, nullptr), SHARDREC_EINVAL);
    EXPECT_EQ(t[r].inter_node_bandwidth, 0.0);
  };
  std::thread other(run, 1);
  run(0);
  other.join();
  EXPECT_EQ(shardrec_topology_calibrate_network(nullptr, nullptr, 0, nullptr), SHARDREC_EINVAL);
  for (auto* c : comms) shardrec_comm_destroy(c);
}

}  // namespace
