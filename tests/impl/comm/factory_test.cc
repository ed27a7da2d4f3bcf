// Which backend and device each rank of a local group gets: NCCL spreads ranks over consecutive
// GPUs (it refuses two ranks of one communicator on one GPU), Gloo keeps every rank on the
// caller's device, and a NCCL group that cannot be created names the devices it needed.
#include "impl/comm/factory.h"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

namespace shardrec::comm {
namespace {

TEST(CommFactory, AutoPicksNcclOnlyForCuda) {
  CommOptions options;
  EXPECT_FALSE(UsesNccl(options));
  options.device = Device::Cuda(0);
  EXPECT_TRUE(UsesNccl(options));
  options.backend = Backend::kGloo;
  EXPECT_FALSE(UsesNccl(options));
  options.backend = Backend::kNccl;
  options.device = Device::Host();
  EXPECT_TRUE(UsesNccl(options));
}

TEST(CommFactory, NcclLocalGroupTakesOneGpuPerRank) {
  CommOptions options;
  options.device = Device::Cuda(2);
  EXPECT_EQ(LocalGroupDevice(options, 0), Device::Cuda(2));
  EXPECT_EQ(LocalGroupDevice(options, 3), Device::Cuda(5));
}

TEST(CommFactory, GlooLocalGroupSharesTheDevice) {
  CommOptions options;
  options.backend = Backend::kGloo;
  options.device = Device::Cuda(1);
  EXPECT_EQ(LocalGroupDevice(options, 0), Device::Cuda(1));
  EXPECT_EQ(LocalGroupDevice(options, 3), Device::Cuda(1));
  options.device = Device::Host();
  EXPECT_EQ(LocalGroupDevice(options, 2), Device::Host());
}

TEST(CommFactory, NcclOnHostIsRefusedForEveryRank) {
  CommOptions options;
  options.backend = Backend::kNccl;
  std::vector<std::unique_ptr<Communicator>> comms;
  Status s = CreateLocalGroup(2, options, &comms);
  EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("needs a CUDA device"), std::string::npos) << s.ToString();
  EXPECT_TRUE(comms.empty());
}

}  // namespace
}  // namespace shardrec::comm
