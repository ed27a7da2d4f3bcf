// shardrec_comm_create_tcp: rank 0's address handed in code (as Ray Train does). Ranks on
// threads meet through it, rank 0 spelling the address differently; leftover launcher variables
// do not override the arguments; bad arguments are refused naming them; an absent rank 0 fails
// at the timeout naming the explicit launch.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "shardrec/comm.h"
#include "shardrec/common.h"
#include "tests/support/free_port.h"

namespace {

using shardrec::testing::FreePort;

shardrec_comm_options_t Options(int64_t timeout_ms) {
  shardrec_comm_options_t o = SHARDREC_COMM_OPTIONS_INIT;
  o.timeout_ms = timeout_ms;
  return o;
}

// World `n` on threads; rank r passes addrs[r]. Each rank's allreduce of its rank + 1 and its
// local size go to sums / locals.
void MeetOnThreads(int n, const std::vector<std::string>& addrs, int port, std::vector<float>* sums,
                   std::vector<int32_t>* locals) {
  sums->assign(n, -1);
  locals->assign(n, -1);
  std::vector<std::thread> ranks;
  for (int r = 0; r < n; ++r) {
    ranks.emplace_back([&, r] {
      const shardrec_comm_options_t o = Options(20000);
      shardrec_comm_t* comm = nullptr;
      const shardrec_status_t st =
          shardrec_comm_create_tcp(&comm, addrs[r].c_str(), port, r, n, &o);
      ASSERT_EQ(st, SHARDREC_OK) << "rank " << r << ": " << shardrec_last_error();
      float v = static_cast<float>(r + 1);
      ASSERT_EQ(shardrec_comm_allreduce(comm, &v, &v, 1, SHARDREC_DTYPE_FLOAT32,
                                        SHARDREC_REDUCE_SUM, nullptr),
                SHARDREC_OK)
          << shardrec_last_error();
      (*sums)[r] = v;
      EXPECT_EQ(shardrec_comm_local_size(&(*locals)[r], comm), SHARDREC_OK);
      // Rank 0 hosts the store: destroyed last, so the others have left it.
      if (r == 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
      shardrec_comm_destroy(comm);
    });
  }
  for (std::thread& t : ranks) t.join();
}

TEST(CapiCommTcp, RanksMeetAtTheAddressGivenInCode) {
  std::vector<float> sums;
  std::vector<int32_t> locals;
  // Rank 0 says localhost, the others its numeric address: the same store all the same.
  MeetOnThreads(3, {"localhost", "127.0.0.1", "127.0.0.1"}, FreePort(), &sums, &locals);
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(sums[r], 6.0f) << "rank " << r;
    EXPECT_EQ(locals[r], 3) << "rank " << r;  // one host: from the host identity
  }
}

TEST(CapiCommTcp, LauncherVariablesLeftInTheEnvironmentAreIgnored) {
  // A torchrun launch's leftovers that would place every thread at rank 5 of 9 on another store.
  setenv("RANK", "5", 1);
  setenv("WORLD_SIZE", "9", 1);
  setenv("MASTER_ADDR", "no-such-host.invalid", 1);
  setenv("MASTER_PORT", "1", 1);
  setenv("LOCAL_WORLD_SIZE", "7", 1);
  std::vector<float> sums;
  std::vector<int32_t> locals;
  MeetOnThreads(2, {"127.0.0.1", "127.0.0.1"}, FreePort(), &sums, &locals);
  for (const char* v : {"RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "LOCAL_WORLD_SIZE"})
    unsetenv(v);
  EXPECT_EQ(sums, (std::vector<float>{3.0f, 3.0f}));
  EXPECT_EQ(locals, (std::vector<int32_t>{2, 2}));
}

TEST(CapiCommTcp, BadArgumentsAreRefusedNamingThem) {
  const shardrec_comm_options_t o = Options(1000);
  shardrec_comm_t* comm = reinterpret_cast<shardrec_comm_t*>(0x1);
  EXPECT_EQ(shardrec_comm_create_tcp(nullptr, "127.0.0.1", 29500, 0, 1, &o), SHARDREC_EINVAL);
  struct Case {
    const char* addr;
    int32_t port, rank, world;
    const char* named;
  };
  for (const Case& c :
       {Case{nullptr, 29500, 0, 1, "addr"}, Case{"", 29500, 0, 1, "addr"},
        Case{"127.0.0.1", 0, 0, 1, "port"}, Case{"127.0.0.1", 65536, 0, 1, "port"},
        Case{"127.0.0.1", 29500, -1, 2, "rank"}, Case{"127.0.0.1", 29500, 2, 2, "rank"},
        Case{"127.0.0.1", 29500, 0, 0, "world_size"}}) {
    comm = reinterpret_cast<shardrec_comm_t*>(0x1);
    EXPECT_EQ(shardrec_comm_create_tcp(&comm, c.addr, c.port, c.rank, c.world, &o), SHARDREC_EINVAL)
        << c.named;
    EXPECT_EQ(comm, nullptr);
    EXPECT_NE(std::string(shardrec_last_error()).find(c.named), std::string::npos)
        << shardrec_last_error();
  }
  shardrec_comm_options_t bad = Options(1000);
  bad.timeout_ms = -1;
  EXPECT_EQ(shardrec_comm_create_tcp(&comm, "127.0.0.1", 29500, 0, 1, &bad), SHARDREC_EINVAL);
  EXPECT_EQ(comm, nullptr);
}

TEST(CapiCommTcp, ARankWhoseRankZeroNeverComesFailsAtItsTimeoutNamingTheLaunch) {
  const shardrec_comm_options_t o = Options(500);
  shardrec_comm_t* comm = nullptr;
  const auto start = std::chrono::steady_clock::now();
  const shardrec_status_t st = shardrec_comm_create_tcp(&comm, "127.0.0.1", FreePort(), 1, 2, &o);
  EXPECT_TRUE(st == SHARDREC_ETIMEOUT || st == SHARDREC_EREMOTE) << shardrec_status_string(st);
  EXPECT_EQ(comm, nullptr);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  const std::string msg = shardrec_last_error();
  EXPECT_NE(msg.find("explicit TCP launch (rank 1 of 2"), std::string::npos) << msg;
}

}  // namespace
