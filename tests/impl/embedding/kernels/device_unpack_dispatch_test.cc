// The device unpack (kernels/simt/unpack_body.h) through the plugin table: bag lengths in device
// memory become the runs' CSR offsets the host loop gives, and a run whose lengths disagree with
// its announced counts is reported. Under the fake embedding plugin the entry checks every array
// against its live device blocks and runs the body on the host executor; under the real plugin
// (the gpu registration) the CUDA twin runs, and without a device every case skips. A plugin
// built before emb_unpack loads, and only the unpack reports kUnsupported.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "impl/core/check.h"
#include "impl/embedding/gpu/dispatch.h"
#include "impl/embedding/kernels/simt/unpack_body.h"
#include "tests/impl/embedding/kernels/fake_device_buffers.h"

namespace shardrec::embedding {
namespace {

using kernels::simt_body::UnpackParams;
using kernels::simt_body::UnpackRun;
using kernels::testing::DeviceArena;
using kernels::testing::FakePlugin;

// Random runs (lengths, counts) and the offsets the host computes for them.
struct Runs {
  std::vector<std::vector<int32_t>> lengths;
  std::vector<int64_t> ids, bags;
  std::vector<std::vector<int64_t>> want;
};

Runs RandomRuns(std::mt19937& rng) {
  Runs r;
  const int n = 1 + static_cast<int>(rng() % 6);
  for (int k = 0; k < n; ++k) {
    const int B = static_cast<int>(rng() % 9);  // empty runs too
    std::vector<int32_t> len(B);
    std::vector<int64_t> off{0};
    int64_t ids = 0;
    for (int32_t& x : len) {
      x = rng() % 3 == 0 ? 0 : static_cast<int32_t>(rng() % 5);
      ids += x;
      if (x > 0) off.push_back(ids);
    }
    r.lengths.push_back(len);
    r.ids.push_back(ids);
    r.bags.push_back(static_cast<int64_t>(off.size()) - 1);
    r.want.push_back(off);
  }
  return r;
}

// Runs the unpack on the device over `r` (lengths uploaded); returns the bad-run word and fills
// the offsets it wrote.
Status Unpack(DeviceArena& dev, const Runs& r, unsigned long long* bad,
              std::vector<std::vector<int64_t>>* got) {
  const ExecContext ctx = ExecContext::Cuda(0, nullptr);
  std::vector<UnpackRun> runs;
  std::vector<int64_t> cells{0};
  std::vector<int64_t*> offsets;
  for (size_t k = 0; k < r.lengths.size(); ++k) {
    UnpackRun run;
    run.lengths = dev.Upload(r.lengths[k]);
    run.offsets = r.bags[k] > 0 ? dev.Upload(std::vector<int64_t>(r.bags[k] + 1, -9)) : nullptr;
    run.ids = r.ids[k];
    run.bags = r.bags[k];
    runs.push_back(run);
    offsets.push_back(run.offsets);
    cells.push_back(cells.back() + static_cast<int64_t>(r.lengths[k].size()));
  }
  const int64_t n = cells.back();
  UnpackParams p;
  p.num_runs = static_cast<int64_t>(runs.size());
  p.num_cells = n;
  p.runs = dev.Upload(runs);
  p.cell_begin = dev.Upload(cells);
  auto* scans = static_cast<int64_t*>(dev.Alloc(3 * 8 * static_cast<size_t>(n + 1)));
  p.wide = scans;
  p.ne_scan = scans + n + 1;
  p.id_scan = scans + 2 * (n + 1);
  p.bad = static_cast<unsigned long long*>(dev.Alloc(8));
  size_t temp_bytes = 0;
  SR_RETURN_IF_ERROR(kernels::device::RouteTempBytes(ctx, n + 1, &temp_bytes));
  void* temp = dev.Alloc(temp_bytes);
  SR_RETURN_IF_ERROR(kernels::device::Unpack(ctx, p, temp, temp_bytes));
  *bad = dev.Download(p.bad, 1)[0];
  got->clear();
  for (size_t k = 0; k < runs.size(); ++k)
    got->push_back(offsets[k] != nullptr ? dev.Download(offsets[k], r.bags[k] + 1)
                                         : std::vector<int64_t>{0});
  return Status::Ok();
}

TEST(DeviceUnpackDispatch, OffsetsAreTheHostsAndBadRunsAreReported) {
  SHARDREC_REQUIRE_DEVICE();
  std::mt19937 rng(77);
  for (int round = 0; round < 30; ++round) {
    Runs r = RandomRuns(rng);
    DeviceArena dev;
    unsigned long long bad = 1;
    std::vector<std::vector<int64_t>> got;
    ASSERT_TRUE(Unpack(dev, r, &bad, &got).ok());
    EXPECT_EQ(bad, 0u) << "round " << round;
    for (size_t k = 0; k < r.want.size(); ++k)
      EXPECT_EQ(got[k], r.bags[k] > 0 ? r.want[k] : std::vector<int64_t>{0})
          << "round " << round << " run " << k;
    // One run announces an id too many: it is the one reported.
    const size_t k = rng() % r.ids.size();
    ++r.ids[k];
    ASSERT_TRUE(Unpack(dev, r, &bad, &got).ok());
    EXPECT_EQ(kernels::simt_body::MinOf(bad), static_cast<int64_t>(k)) << "round " << round;
  }
}

// The fake refuses lengths left in host memory, naming the run (the real plugin would fault).
TEST(DeviceUnpackDispatch, HostLengthsAreRefused) {
  SHARDREC_REQUIRE_DEVICE();
  if (!FakePlugin()) GTEST_SKIP() << "only the fake plugin checks pointers";
  DeviceArena dev;
  const std::vector<int32_t> lengths = {1, 0, 2};
  std::vector<UnpackRun> runs(1);
  runs[0].lengths = lengths.data();  // host memory
  runs[0].ids = 3;
  runs[0].bags = 2;
  const std::vector<int64_t> cells = {0, 3};
  UnpackParams p;
  p.num_runs = 1;
  p.num_cells = 3;
  p.runs = dev.Upload(runs);
  p.cell_begin = dev.Upload(cells);
  auto* scans = static_cast<int64_t*>(dev.Alloc(3 * 8 * 4));
  p.wide = scans;
  p.ne_scan = scans + 4;
  p.id_scan = scans + 8;
  p.bad = static_cast<unsigned long long*>(dev.Alloc(8));
  const Status s = kernels::device::Unpack(ExecContext::Cuda(0, nullptr), p, nullptr, 0);
  EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("'lengths' of unpack run 0"), std::string::npos) << s.ToString();
}

}  // namespace
}  // namespace shardrec::embedding
