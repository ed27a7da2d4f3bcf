// The plugin loader and the plain-C boundary against fake plugins (tests/impl/cuda_plugin/
// fake_plugin.cc): every mismatch is refused with a message naming it, and a plugin that
// passes is used only through its table (codes and messages cross intact, long ones cut).
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "impl/comm/communicator.h"
#include "impl/comm/nccl/nccl_backend.h"
#include "impl/core/cuda_plugin.h"
#include "tests/impl/cuda_plugin/memory_store.h"
#include "tests/support/fresh_process.h"

namespace shardrec {
namespace {

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

Status Load(const char* path) {
  core::LoadedPlugin plugin;
  Status s = core::LoadCudaPlugin(path, &plugin);
  EXPECT_EQ(s.ok(), plugin.table != nullptr);
  return s;
}

TEST(PluginLoader, WrongAbiIsRefusedWithBothVersionsAndThePath) {
  const Status s = Load(SHARDREC_FAKE_PLUGIN_ABI);
  EXPECT_EQ(s.code(), Code::kNoDevice);
  EXPECT_TRUE(Contains(s.message(), "speaks plugin ABI 99")) << s.message();
  EXPECT_TRUE(Contains(s.message(), "needs " + std::to_string(SHARDREC_CUDA_PLUGIN_ABI_VERSION)))
      << s.message();
  EXPECT_TRUE(Contains(s.message(), SHARDREC_FAKE_PLUGIN_ABI)) << s.message();
}

// One version, one layout: a table of the right version but another size (another build's) is
// refused, naming both sizes and the file, and none of its entries is used.
TEST(PluginLoader, TableOfAnotherSizeIsRefused) {
  const Status s = Load(SHARDREC_FAKE_PLUGIN_SIZE);
  EXPECT_EQ(s.code(), Code::kNoDevice);
  const size_t size = sizeof(shardrec_cuda_plugin_table_t);
  EXPECT_TRUE(Contains(s.message(), std::to_string(size - 8) + " bytes")) << s.message();
  EXPECT_TRUE(Contains(s.message(), "needs ABI " +
                                        std::to_string(SHARDREC_CUDA_PLUGIN_ABI_VERSION) + " and " +
                                        std::to_string(size) + " bytes"))
      << s.message();
  EXPECT_TRUE(Contains(s.message(), SHARDREC_FAKE_PLUGIN_SIZE)) << s.message();
}

TEST(PluginLoader, TableWithAHoleIsRefusedByName) {
  const Status s = Load(SHARDREC_FAKE_PLUGIN_HOLE);
  EXPECT_EQ(s.code(), Code::kNoDevice);
  EXPECT_TRUE(Contains(s.message(), "no 'nccl_split' entry")) << s.message();
}

TEST(PluginLoader, OldDriverIsRefusedWithTheFix) {
  const Status s = Load(SHARDREC_FAKE_PLUGIN_OLD_DRIVER);
  EXPECT_EQ(s.code(), Code::kNoDevice);
  EXPECT_TRUE(Contains(s.message(), "supports CUDA up to 12.4")) << s.message();
  EXPECT_TRUE(Contains(s.message(), "built with CUDA 13.0")) << s.message();
  EXPECT_TRUE(Contains(s.message(), "driver 580")) << s.message();
}

TEST(PluginLoader, OlderNcclIsRefused) {
  const Status s = Load(SHARDREC_FAKE_PLUGIN_OLD_NCCL);
  EXPECT_EQ(s.code(), Code::kNoDevice);
  EXPECT_TRUE(Contains(s.message(), "NCCL library loaded is 2.23.4")) << s.message();
  EXPECT_TRUE(Contains(s.message(), "built with NCCL 2.28.9")) << s.message();
}

TEST(PluginLoader, GoodFakeLoadsAndNamesItsPath) {
  core::LoadedPlugin plugin;
  const Status s = core::LoadCudaPlugin(SHARDREC_FAKE_PLUGIN_GOOD, &plugin);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(plugin.path, "/fake/libshardrec_cuda.so");
}

// The good fake serves the runtime entries only (a test double): it loads, and the dense and
// embedding paths refuse it, naming the file and the entry.
TEST(PluginLoader, PluginWithoutKernelsLoadsButRefusesKernelCalls) {
  core::LoadedPlugin plugin;
  ASSERT_TRUE(core::LoadCudaPlugin(SHARDREC_FAKE_PLUGIN_GOOD, &plugin).ok());
  EXPECT_EQ(plugin.table->struct_size, sizeof(shardrec_cuda_plugin_table_t));
  const Status s = core::HasDenseEntries(*plugin.table, plugin.path);
  EXPECT_EQ(s.code(), Code::kUnsupported);
  EXPECT_TRUE(Contains(s.message(), "/fake/libshardrec_cuda.so")) << s.message();
  EXPECT_TRUE(Contains(s.message(), "'linear_forward'")) << s.message();
  const Status e = core::HasEmbeddingEntries(*plugin.table, plugin.path);
  EXPECT_EQ(e.code(), Code::kUnsupported);
  EXPECT_TRUE(Contains(e.message(), "'emb_status_bytes'")) << e.message();
}

TEST(PluginLoader, MissingFileAndForeignLibrary) {
  EXPECT_EQ(Load("/nonexistent/libshardrec_cuda.so.0").code(), Code::kNoDevice);
  const Status s = Load("libc.so.6");
  EXPECT_EQ(s.code(), Code::kNoDevice);
  EXPECT_TRUE(Contains(s.message(), "not a libshardrec CUDA plugin")) << s.message();
}

TEST(PluginLoader, VersionRules) {
  shardrec_plugin_versions_t v{13000, 22809, 13000, 13000, 22809};
  EXPECT_TRUE(core::CheckPluginVersions(v).ok());
  v.cuda_driver = 0;  // no driver: left to the device probe
  EXPECT_TRUE(core::CheckPluginVersions(v).ok());
  v.cuda_driver = 12090;
  EXPECT_EQ(core::CheckPluginVersions(v).code(), Code::kNoDevice);
  v.cuda_driver = 13020;
  v.nccl = 22810;  // a newer NCCL of the same major is fine
  EXPECT_TRUE(core::CheckPluginVersions(v).ok());
  v.nccl = 30000;  // another major is not
  EXPECT_EQ(core::CheckPluginVersions(v).code(), Code::kNoDevice);
  v.nccl = 0;
  EXPECT_EQ(core::CheckPluginVersions(v).code(), Code::kNoDevice);
}

TEST(PluginLoader, StatusCrossesTerminatedAndWithItsCode) {
  shardrec_plugin_status_t st{};
  std::memset(st.message, 'y', sizeof(st.message));  // no terminator at all
  const Status s = core::FromPlugin(static_cast<int32_t>(Code::kRemote), st);
  EXPECT_EQ(s.code(), Code::kRemote);
  EXPECT_EQ(s.message().size(), sizeof(st.message));
  shardrec_plugin_status_t empty{};
  EXPECT_FALSE(core::FromPlugin(static_cast<int32_t>(Code::kCuda), empty).message().empty());
  EXPECT_TRUE(core::FromPlugin(0, empty).ok());
}

// The process-wide loader, pointed at the good fake: the runtime and the NCCL bridge use the
// plugin only through its table.
int GoodFakeChild() {
  const core::CudaRuntime* rt = nullptr;
  if (!core::GetCudaRuntime(&rt).ok() || rt->DeviceCount() != 2) return 1;
  if (!core::CheckDevice(Device::Cuda(1)).ok()) return 2;
  const Status beyond = core::CheckDevice(Device::Cuda(2));
  if (beyond.code() != Code::kNoDevice || !Contains(beyond.message(), "cuda:2")) return 3;
  void* dev = nullptr;
  if (!rt->Malloc(1, 64, &dev).ok() || dev == nullptr) return 4;
  const char text[] = "through the table";
  char back[sizeof(text)] = {};
  if (!rt->MemcpyAsync(1, dev, text, sizeof(text), core::CopyKind::kHostToDevice, nullptr).ok())
    return 5;
  if (!rt->MemcpyAsync(1, back, dev, sizeof(text), core::CopyKind::kDeviceToHost, nullptr).ok())
    return 6;
  if (std::strcmp(back, text) != 0) return 7;
  if (!rt->Free(1, dev).ok()) return 8;
  const Status wait = rt->StreamWait(0, nullptr, 1000);
  if (wait.code() != Code::kTimeout || !Contains(wait.message(), "fake stream error:")) return 9;
  if (wait.message().size() != SHARDREC_PLUGIN_MESSAGE_BYTES - 1) return 10;
  if (rt->Malloc(7, 64, &dev).code() != Code::kInvalidArgument) return 11;
  // Rank 0 cannot make an NCCL id: it reports the plugin's error and publishes the failure.
  testing::MemoryStore store;
  std::unique_ptr<comm::Communicator> c;
  const Status r0 = comm::nccl::CreateNcclCommunicator(&store, "job", 2, 0, 0,
                                                       std::chrono::milliseconds(2000), &c);
  if (r0.code() != Code::kCuda || !Contains(r0.message(), "fake: no NCCL here")) return 12;
  std::vector<uint8_t> published{1};
  if (!store.Get("job/nccl_id", std::chrono::milliseconds(100), &published).ok()) return 13;
  if (!published.empty()) return 14;
  std::string path;
  if (!core::GetCudaPluginPath(&path).ok() || path != "/fake/libshardrec_cuda.so") return 15;
  return 0;
}

const int kGoodChild = testing::RegisterFreshChild("good_fake", &GoodFakeChild);

TEST(PluginLoader, ProcessLoaderUsesOnlyTheTable) {
  EXPECT_EQ(testing::RunFresh("good_fake", SHARDREC_FAKE_PLUGIN_GOOD), 0);
}

// An NCCL communicator (the fake embedding plugin's double, world 1) runs the checked prologue the
// host backends share before the plugin sees a call: a negative per-call timeout, an unknown
// dtype and a count span of the wrong length are refused with the shared wording
// (checked_communicator.h, call_checks.h), and a valid call still goes through.
int NcclPrologueChild() {
  testing::MemoryStore store;
  std::unique_ptr<comm::Communicator> c;
  if (!comm::nccl::CreateNcclCommunicator(&store, "job", 1, 0, 0, std::chrono::milliseconds(2000),
                                          &c)
           .ok())
    return 1;
  const core::CudaRuntime* rt = nullptr;
  void* dev = nullptr;
  if (!core::GetCudaRuntime(&rt).ok() || !rt->Malloc(0, 64, &dev).ok()) return 2;
  comm::CallOptions negative;
  negative.timeout = std::chrono::milliseconds(-5);
  const Status t = c->AllReduce(dev, dev, 4, DType::kFloat32, comm::ReduceOp::kSum, negative);
  if (t.code() != Code::kInvalidArgument || !Contains(t.message(), "must not be negative"))
    return 3;
  const Status d = c->Broadcast(dev, 4, static_cast<DType>(99), 0);
  if (d.code() != Code::kInvalidArgument || !Contains(d.message(), "dtype 99")) return 4;
  const size_t two[] = {1, 1};
  const Status n = c->AllToAllV(dev, two, dev, two, DType::kFloat32);
  if (n.code() != Code::kInvalidArgument || !Contains(n.message(), "has 2")) return 5;
  if (!c->AllReduce(dev, dev, 4, DType::kFloat32, comm::ReduceOp::kSum).ok()) return 6;
  if (!rt->Free(0, dev).ok()) return 7;
  return 0;
}

const int kNcclPrologueChild = testing::RegisterFreshChild("nccl_prologue", &NcclPrologueChild);

TEST(PluginLoader, NcclCommunicatorRunsTheCheckedPrologue) {
  EXPECT_EQ(testing::RunFresh("nccl_prologue", SHARDREC_FAKE_EMBEDDING_PLUGIN), 0);
}

int HoleChild() {
  const core::CudaRuntime* rt = nullptr;
  const Status s = core::GetCudaRuntime(&rt);
  if (s.code() != Code::kNoDevice || !Contains(s.message(), "nccl_split")) return 1;
  if (core::CheckDevice(Device::Cuda(0)).code() != Code::kNoDevice) return 2;
  return 0;
}

const int kHoleChild = testing::RegisterFreshChild("hole_fake", &HoleChild);

TEST(PluginLoader, ProcessLoaderReportsABadPluginOnEveryRequest) {
  EXPECT_EQ(testing::RunFresh("hole_fake", SHARDREC_FAKE_PLUGIN_HOLE), 0);
}

}  // namespace
}  // namespace shardrec
