// Launcher conventions (torchrun, Open MPI, MPICH, Slurm) read from variable maps, Slurm host
// lists, and a communicator met through the torchrun variables by ranks on threads.
#include "impl/comm/rendezvous/env_rendezvous.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "impl/comm/factory.h"
#include "tests/support/free_port.h"
#include "tests/support/spawn_ranks.h"

namespace shardrec::comm {
namespace {

std::vector<std::string> Expand(const std::string& list) {
  std::vector<std::string> hosts;
  Status s = ExpandSlurmHostList(list, &hosts);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return hosts;
}

TEST(CommEnvRendezvous, SlurmHostListsExpandInOrderKeepingPadding) {
  EXPECT_EQ(Expand("node[01-04,07],gpu5"),
            (std::vector<std::string>{"node01", "node02", "node03", "node04", "node07", "gpu5"}));
  EXPECT_EQ(Expand("a"), (std::vector<std::string>{"a"}));
  EXPECT_EQ(Expand("r[1-2]-n[8-10]"),
            (std::vector<std::string>{"r1-n8", "r1-n9", "r1-n10", "r2-n8", "r2-n9", "r2-n10"}));
  EXPECT_EQ(Expand("x[009-011]"), (std::vector<std::string>{"x009", "x010", "x011"}));
  std::vector<std::string> hosts;
  for (const char* bad : {"", "n[1-", "n[3-1]", "n[a]", "n]", "n[1],,m"}) {
    EXPECT_EQ(ExpandSlurmHostList(bad, &hosts).code(), Code::kInvalidArgument) << bad;
  }
  EXPECT_EQ(ExpandSlurmHostList("n[1-100]", &hosts, 10).code(), Code::kInvalidArgument);
}

TEST(CommEnvRendezvous, SlurmTasksPerNode) {
  int n = 0;
  ASSERT_TRUE(SlurmTasksOnNode("2(x3),1", 2, &n).ok());
  EXPECT_EQ(n, 2);
  ASSERT_TRUE(SlurmTasksOnNode("2(x3),1", 3, &n).ok());
  EXPECT_EQ(n, 1);
  EXPECT_EQ(SlurmTasksOnNode("2(x3),1", 4, &n).code(), Code::kInvalidArgument);
  EXPECT_EQ(SlurmTasksOnNode("2(x", 0, &n).code(), Code::kInvalidArgument);
}

TEST(CommEnvRendezvous, TorchrunVariables) {
  LaunchEnv e;
  const EnvVars env = {
      {"MASTER_ADDR", "10.1.2.3"},  {"MASTER_PORT", "29400"}, {"RANK", "5"},
      {"WORLD_SIZE", "8"},          {"LOCAL_RANK", "1"},      {"LOCAL_WORLD_SIZE", "4"},
      {"OMPI_COMM_WORLD_RANK", "0"}};  // torchrun comes first
  ASSERT_TRUE(ParseLaunchEnv(env, &e).ok());
  EXPECT_EQ(e.convention, "torchrun");
  EXPECT_EQ(e.rank, 5);
  EXPECT_EQ(e.world, 8);
  EXPECT_EQ(e.local_rank, 1);
  EXPECT_EQ(e.local_size, 4);
  EXPECT_EQ(e.master_host, "10.1.2.3");
  EXPECT_EQ(e.master_port, 29400);
  EXPECT_FALSE(e.has_token);
  // Under torchrun's agent store, MASTER_PORT is taken: the next port.
  EnvVars agent = env;
  agent["TORCHELASTIC_USE_AGENT_STORE"] = "True";
  ASSERT_TRUE(ParseLaunchEnv(agent, &e).ok());
  EXPECT_EQ(e.master_port, 29401);
}

void ExpectError(const EnvVars& env, Code code, const std::vector<std::string>& words) {
  LaunchEnv e;
  Status s = ParseLaunchEnv(env, &e);
  EXPECT_EQ(s.code(), code) << s.ToString();
  for (const std::string& w : words)
    EXPECT_NE(s.message().find(w), std::string::npos) << s.message() << " lacks " << w;
}

TEST(CommEnvRendezvous, ErrorsNameTheConventionAndTheVariable) {
  ExpectError({}, Code::kNotFound, {"torchrun", "mpirun", "srun"});
  ExpectError({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "1"}}, Code::kInvalidArgument,
              {"torchrun", "MASTER_ADDR"});
  ExpectError({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}}, Code::kInvalidArgument,
              {"torchrun", "MASTER_PORT"});
  ExpectError({{"RANK", "2"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}},
              Code::kInvalidArgument, {"torchrun", "RANK='2'"});
  ExpectError({{"RANK", "x"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}},
              Code::kInvalidArgument, {"RANK='x'"});
  ExpectError({{"RANK", " 0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}},
              Code::kInvalidArgument, {"RANK=' 0'"});
  ExpectError({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "70000"}},
              Code::kInvalidArgument, {"MASTER_PORT='70000'"});
  ExpectError({{"OMPI_COMM_WORLD_RANK", "0"}}, Code::kInvalidArgument,
              {"Open MPI", "OMPI_COMM_WORLD_SIZE"});
  // Open MPI over two hosts publishes no master address.
  ExpectError({{"OMPI_COMM_WORLD_RANK", "0"},
               {"OMPI_COMM_WORLD_SIZE", "4"},
               {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}},
              Code::kInvalidArgument, {"Open MPI", "MASTER_ADDR"});
  ExpectError({{"PMI_RANK", "0"}, {"PMI_SIZE", "2"}, {"MPI_LOCALNRANKS", "1"}},
              Code::kInvalidArgument, {"MPICH", "MASTER_ADDR", "several hosts"});
  // Without the local size nothing says the ranks share this host: the message names it.
  ExpectError({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2"}},
              Code::kInvalidArgument, {"MASTER_ADDR", "OMPI_COMM_WORLD_LOCAL_SIZE is missing"});
  ExpectError({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}}, Code::kInvalidArgument,
              {"Slurm", "SLURM_JOB_NODELIST"});
  ExpectError({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_JOB_NODELIST", "n[1-2]"}},
              Code::kInvalidArgument, {"Slurm", "SLURM_JOB_ID"});
  ExpectError({{"SLURM_PROCID", "0"},
               {"SLURM_NTASKS", "2"},
               {"SLURM_JOB_NODELIST", "n[1-"},
               {"SLURM_JOB_ID", "7"}},
              Code::kInvalidArgument, {"Slurm", "SLURM_JOB_NODELIST"});
}

TEST(CommEnvRendezvous, MpiAndSlurmVariables) {
  LaunchEnv e;
  // Open MPI on one host: loopback, port from the job id.
  ASSERT_TRUE(ParseLaunchEnv({{"OMPI_COMM_WORLD_RANK", "1"},
                              {"OMPI_COMM_WORLD_SIZE", "2"},
                              {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                              {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                              {"OMPI_MCA_ess_base_jobid", "1087045633"}},
                             &e)
                  .ok());
  EXPECT_EQ(e.convention, "Open MPI");
  EXPECT_EQ(e.master_host, "127.0.0.1");
  EXPECT_EQ(e.master_port, kJobPortBase + 1087045633 % kJobPortSpan);
  EXPECT_EQ(e.local_rank, 1);
  // One rank is on this host whatever the launcher says of local sizes.
  ASSERT_TRUE(
      ParseLaunchEnv({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "1"}}, &e).ok());
  EXPECT_EQ(e.master_host, "127.0.0.1");
  // MPICH with an exported master.
  ASSERT_TRUE(ParseLaunchEnv({{"PMI_RANK", "3"},
                              {"PMI_SIZE", "4"},
                              {"MPI_LOCALRANKID", "1"},
                              {"MPI_LOCALNRANKS", "2"},
                              {"MASTER_ADDR", "head"},
                              {"MASTER_PORT", "4000"}},
                             &e)
                  .ok());
  EXPECT_EQ(e.convention, "MPICH");
  EXPECT_EQ(e.master_host, "head");
  EXPECT_EQ(e.master_port, 4000);
  EXPECT_EQ(e.local_size, 2);
  // Slurm: rank 0's host is the first of the node list; the port follows the job id.
  ASSERT_TRUE(ParseLaunchEnv({{"SLURM_PROCID", "5"},
                              {"SLURM_NTASKS", "7"},
                              {"SLURM_LOCALID", "1"},
                              {"SLURM_NODEID", "2"},
                              {"SLURM_TASKS_PER_NODE", "2(x3),1"},
                              {"SLURM_JOB_NODELIST", "gpu[07-09],cpu1"},
                              {"SLURM_JOB_ID", "123456"}},
                             &e)
                  .ok());
  EXPECT_EQ(e.convention, "Slurm");
  EXPECT_EQ(e.rank, 5);
  EXPECT_EQ(e.world, 7);
  EXPECT_EQ(e.local_rank, 1);
  EXPECT_EQ(e.local_size, 2);
  EXPECT_EQ(e.master_host, "gpu07");
  EXPECT_EQ(e.master_port, kJobPortBase + 123456 % kJobPortSpan);
  // Tasks per node that do not fit the task count (or the local id) are refused, not believed.
  ExpectError({{"SLURM_PROCID", "0"},
               {"SLURM_NTASKS", "1"},
               {"SLURM_NODEID", "0"},
               {"SLURM_TASKS_PER_NODE", "2(x2)"},
               {"SLURM_JOB_NODELIST", "n1"},
               {"SLURM_JOB_ID", "7"}},
              Code::kInvalidArgument, {"SLURM_TASKS_PER_NODE=2(x2)", "SLURM_NTASKS=1"});
}

TEST(CommEnvRendezvous, TokenBecomesTheNonce) {
  const EnvVars base = {
      {"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "9"}};
  EnvVars a = base, b = base;
  a["SHARDREC_RENDEZVOUS_TOKEN"] = "secret-1";
  b["SHARDREC_RENDEZVOUS_TOKEN"] = "secret-2";
  LaunchEnv ea, eb, en;
  ASSERT_TRUE(ParseLaunchEnv(a, &ea).ok());
  ASSERT_TRUE(ParseLaunchEnv(b, &eb).ok());
  ASSERT_TRUE(ParseLaunchEnv(base, &en).ok());
  EXPECT_TRUE(ea.has_token);
  EXPECT_NE(ea.nonce, eb.nonce);
  EXPECT_NE(ea.nonce, en.nonce);
}

// Ranks that spell rank 0's address differently (127.0.0.1 on rank 0, an interface address or a
// name elsewhere) belong to one session; a restarted attempt (torchrun's agent raises
// TORCHELASTIC_RESTART_COUNT) does not meet a rank left from the previous one.
TEST(CommEnvRendezvous, NonceIgnoresAddressSpellingButNotRestartCount) {
  const EnvVars base = {{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "9"}};
  EnvVars loop = base, ip = base, name = base;
  loop["MASTER_ADDR"] = "127.0.0.1";
  ip["MASTER_ADDR"] = "10.1.2.3";
  name["MASTER_ADDR"] = "trainer-node-0-0.trainer";
  LaunchEnv el, ei, en;
  ASSERT_TRUE(ParseLaunchEnv(loop, &el).ok());
  ASSERT_TRUE(ParseLaunchEnv(ip, &ei).ok());
  ASSERT_TRUE(ParseLaunchEnv(name, &en).ok());
  EXPECT_EQ(el.nonce, ei.nonce);
  EXPECT_EQ(el.nonce, en.nonce);
  for (const char* token : {"", "secret"}) {
    EnvVars first = ip, second = ip;
    if (*token != '\0')
      first["SHARDREC_RENDEZVOUS_TOKEN"] = second["SHARDREC_RENDEZVOUS_TOKEN"] = token;
    first["TORCHELASTIC_RESTART_COUNT"] = "0";
    second["TORCHELASTIC_RESTART_COUNT"] = "1";
    LaunchEnv e1, e2;
    ASSERT_TRUE(ParseLaunchEnv(first, &e1).ok());
    ASSERT_TRUE(ParseLaunchEnv(second, &e2).ok());
    EXPECT_NE(e1.nonce, e2.nonce) << "token '" << token << "'";
    EXPECT_EQ(e2.restart_count, "1");
    EXPECT_EQ(e2.attempt, 2u);  // told to the store: count + 1
  }
}

// Kubeflow Trainer v2 sets only PET_*: the rank is node x processes per node + LOCAL_RANK, and
// several processes per node without torchrun need LOCAL_RANK (refused, naming it, without).
TEST(CommEnvRendezvous, KubeflowTrainerPetVariables) {
  const EnvVars one = {{"PET_NNODES", "3"},
                       {"PET_NPROC_PER_NODE", "1"},
                       {"PET_NODE_RANK", "2"},
                       {"PET_MASTER_ADDR", "job-node-0-0.job"},
                       {"PET_MASTER_PORT", "29400"}};
  LaunchEnv e;
  ASSERT_TRUE(ParseLaunchEnv(one, &e).ok());
  EXPECT_EQ(e.convention, "Kubeflow Trainer");
  EXPECT_EQ(e.rank, 2);
  EXPECT_EQ(e.world, 3);
  EXPECT_EQ(e.local_rank, 0);
  EXPECT_EQ(e.local_size, 1);
  EXPECT_EQ(e.master_host, "job-node-0-0.job");
  EXPECT_EQ(e.master_port, 29400);
  EnvVars two = one;
  two["PET_NPROC_PER_NODE"] = "2";
  ExpectError(two, Code::kInvalidArgument, {"LOCAL_RANK", "PET_NPROC_PER_NODE"});
  two["LOCAL_RANK"] = "1";
  ASSERT_TRUE(ParseLaunchEnv(two, &e).ok());
  EXPECT_EQ(e.rank, 5);
  EXPECT_EQ(e.world, 6);
  EXPECT_EQ(e.local_size, 2);
  two["LOCAL_RANK"] = "2";
  ExpectError(two, Code::kInvalidArgument, {"LOCAL_RANK='2'"});
  EnvVars bad = one;
  bad["PET_NPROC_PER_NODE"] = "auto";
  ExpectError(bad, Code::kInvalidArgument, {"PET_NPROC_PER_NODE='auto'"});
  bad = one;
  bad.erase("PET_MASTER_ADDR");
  ExpectError(bad, Code::kInvalidArgument, {"PET_MASTER_ADDR"});
  // Under torchrun (which Kubeflow's image runs) RANK is read first.
  EnvVars torchrun = one;
  torchrun["RANK"] = "0";
  torchrun["WORLD_SIZE"] = "3";
  torchrun["MASTER_ADDR"] = "h";
  torchrun["MASTER_PORT"] = "9";
  ASSERT_TRUE(ParseLaunchEnv(torchrun, &e).ok());
  EXPECT_EQ(e.convention, "torchrun");
}

using shardrec::testing::FreePort;

// Three ranks on threads, each given its own torchrun variables (rank 0 started last, so the
// others must retry until its store is up), meet and all-reduce.
TEST(CommEnvRendezvous, RanksMeetThroughTorchrunVariables) {
  const std::string port = std::to_string(FreePort());
  CommOptions opts;
  opts.timeout = std::chrono::milliseconds(20000);
  shardrec::testing::SpawnRanks(3, [&](int r) {
    if (r == 0) std::this_thread::sleep_for(std::chrono::milliseconds(300));
    const EnvVars env = {{"MASTER_ADDR", "localhost"},      {"MASTER_PORT", port},
                         {"RANK", std::to_string(r)},       {"WORLD_SIZE", "3"},
                         {"LOCAL_RANK", std::to_string(r)}, {"LOCAL_WORLD_SIZE", "3"},
                         {"SHARDREC_RENDEZVOUS_TOKEN", "t"}};
    std::unique_ptr<Communicator> c;
    LaunchEnv e;
    Status s = CreateCommunicatorFromEnv(env, opts, &c, &e);
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(c->Rank(), r);
    EXPECT_EQ(e.local_rank, r);
    int64_t v = r + 1;
    ASSERT_TRUE(c->AllReduce(&v, &v, 1, DType::kInt64, ReduceOp::kSum).ok());
    EXPECT_EQ(v, 6);
  });
}

// A store host name that does not resolve (yet) is looked up again until the timeout, on rank 0
// too, and never resolving is a timeout naming it, on time (.invalid never resolves, RFC 2606).
TEST(CommEnvRendezvous, AnUnresolvableStoreHostTimesOutNamingIt) {
  CommOptions opts;
  opts.timeout = std::chrono::milliseconds(700);
  for (const char* rank : {"0", "1"}) {
    const EnvVars env = {{"MASTER_ADDR", "no-such-host.invalid"},
                         {"MASTER_PORT", std::to_string(FreePort())},
                         {"RANK", rank},
                         {"WORLD_SIZE", "2"}};
    std::unique_ptr<Communicator> c;
    const auto t0 = std::chrono::steady_clock::now();
    Status s = CreateCommunicatorFromEnv(env, opts, &c);
    const auto took = std::chrono::steady_clock::now() - t0;
    EXPECT_EQ(s.code(), Code::kTimeout) << "rank " << rank << ": " << s.ToString();
    EXPECT_NE(s.message().find("no-such-host.invalid"), std::string::npos) << s.message();
    EXPECT_GE(took, std::chrono::milliseconds(650)) << "rank " << rank << " gave up early";
    EXPECT_LT(took, std::chrono::milliseconds(1500)) << "rank " << rank << " overran";
  }
}

// A rank whose token differs is refused by the store; on a launcher's port that store could be
// a previous session's still going away, so the rank says so at its timeout, not at once.
TEST(CommEnvRendezvous, AWrongTokenIsRefused) {
  const std::string port = std::to_string(FreePort());
  CommOptions opts;
  opts.timeout = std::chrono::milliseconds(1500);
  shardrec::testing::SpawnRanks(2, [&](int r) {
    if (r == 1) std::this_thread::sleep_for(std::chrono::milliseconds(200));
    const EnvVars env = {{"MASTER_ADDR", "127.0.0.1"},
                         {"MASTER_PORT", port},
                         {"RANK", std::to_string(r)},
                         {"WORLD_SIZE", "2"},
                         {"SHARDREC_RENDEZVOUS_TOKEN", r == 0 ? "right" : "wrong"}};
    std::unique_ptr<Communicator> c;
    Status s = CreateCommunicatorFromEnv(env, opts, &c);
    EXPECT_FALSE(s.ok());
    if (r == 1) {
      EXPECT_EQ(s.code(), Code::kRemote) << s.ToString();
      EXPECT_NE(s.message().find("torchrun launch"), std::string::npos) << s.message();
      EXPECT_NE(s.message().find("belongs to another session"), std::string::npos) << s.message();
    }
  });
}

}  // namespace
}  // namespace shardrec::comm
