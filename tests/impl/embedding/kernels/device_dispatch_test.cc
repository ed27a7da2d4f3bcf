// kernels::device (dispatch.h) through the plugin table, with SHARDREC_CUDA_PLUGIN set to
// the fake embedding plugin (fake_embedding_plugin.cc): device memory is checked host memory and
// the entries run the host kernels. So these tests check the marshalling (same bits as calling
// the host kernels directly), the pointer discipline (host memory where device memory belongs is
// refused, naming the argument), the status block, and plugins without them. The CUDA kernels
// themselves are checked against the host kernels by the simt tests. Under the real plugin (the
// gpu-labelled ctest registration, and .ci/gpu-check) the same comparisons run on a GPU, the
// fake-only cases skip, and every case skips without a device.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "impl/core/half.h"
#include "impl/embedding/gpu/dispatch.h"
#include "tests/impl/embedding/kernels/fake_device_buffers.h"
#include "tests/support/fresh_process.h"

namespace shardrec::embedding::kernels {
namespace {

using testing::DeviceArena;
using testing::DeviceCtx;
using testing::SameBits;

TEST(DeviceDispatch, HostContextIsRefused) {
  const Status s = device::Lookup(ExecContext(), {}, nullptr);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("CUDA context"), std::string::npos) << s.ToString();
}

// One table's weights on the host, as raw bytes of its dtype.
struct Table {
  DType dtype;
  int64_t rows;
  int32_t cols;
  int64_t stride;
  std::vector<uint8_t> bytes;
};

Table MakeTable(DType dt, int64_t rows, int32_t cols, std::mt19937& rng) {
  Table t{dt, rows, cols, cols + 3, {}};
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  const size_t n = static_cast<size_t>(rows * t.stride);
  t.bytes.resize(n * DTypeSize(dt));
  for (size_t i = 0; i < n; ++i) {
    const float v = d(rng);
    if (dt == DType::kFloat32) {
      std::memcpy(t.bytes.data() + 4 * i, &v, 4);
    } else {
      const uint16_t h = dt == DType::kFloat16 ? FloatToHalf(v) : FloatToBFloat16(v);
      std::memcpy(t.bytes.data() + 2 * i, &h, 2);
    }
  }
  return t;
}

// A run's host arrays; offsets empty for a sequence run.
struct HostRun {
  std::vector<int64_t> offsets, rows;
  std::vector<float> weights;
};

HostRun MakeRun(int64_t bags, int64_t table_rows, bool pooled, bool weighted, std::mt19937& rng) {
  HostRun r;
  std::uniform_int_distribution<int64_t> row(0, table_rows - 1), len(0, 5);
  std::uniform_real_distribution<float> w(-2.0f, 2.0f);
  if (pooled) r.offsets.push_back(0);
  for (int64_t b = 0; b < bags; ++b) {
    const int64_t n = pooled ? len(rng) : 1;  // pooled bags may be empty
    for (int64_t k = 0; k < n; ++k) {
      r.rows.push_back(row(rng));
      if (weighted) r.weights.push_back(w(rng));
    }
    if (pooled) r.offsets.push_back(static_cast<int64_t>(r.rows.size()));
  }
  return r;
}

class DispatchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SHARDREC_REQUIRE_DEVICE();
    const Status s = device::CheckPlugin();
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
};

// Several tables of every weight dtype, each with pooled (weighted and not) and sequence runs,
// in one call; one run's offsets start mid-array. Output rows have gaps that must stay as they
// were.
TEST_F(DispatchTest, LookupMatchesTheHostKernelBitForBit) {
  std::mt19937 rng(11);
  DeviceArena dev;
  ASSERT_TRUE(dev.ok());
  std::vector<Table> tables;
  for (DType dt : {DType::kFloat32, DType::kFloat16, DType::kBFloat16})
    for (int32_t cols : {8, 13}) tables.push_back(MakeTable(dt, 37, cols, rng));
  std::vector<HostRun> runs;
  std::vector<LookupJob> host, device;
  int64_t io = 0;
  for (size_t t = 0; t < tables.size(); ++t) {
    const Table& tb = tables[t];
    const void* dw = dev.Upload(tb.bytes);
    for (int kind = 0; kind < 4; ++kind) {
      const bool pooled = kind < 3, weighted = kind == 1 || kind == 3;
      runs.push_back(MakeRun(kind == 2 ? 9 : 6, tb.rows, pooled, weighted, rng));
      const HostRun& r = runs.back();
      // kind 2: a pooled run whose first two bags belong to someone else (offsets[0] != 0).
      const int64_t skip = kind == 2 ? 2 : 0;
      const int64_t bags = (pooled ? static_cast<int64_t>(r.offsets.size()) - 1
                                   : static_cast<int64_t>(r.rows.size())) -
                           skip;
      const int64_t out_stride = tb.cols + 2;
      LookupJob h;
      h.weights = {tb.bytes.data(), tb.dtype, tb.rows, tb.cols, tb.stride};
      h.run = {pooled ? r.offsets.data() + skip : nullptr, bags, r.rows.data(),
               weighted ? r.weights.data() : nullptr, io};
      h.out_stride = out_stride;
      LookupJob d = h;
      d.weights.data = dw;
      const int64_t* doff = dev.Upload(r.offsets);
      d.run.offsets = pooled ? doff + skip : nullptr;
      d.run.rows = dev.Upload(r.rows);
      d.run.weights = weighted ? dev.Upload(r.weights) : nullptr;
      host.push_back(h);
      device.push_back(d);
      io += bags * out_stride;
    }
  }
  std::vector<float> out_h(static_cast<size_t>(io), -7.5f);
  float* out_d = dev.Upload(out_h);
  for (LookupJob& j : host) j.out = out_h.data();
  for (LookupJob& j : device) j.out = out_d;
  ASSERT_TRUE(Lookup(ExecContext(), host).ok());
  const Status s = device::Lookup(DeviceCtx(), device, nullptr);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_TRUE(SameBits(out_h, dev.Download(out_d, out_h.size()), "lookup output"));
}

// A row outside its shard is left out and reported at the step's synchronisation point, once.
TEST_F(DispatchTest, StatusBlockReportsARowOutsideItsShard) {
  std::mt19937 rng(5);
  DeviceArena dev;
  ASSERT_TRUE(dev.ok());
  const Table tb = MakeTable(DType::kFloat32, 20, 8, rng);
  const std::vector<int64_t> offsets = {0, 2, 5}, rows = {1, 4, 7, 20, 3}, good_rows = {1, 4, 7, 3};
  size_t bytes = 0;
  ASSERT_TRUE(device::StatusBytes(DeviceCtx(), &bytes).ok());
  ASSERT_GT(bytes, 0u);
  void* block = dev.Upload(std::vector<uint8_t>(bytes, 0));
  std::vector<float> out_h(16, 0.0f);
  float* out_d = dev.Upload(out_h);
  LookupJob d;
  d.weights = {dev.Upload(tb.bytes), tb.dtype, tb.rows, tb.cols, tb.stride};
  d.run = {dev.Upload(offsets), 2, dev.Upload(rows), nullptr, 0};
  d.out = out_d;
  d.out_stride = 8;
  ASSERT_TRUE(device::Lookup(DeviceCtx(), {&d, 1}, block).ok());
  Status s = device::ReadStatus(DeviceCtx(), block, "lookup", testing::kWaitMs);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("lookup: a row outside its shard at position 3"), std::string::npos)
      << s.ToString();
  s = device::ReadStatus(DeviceCtx(), block, "lookup", testing::kWaitMs);
  EXPECT_TRUE(s.ok()) << "the block is cleared once read: " << s.ToString();
  EXPECT_EQ(device::ReadStatus(DeviceCtx(), block, "lookup", 0).code(), Code::kInvalidArgument);
  // The bad id is left out: the bag sums the others.
  const std::vector<int64_t> good_offsets = {0, 2, 4};
  LookupJob h;
  h.weights = {tb.bytes.data(), tb.dtype, tb.rows, tb.cols, tb.stride};
  h.run = {good_offsets.data(), 2, good_rows.data(), nullptr, 0};
  h.out = out_h.data();
  h.out_stride = 8;
  ASSERT_TRUE(Lookup(ExecContext(), {&h, 1}).ok());
  EXPECT_TRUE(SameBits(out_h, dev.Download(out_d, out_h.size()), "lookup output"));
}

// Host memory (or a freed or too small block) where device memory belongs is refused with a
// message naming the argument; nothing is written.
TEST_F(DispatchTest, HostPointersWhereDeviceMemoryBelongsAreRefused) {
  if (!testing::FakePlugin()) GTEST_SKIP() << "the fake's refusals (a GPU would fault instead)";
  std::mt19937 rng(2);
  DeviceArena dev;
  ASSERT_TRUE(dev.ok());
  const Table tb = MakeTable(DType::kFloat32, 10, 4, rng);
  const std::vector<int64_t> offsets = {0, 1, 3}, rows = {1, 2, 3};
  std::vector<float> out_h(8, 1.0f);
  LookupJob d;
  d.weights = {dev.Upload(tb.bytes), tb.dtype, tb.rows, tb.cols, tb.stride};
  d.run = {dev.Upload(offsets), 2, dev.Upload(rows), nullptr, 0};
  d.out = dev.Upload(out_h);
  d.out_stride = 4;
  ASSERT_TRUE(device::Lookup(DeviceCtx(), {&d, 1}, nullptr).ok());

  auto refused = [&](LookupJob bad, void* block, const std::string& name) {
    const Status s = device::Lookup(DeviceCtx(), {&bad, 1}, block);
    EXPECT_EQ(s.code(), Code::kInvalidArgument) << name;
    EXPECT_NE(s.message().find(name), std::string::npos) << s.ToString();
    EXPECT_NE(s.message().find("not inside a live device allocation"), std::string::npos)
        << s.ToString();
  };
  LookupJob bad = d;
  bad.weights.data = tb.bytes.data();
  refused(bad, nullptr, "'weights' of job 0");
  bad = d;
  bad.run.rows = rows.data();
  refused(bad, nullptr, "'rows' of job 0");
  bad = d;
  bad.run.offsets = offsets.data();
  refused(bad, nullptr, "'offsets' of job 0");
  bad = d;
  const std::vector<float> w = {1.0f, 2.0f, 3.0f};
  bad.run.weights = w.data();
  refused(bad, nullptr, "'per-id weights' of job 0");
  bad = d;
  bad.out = out_h.data();
  refused(bad, nullptr, "'out' of job 0");
  bad = d;
  bad.out_stride = 5;  // the last bag's row would run past the 8-float block
  refused(bad, nullptr, "'out' of job 0");
  std::vector<uint8_t> host_block(64, 0);
  refused(d, host_block.data(), "status block");
  float* freed = dev.Upload(out_h);
  dev.FreeNow(freed);
  bad = d;
  bad.out = freed;
  refused(bad, nullptr, "'out' of job 0");
  EXPECT_TRUE(SameBits(out_h, std::vector<float>(8, 1.0f), "host buffer"));
}

int StaleChild(const char* path) {
  const Status s = device::CheckPlugin();
  std::vector<LookupJob> none;
  const Status l = device::Lookup(DeviceCtx(), none, nullptr);
  const bool ok = s.code() == Code::kUnsupported && l.code() == Code::kUnsupported &&
                  s.message().find(path) != std::string::npos &&
                  s.message().find("serves no embedding GPU kernels") != std::string::npos &&
                  s.message().find("'emb_status_bytes'") != std::string::npos;
  if (!ok) std::fprintf(stderr, "%s / %s\n", s.ToString().c_str(), l.ToString().c_str());
  return ok ? 0 : 1;
}
int BaseChild() { return StaleChild("/fake/libshardrec_cuda.so"); }
int DenseChild() { return StaleChild("/fake/dense/libshardrec_cuda.so"); }
const int kBaseChild = shardrec::testing::RegisterFreshChild("emb_dispatch_base", &BaseChild);
const int kDenseChild = shardrec::testing::RegisterFreshChild("emb_dispatch_dense", &DenseChild);

// Plugins of this ABI that serve no embedding kernels (the loader's fake, the dense-only fake)
// load, and the embedding calls say which file and which entry.
TEST(DeviceDispatch, PluginWithoutEmbeddingEntriesIsUnsupported) {
  // A GPU bundle (.ci/gpu-bundle) carries the test binary without the fake plugins.
  if (access(SHARDREC_FAKE_BASE_PLUGIN, R_OK) != 0 || access(SHARDREC_FAKE_DENSE_PLUGIN, R_OK) != 0)
    GTEST_SKIP() << "the fake plugins are not where the build put them";
  EXPECT_EQ(shardrec::testing::RunFresh("emb_dispatch_base", SHARDREC_FAKE_BASE_PLUGIN), 0);
  EXPECT_EQ(shardrec::testing::RunFresh("emb_dispatch_dense", SHARDREC_FAKE_DENSE_PLUGIN), 0);
}

}  // namespace
}  // namespace shardrec::embedding::kernels
