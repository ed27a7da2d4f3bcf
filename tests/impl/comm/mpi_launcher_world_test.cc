// The MPI singleton check (impl/comm/mpi/launcher_world.h) over made-up environments: a world of
// one process under a launcher that announces more is refused naming both; nothing else is.
#include <gtest/gtest.h>

#include <string>

#include "impl/comm/mpi/launcher_world.h"

namespace shardrec::comm::mpi {
namespace {

TEST(CommMpiLauncherWorld, ASingletonUnderALauncherOfMoreIsRefusedNamingBoth) {
  for (const char* var : {"WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS"}) {
    const Status s = CheckWorldAgainstLauncher({{var, "2"}}, 1);
    EXPECT_EQ(s.code(), Code::kInvalidArgument) << var;
    EXPECT_NE(s.message().find("MPI's world has 1 process"), std::string::npos) << s.ToString();
    EXPECT_NE(s.message().find(std::string(var) + "=2"), std::string::npos) << s.ToString();
  }
  // The first convention present is named, as shardrec_comm_create_from_env reads them.
  const Status s = CheckWorldAgainstLauncher({{"SLURM_NTASKS", "4"}, {"WORLD_SIZE", "8"}}, 1);
  EXPECT_NE(s.message().find("WORLD_SIZE=8"), std::string::npos) << s.ToString();
}

TEST(CommMpiLauncherWorld, EverythingElseIsAccepted) {
  EXPECT_TRUE(CheckWorldAgainstLauncher({}, 1).ok());
  EXPECT_TRUE(CheckWorldAgainstLauncher({{"WORLD_SIZE", "1"}}, 1).ok());
  EXPECT_TRUE(CheckWorldAgainstLauncher({{"WORLD_SIZE", ""}}, 1).ok());
  EXPECT_TRUE(CheckWorldAgainstLauncher({{"WORLD_SIZE", "two"}}, 1).ok());
  // A real MPI world wins over a variable left over from another launch.
  EXPECT_TRUE(CheckWorldAgainstLauncher({{"WORLD_SIZE", "1"}, {"RANK", "0"}}, 2).ok());
  EXPECT_TRUE(CheckWorldAgainstLauncher({{"WORLD_SIZE", "8"}}, 2).ok());
}

}  // namespace
}  // namespace shardrec::comm::mpi
