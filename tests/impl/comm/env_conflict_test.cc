// Launcher variables that contradict each other: torchrun's RANK / WORLD_SIZE left over in the
// environment of every process under mpirun or srun, and two processes started as rank 0. They
// are not refused (torchrun under srun or mpirun sets both legitimately) but named in errors.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <thread>

#include "impl/comm/factory.h"
#include "impl/comm/rendezvous/env_rendezvous.h"
#include "tests/support/free_port.h"

namespace shardrec::comm {
namespace {

using shardrec::testing::FreePort;

bool Has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(CommEnvConflict, TorchrunUnderSrunOrMpirunIsReadAsTorchrunAndNotRefused) {
  // srun, one task per node, each running torchrun --nproc-per-node 4: worker 5 of 8 on node 1.
  const EnvVars nested = {
      {"MASTER_ADDR", "n1"}, {"MASTER_PORT", "29500"},        {"RANK", "5"},
      {"WORLD_SIZE", "8"},   {"TORCHELASTIC_RUN_ID", "j"},    {"SLURM_PROCID", "1"},
      {"SLURM_NTASKS", "2"}, {"SLURM_JOB_NODELIST", "n[1-2]"}};
  LaunchEnv e;
  ASSERT_TRUE(ParseLaunchEnv(nested, &e).ok());
  EXPECT_EQ(e.convention, "torchrun");
  EXPECT_EQ(e.rank, 5);
  EXPECT_EQ(e.world, 8);
  EXPECT_EQ(e.rank_var, "RANK");
  EXPECT_EQ(e.disagreeing, "SLURM_PROCID=1, SLURM_NTASKS=2");
  // The same numbers from both (a wrapper exporting mpirun's): nothing to note.
  const EnvVars copied = {
      {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"},          {"RANK", "1"},
      {"WORLD_SIZE", "2"},  {"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"}};
  ASSERT_TRUE(ParseLaunchEnv(copied, &e).ok());
  EXPECT_EQ(e.disagreeing, "");
}

// A leftover RANK=0 WORLD_SIZE=1 under mpirun -np 2 without MASTER_ADDR: the error says that
// mpirun's own variables disagree.
TEST(CommEnvConflict, AParseErrorNotesTheDisagreeingLauncher) {
  const EnvVars stale = {{"RANK", "0"},
                         {"WORLD_SIZE", "1"},
                         {"OMPI_COMM_WORLD_RANK", "1"},
                         {"OMPI_COMM_WORLD_SIZE", "2"}};
  LaunchEnv e;
  const Status s = ParseLaunchEnv(stale, &e);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_TRUE(Has(s.message(), "MASTER_ADDR")) << s.message();
  EXPECT_TRUE(Has(s.message(), "OMPI_COMM_WORLD_RANK=1, OMPI_COMM_WORLD_SIZE=2")) << s.message();
  EXPECT_TRUE(Has(s.message(), "left over")) << s.message();
}

// Two processes started as rank 0 on one port (here: two threads): the second's failure to
// listen said only "Address already in use"; it now says what most likely happened, naming the
// variables read and mpirun's that disagree.
TEST(CommEnvConflict, ASecondRankZeroIsToldWhyThePortIsTaken) {
  const std::string port = std::to_string(FreePort());
  CommOptions opts;
  opts.timeout = std::chrono::milliseconds(1000);
  opts.store_grace = std::chrono::milliseconds(100);
  const EnvVars first = {
      {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", port},         {"RANK", "0"},
      {"WORLD_SIZE", "2"},          {"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2"}};
  EnvVars second = first;
  second["OMPI_COMM_WORLD_RANK"] = "1";
  Status first_status;
  std::thread host([&] {
    std::unique_ptr<Communicator> c;
    first_status = CreateCommunicatorFromEnv(first, opts, &c);  // waits for a rank 1 in vain
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  std::unique_ptr<Communicator> c;
  const Status s = CreateCommunicatorFromEnv(second, opts, &c);
  host.join();
  EXPECT_EQ(first_status.code(), Code::kTimeout) << first_status.ToString();
  EXPECT_EQ(s.code(), Code::kIo) << s.ToString();
  EXPECT_TRUE(Has(s.message(), "port " + port + " is already in use")) << s.message();
  EXPECT_TRUE(Has(s.message(), "two processes were started as rank 0")) << s.message();
  EXPECT_TRUE(Has(s.message(), "RANK=0 and WORLD_SIZE=2")) << s.message();
  EXPECT_TRUE(Has(s.message(), "OMPI_COMM_WORLD_RANK=1")) << s.message();
}

}  // namespace
}  // namespace shardrec::comm
