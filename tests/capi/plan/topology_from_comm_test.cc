// shardrec_topology_from_comm through the public C API: world and local size from threads of one
// process, a plan equal to one made by hand, bad input, and hosts with different local sizes
// (forked ranks told different LOCAL_WORLD_SIZE values). A binary of its own so that its forks
// precede any thread.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "shardrec/comm.h"
#include "shardrec/config.h"
#include "shardrec/plan.h"
#include "tests/support/free_port.h"

namespace {

bool HasText(const char* fragment) {
  return std::strstr(shardrec_last_error(), fragment) != nullptr;
}

using shardrec::testing::FreePort;

// A forked rank of a 2-rank torchrun-style job that claims `local_size` ranks on its host.
// Exit status: 0 when shardrec_topology_from_comm refused with EINVAL naming both sizes and left
// the topology as it was; otherwise the number of the failed check.
int RankWithLocalSize(int port, int rank, int local_size) {
  setenv("MASTER_ADDR", "127.0.0.1", 1);
  setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
  setenv("WORLD_SIZE", "2", 1);
  setenv("RANK", std::to_string(rank).c_str(), 1);
  setenv("LOCAL_WORLD_SIZE", std::to_string(local_size).c_str(), 1);
  setenv("LOCAL_RANK", std::to_string(local_size - 1).c_str(), 1);
  shardrec_comm_options_t o = SHARDREC_COMM_OPTIONS_INIT;
  o.timeout_ms = 10000;
  o.store_grace_ms = 200;
  shardrec_comm_t* comm = nullptr;
  if (shardrec_comm_create_from_env(&comm, &o) != SHARDREC_OK) return 2;
  shardrec_topology_t t = SHARDREC_TOPOLOGY_INIT;
  t.world_size = 7;
  t.ranks_per_node = 7;
  int code = 0;
  if (shardrec_topology_from_comm(&t, comm) != SHARDREC_EINVAL)
    code = 3;
  else if (!HasText("between 1 and 2"))
    code = 4;
  else if (t.world_size != 7 || t.ranks_per_node != 7)
    code = 5;
  shardrec_comm_destroy(comm);
  return code;
}

TEST(CapiTopologyFromComm, HostsWithDifferentLocalSizesAreRefusedOnEveryRank) {
  const int port = FreePort();
  ASSERT_GT(port, 0);
  std::vector<pid_t> pids;
  for (int rank = 0; rank < 2; ++rank) {
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) _exit(RankWithLocalSize(port, rank, rank + 1));
    pids.push_back(pid);
  }
  for (size_t rank = 0; rank < pids.size(); ++rank) {
    int status = 0;
    ASSERT_EQ(waitpid(pids[rank], &status, 0), pids[rank]);
    ASSERT_TRUE(WIFEXITED(status)) << "rank " << rank;
    EXPECT_EQ(WEXITSTATUS(status), 0) << "rank " << rank << " failed check " << WEXITSTATUS(status);
  }
}

std::string PlanJson(const shardrec_topology_t& topology) {
  const char* feature_names[] = {"f0", "f1", "f2"};
  std::vector<shardrec_feature_config_t> features(3);
  for (size_t i = 0; i < features.size(); ++i) {
    EXPECT_EQ(shardrec_feature_config_init(&features[i], SHARDREC_FEATURE_CONFIG_VERSION),
              SHARDREC_OK);
    features[i].name = feature_names[i];
  }
  const int32_t user_features[] = {0, 1};
  const int32_t item_features[] = {2};
  shardrec_table_config_t tables[2] = {SHARDREC_TABLE_CONFIG_INIT, SHARDREC_TABLE_CONFIG_INIT};
  tables[0].name = "user";
  tables[0].rows = 100000;
  tables[0].dim = 64;
  tables[0].features = user_features;
  tables[0].num_features = 2;
  tables[1].name = "item";
  tables[1].rows = 3;
  tables[1].dim = 8;
  tables[1].features = item_features;
  tables[1].num_features = 1;
  shardrec_plan_t* plan = nullptr;
  EXPECT_EQ(shardrec_plan_create(&plan, tables, 2, features.data(), features.size(), &topology,
                                 nullptr, 0),
            SHARDREC_OK)
      << shardrec_last_error();
  if (plan == nullptr) return {};
  char* text = nullptr;
  size_t len = 0;
  EXPECT_EQ(shardrec_plan_to_json(plan, &text, &len), SHARDREC_OK);
  std::string json(text, len);
  shardrec_free(text);
  shardrec_plan_destroy(plan);
  return json;
}

TEST(CapiTopologyFromComm, LocalGroupFillsWorldAndNodeSizeAndPlansAsByHand) {
  constexpr int kRanks = 4;
  shardrec_comm_t* comms[kRanks] = {};
  ASSERT_EQ(shardrec_comm_create_local_group(comms, kRanks, nullptr), SHARDREC_OK)
      << shardrec_last_error();
  std::vector<shardrec_topology_t> filled(kRanks);
  std::vector<shardrec_status_t> got(kRanks, SHARDREC_ERROR);
  std::vector<std::thread> threads;
  for (int r = 0; r < kRanks; ++r) {
    threads.emplace_back([&, r] {
      shardrec_topology_t& t = filled[r];
      if (shardrec_topology_init(&t, SHARDREC_TOPOLOGY_VERSION) != SHARDREC_OK) return;
      t.batch_size = 256;  // a field the call must leave alone
      got[r] = shardrec_topology_from_comm(&t, comms[r]);
    });
  }
  for (auto& t : threads) t.join();

  shardrec_topology_t by_hand = SHARDREC_TOPOLOGY_INIT;
  by_hand.world_size = kRanks;
  by_hand.ranks_per_node = kRanks;
  by_hand.batch_size = 256;
  const std::string expected = PlanJson(by_hand);
  ASSERT_FALSE(expected.empty());
  for (int r = 0; r < kRanks; ++r) {
    ASSERT_EQ(got[r], SHARDREC_OK) << "rank " << r;
    EXPECT_EQ(filled[r].world_size, kRanks);
    EXPECT_EQ(filled[r].ranks_per_node, kRanks);
    EXPECT_EQ(filled[r].batch_size, 256);
    EXPECT_EQ(filled[r].device_type, SHARDREC_DEVICE_HOST);
    EXPECT_EQ(PlanJson(filled[r]), expected) << "rank " << r;
  }
  for (auto* c : comms) shardrec_comm_destroy(c);
}

TEST(CapiTopologyFromComm, ANullCommIsRefusedAlone) {
  shardrec_topology_t t = SHARDREC_TOPOLOGY_INIT;
  EXPECT_EQ(shardrec_topology_from_comm(&t, nullptr), SHARDREC_EINVAL);
  EXPECT_TRUE(HasText("comm")) << shardrec_last_error();
  EXPECT_EQ(shardrec_topology_from_comm(nullptr, nullptr), SHARDREC_EINVAL);
  const shardrec_topology_t init = SHARDREC_TOPOLOGY_INIT;
  EXPECT_EQ(t.world_size, init.world_size);
}

// The call is collective: a rank refusing its own topology (NULL, not initialised) refused it
// alone, before the all-reduce, while its peers waited there until their timeout. The refusal
// now rides in that all-reduce: every rank fails at once, the others naming the refusing rank,
// no topology changes, and the next call works on every rank.
TEST(CapiTopologyFromComm, ARankRefusingItsTopologyFailsEveryRankAtOnce) {
  shardrec_comm_t* comms[2] = {};
  shardrec_comm_options_t o = SHARDREC_COMM_OPTIONS_INIT;
  o.timeout_ms = 60000;
  ASSERT_EQ(shardrec_comm_create_local_group(comms, 2, &o), SHARDREC_OK);
  shardrec_topology_t t[2] = {SHARDREC_TOPOLOGY_INIT, SHARDREC_TOPOLOGY_INIT};
  std::string why[2];
  auto run = [&](int r) {
    for (int round = 0; round < 2; ++round) {
      shardrec_topology_t* given = &t[r];
      t[r].world_size = 3;
      t[r].version = SHARDREC_TOPOLOGY_VERSION;
      if (r == 1 && round == 0) given = nullptr;
      if (r == 1 && round == 1) t[r].version = 0;  // not initialised
      const auto start = std::chrono::steady_clock::now();
      EXPECT_EQ(shardrec_topology_from_comm(given, comms[r]), SHARDREC_EINVAL)
          << "rank " << r << " round " << round;
      why[r] = shardrec_last_error();
      const char* want = r == 0       ? "rank 1 refused its arguments"
                         : round == 0 ? "topology"
                                      : "version";
      EXPECT_NE(why[r].find(want), std::string::npos) << "rank " << r << ": " << why[r];
      EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10))
          << "rank " << r << " round " << round;
      EXPECT_EQ(t[r].world_size, 3) << "rank " << r;
      EXPECT_EQ(t[r].ranks_per_node, 0) << "rank " << r;
    }
    t[r].version = SHARDREC_TOPOLOGY_VERSION;
    EXPECT_EQ(shardrec_topology_from_comm(&t[r], comms[r]), SHARDREC_OK) << shardrec_last_error();
    EXPECT_EQ(t[r].world_size, 2);
    EXPECT_EQ(t[r].ranks_per_node, 2);
  };
  std::thread other(run, 1);
  run(0);
  other.join();
  for (auto* c : comms) shardrec_comm_destroy(c);
}

}  // namespace
