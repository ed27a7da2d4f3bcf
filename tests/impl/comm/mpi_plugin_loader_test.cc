// Opening the MPI plugin: a missing file, a library that is not one and a plugin of another ABI
// version, each refused with the message a user needs. (The real plugin is loaded by the
// tests/capi/mpi suites; loading an MPI library into this binary would bring it into the
// sanitizer runs of every comm test.)
#include "impl/comm/mpi/mpi_plugin_loader.h"

#include <gtest/gtest.h>

#include <string>

namespace shardrec::comm::mpi {
namespace {

TEST(CommMpiPluginLoader, MissingFileIsUnsupportedNamingIt) {
  const shardrec_mpi_plugin_table_t* t = nullptr;
  const Status s = LoadMpiPlugin("/nonexistent/libshardrec_mpi.so.0", &t);
  EXPECT_EQ(s.code(), Code::kUnsupported);
  EXPECT_NE(s.message().find("/nonexistent/libshardrec_mpi.so.0"), std::string::npos)
      << s.ToString();
  EXPECT_EQ(t, nullptr);
}

TEST(CommMpiPluginLoader, ALibraryWithoutTheEntryPointIsNotAPlugin) {
  const shardrec_mpi_plugin_table_t* t = nullptr;
  const Status s = LoadMpiPlugin("libm.so.6", &t);
  EXPECT_EQ(s.code(), Code::kUnsupported);
  EXPECT_NE(s.message().find("is not a libshardrec MPI plugin"), std::string::npos) << s.ToString();
  EXPECT_EQ(t, nullptr);
}

TEST(CommMpiPluginLoader, AnotherAbiVersionIsRefusedNamingBoth) {
  const shardrec_mpi_plugin_table_t* t = nullptr;
  const Status s = LoadMpiPlugin(SHARDREC_FAKE_MPI_PLUGIN_OLD_ABI, &t);
  EXPECT_EQ(s.code(), Code::kUnsupported);
  EXPECT_NE(s.message().find("speaks plugin ABI 99 but this libshardrec needs " +
                             std::to_string(SHARDREC_MPI_PLUGIN_ABI_VERSION)),
            std::string::npos)
      << s.ToString();
  EXPECT_EQ(t, nullptr);
}

}  // namespace
}  // namespace shardrec::comm::mpi
