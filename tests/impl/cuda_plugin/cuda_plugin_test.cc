// White-box tests of the plugin loader (impl/core/cuda_plugin.cc) and the NCCL bridge
// (impl/comm/nccl) on any machine: without a GPU every request must be a clean kNoDevice
// (kUnsupported in a build without CUDA), consistent across calls and threads.
#include "impl/core/cuda_plugin.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "impl/comm/nccl/nccl_backend.h"
#include "impl/core/config.h"
#include "impl/embedding/gpu/dispatch.h"
#include "tests/impl/cuda_plugin/memory_store.h"
#include "tests/support/fresh_process.h"

namespace shardrec {
namespace {

constexpr Code kMissing = SHARDREC_HAVE_CUDA ? Code::kNoDevice : Code::kUnsupported;

bool HaveGpu() {
  const core::CudaRuntime* rt = nullptr;
  return core::GetCudaRuntime(&rt).ok() && rt->DeviceCount() > 0;
}

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(CoreCudaPlugin, RuntimeWithoutGpuIsNoDeviceAndCached) {
  if (HaveGpu()) GTEST_SKIP() << "a CUDA device is present";
  const core::CudaRuntime* rt = reinterpret_cast<const core::CudaRuntime*>(0x1);
  const Status first = core::GetCudaRuntime(&rt);
  EXPECT_EQ(first.code(), kMissing) << first.ToString();
  EXPECT_EQ(rt, nullptr);
#if SHARDREC_HAVE_CUDA
  // ctest points SHARDREC_CUDA_PLUGIN at the built plugin: it loads, then finds no device.
  EXPECT_TRUE(Contains(first.message(), "no CUDA device")) << first.message();
  EXPECT_TRUE(Contains(first.message(), "cudaGetDeviceCount")) << first.message();
#else
  EXPECT_TRUE(Contains(first.message(), "without CUDA")) << first.message();
#endif
  for (int i = 0; i < 3; ++i) {
    const Status again = core::GetCudaRuntime(&rt);
    EXPECT_EQ(again.code(), first.code());
    EXPECT_EQ(again.message(), first.message());
  }
  EXPECT_EQ(core::GetCudaRuntime(nullptr).code(), Code::kInvalidArgument);
}

TEST(CoreCudaPlugin, TableAndPathAgreeWithTheRuntime) {
  EXPECT_EQ(core::GetCudaPlugin(nullptr).code(), Code::kInvalidArgument);
  EXPECT_EQ(core::GetCudaPluginPath(nullptr).code(), Code::kInvalidArgument);
  const shardrec_cuda_plugin_table_t* table = nullptr;
  const Status s = core::GetCudaPlugin(&table);
  std::string path;
  const Status p = core::GetCudaPluginPath(&path);
  EXPECT_EQ(s.code(), p.code());
#if SHARDREC_HAVE_CUDA
  // ctest points SHARDREC_CUDA_PLUGIN at the built plugin: it loads on any machine (the
  // driver is only needed to find devices).
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(table->abi_version, SHARDREC_CUDA_PLUGIN_ABI_VERSION);
  EXPECT_TRUE(Contains(path, "libshardrec_cuda.so")) << path;
  shardrec_plugin_versions_t v{};
  table->versions(&v);
  EXPECT_GE(v.built_cuda_runtime, 13000);
  EXPECT_GT(v.nccl, 0);
  EXPECT_TRUE(core::CheckPluginVersions(v).ok());
  // Every entry is registered (plugin_table.cc): none is left NULL.
  EXPECT_EQ(table->struct_size, sizeof(shardrec_cuda_plugin_table_t));
  EXPECT_TRUE(core::HasDenseEntries(*table, path).ok());
  EXPECT_TRUE(core::HasEmbeddingEntries(*table, path).ok());
#else
  EXPECT_EQ(s.code(), Code::kUnsupported);
  EXPECT_EQ(table, nullptr);
#endif
}

// The real plugin's embedding entries, reached through kernels::device, answer a machine without
// a GPU with a clean kNoDevice (the device cannot be made current) before touching any pointer.
TEST(CoreCudaPlugin, EmbeddingEntriesWithoutGpuAreNoDevice) {
  if (HaveGpu()) GTEST_SKIP() << "a CUDA device is present";
  namespace dev = embedding::kernels::device;
  const ExecContext ctx = ExecContext::Cuda(0, nullptr);
  size_t bytes = 0;
  std::vector<Status> all;
  all.push_back(dev::StatusBytes(ctx, &bytes));
  all.push_back(dev::ReadStatus(ctx, nullptr, "lookup", 1000));
  all.push_back(dev::Lookup(ctx, {}, nullptr));
  all.push_back(dev::BackwardWorkspaceBytes(ctx, 10, 8, 0, &bytes));
  const embedding::kernels::DeviceRuns runs;
  all.push_back(dev::GroupRows(ctx, runs, nullptr, 0, nullptr));
  all.push_back(dev::AggregateGrads(ctx, runs, nullptr, 0, 8, 1.0f, nullptr, nullptr, nullptr));
  optim::OptimizerConfig config;
  optim::ShardParams shard;
  all.push_back(dev::FusedBackward(ctx, runs, nullptr, 0, 1.0f, config, 1, 8, shard, nullptr));
  all.push_back(dev::PartialRowStats(ctx, config, 1, shard, {}, nullptr));
  all.push_back(dev::Apply(ctx, config, 1, 8, shard, {}, nullptr));
  all.push_back(dev::RouteTempBytes(ctx, 8, &bytes));
  const embedding::kernels::simt_body::RouteParams route;
  all.push_back(dev::RouteCount(ctx, route, nullptr, 0));
  all.push_back(dev::RouteFill(ctx, route, nullptr, 0));
  for (const Status& s : all) {
    EXPECT_EQ(s.code(), kMissing) << s.ToString();
#if SHARDREC_HAVE_CUDA
    EXPECT_TRUE(Contains(s.message(), "cudaSetDevice(0)")) << s.ToString();
#endif
  }
}

TEST(CoreCudaPlugin, CheckDeviceNamesTheDevice) {
  EXPECT_TRUE(core::CheckDevice(Device::Host()).ok());
  EXPECT_EQ(core::CheckDevice(Device::Cuda(-1)).code(), Code::kInvalidArgument);
  const core::CudaRuntime* rt = nullptr;
  const int count = core::GetCudaRuntime(&rt).ok() ? rt->DeviceCount() : 0;
  const Status s = core::CheckDevice(Device::Cuda(count));
  EXPECT_EQ(s.code(), HaveGpu() ? Code::kNoDevice : kMissing) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), "cuda:" + std::to_string(count))) << s.message();
}

int ConcurrentFirstCallsChild() {
  constexpr int kThreads = 8;
  std::atomic<int> ready{0};
  std::vector<Status> results(kThreads);
  std::vector<const core::CudaRuntime*> runtimes(kThreads, nullptr);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      ready.fetch_add(1);
      while (ready.load() < kThreads) std::this_thread::yield();
      results[t] = core::GetCudaRuntime(&runtimes[t]);
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 1; t < kThreads; ++t) {
    if (results[t].code() != results[0].code()) return 1;
    if (results[t].message() != results[0].message()) return 2;
    if (runtimes[t] != runtimes[0]) return 3;
  }
  return 0;
}

const int kConcurrentChild = testing::RegisterFreshChild("concurrent", &ConcurrentFirstCallsChild);

TEST(CoreCudaPlugin, ConcurrentFirstCallsAgree) {
  EXPECT_EQ(testing::RunFresh("concurrent", nullptr), 0);
}

int BogusPathChild() {
  const core::CudaRuntime* rt = nullptr;
  const Status s = core::GetCudaRuntime(&rt);
  // A plugin named by SHARDREC_CUDA_PLUGIN is loaded in every build, with or without CUDA.
  if (s.code() != Code::kNoDevice) return 1;
  if (!Contains(s.message(), "/nonexistent/libshardrec_cuda.so.0")) return 2;
  if (rt != nullptr) return 3;
  return 0;
}

const int kBogusChild = testing::RegisterFreshChild("bogus", &BogusPathChild);

TEST(CoreCudaPlugin, BogusPluginPathIsNoDevice) {
  EXPECT_EQ(testing::RunFresh("bogus", "/nonexistent/libshardrec_cuda.so.0"), 0);
}

int NotAPluginChild() {
  const core::CudaRuntime* rt = nullptr;
  const Status s = core::GetCudaRuntime(&rt);
  if (s.code() != Code::kNoDevice) return 1;
  if (!Contains(s.message(), "not a libshardrec CUDA plugin")) return 2;
  return 0;
}

const int kForeignChild = testing::RegisterFreshChild("foreign", &NotAPluginChild);

TEST(CoreCudaPlugin, ForeignLibraryIsRejected) {
  // A real shared library that is not a plugin: refused by its missing ABI symbol.
  EXPECT_EQ(testing::RunFresh("foreign", "libc.so.6"), 0);
}

TEST(CommNcclBridge, ArgumentsAreCheckedFirst) {
  testing::MemoryStore store;
  std::unique_ptr<comm::Communicator> out;
  const auto t = std::chrono::milliseconds(1000);
  EXPECT_EQ(comm::nccl::CreateNcclCommunicator(&store, "p", 1, 0, 0, t, nullptr).code(),
            Code::kInvalidArgument);
  EXPECT_EQ(comm::nccl::CreateNcclCommunicator(nullptr, "p", 1, 0, 0, t, &out).code(),
            Code::kInvalidArgument);
  EXPECT_EQ(comm::nccl::CreateNcclCommunicator(&store, "p", 0, 0, 0, t, &out).code(),
            Code::kInvalidArgument);
  const Status rank = comm::nccl::CreateNcclCommunicator(&store, "p", 2, 2, 0, t, &out);
  EXPECT_EQ(rank.code(), Code::kInvalidArgument);
  EXPECT_TRUE(Contains(rank.message(), "rank 2")) << rank.message();
  EXPECT_EQ(comm::nccl::CreateNcclCommunicator(&store, "p", 1, 0, -1, t, &out).code(),
            Code::kInvalidArgument);
  EXPECT_EQ(
      comm::nccl::CreateNcclCommunicator(&store, "p", 1, 0, 0, std::chrono::milliseconds(0), &out)
          .code(),
      Code::kInvalidArgument);
  EXPECT_EQ(out, nullptr);
}

TEST(CommNcclBridge, WithoutGpuEveryRankGetsNoDevice) {
  if (HaveGpu()) GTEST_SKIP() << "a CUDA device is present";
  testing::MemoryStore store;
  std::unique_ptr<comm::Communicator> out;
  const auto t = std::chrono::milliseconds(2000);
  const Status r0 = comm::nccl::CreateNcclCommunicator(&store, "job", 2, 0, 0, t, &out);
  EXPECT_EQ(r0.code(), kMissing) << r0.ToString();
  EXPECT_TRUE(Contains(r0.message(), "rank 0 of 2")) << r0.message();
  EXPECT_EQ(out, nullptr);
  // Rank 0 published its failure, and rank 1 fails on its own device check without waiting.
  std::vector<uint8_t> published{1};
  ASSERT_TRUE(store.Get("job/nccl_id", t, &published).ok());
  EXPECT_TRUE(published.empty());
  const auto start = std::chrono::steady_clock::now();
  const Status r1 = comm::nccl::CreateNcclCommunicator(&store, "job", 2, 1, 0, t, &out);
  EXPECT_EQ(r1.code(), kMissing) << r1.ToString();
  EXPECT_LT(std::chrono::steady_clock::now() - start, t);
}

}  // namespace
}  // namespace shardrec
