// The device route (route.h + route_backend.h) through the plugin table: a KJT
// uploaded into device memory is routed by the emb_route entry and gives RouteBatch's bytes and
// messages for the same batch in host memory. Under the fake embedding plugin the entry checks
// every array against its live device blocks and runs the route body on the host executor; under
// the real plugin (the gpu registration) the CUDA twin runs, and without a device every case
// skips. Plugins built before the route entries load, and only the route reports kUnsupported.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <random>
#include <string>

#include "impl/embedding/gpu/dispatch.h"
#include "impl/embedding/gpu/route.h"
#include "impl/embedding/gpu/route_backend.h"
#include "tests/impl/embedding/kernels/fake_device_buffers.h"
#include "tests/impl/embedding/route_cases.h"

namespace shardrec::embedding {
namespace {

using kernels::testing::DeviceArena;
using kernels::testing::FakePlugin;

// The fake's count of emb_route calls (its shardrec_fake_embedding_calls(6)); -1 when the fake
// is not the loaded plugin.
int64_t FakeRouteCalls() {
  const char* path = std::getenv("SHARDREC_CUDA_PLUGIN");
  void* h = path != nullptr && FakePlugin() ? dlopen(path, RTLD_NOW | RTLD_NOLOAD) : nullptr;
  if (h == nullptr) return -1;
  auto fn = reinterpret_cast<int64_t (*)(int32_t)>(dlsym(h, "shardrec_fake_embedding_calls"));
  const int64_t n = fn != nullptr ? fn(6) : -1;
  dlclose(h);
  return n;
}

// The fake's count of runtime service `which` (its shardrec_fake_runtime_calls: 0 waits, 1
// host-to-device copies); -1 when the fake is not the loaded plugin.
int64_t FakeRuntimeCalls(int32_t which) {
  const char* path = std::getenv("SHARDREC_CUDA_PLUGIN");
  void* h = path != nullptr && FakePlugin() ? dlopen(path, RTLD_NOW | RTLD_NOLOAD) : nullptr;
  if (h == nullptr) return -1;
  auto fn = reinterpret_cast<int64_t (*)(int32_t)>(dlsym(h, "shardrec_fake_runtime_calls"));
  const int64_t n = fn != nullptr ? fn(which) : -1;
  dlclose(h);
  return n;
}

// `d`'s buffers copied into device memory of `dev`; the batch points there.
Batch OnDevice(const testing::BatchData& d, DeviceArena& dev) {
  Batch b = d.batch;
  b.lengths = dev.Upload(d.lengths);
  if (d.batch.values_dtype == DType::kInt32) {
    b.values = dev.Upload(d.ids32);
  } else {
    b.values = dev.Upload(d.ids64);
  }
  b.weights = d.batch.weights != nullptr ? dev.Upload(d.weights) : nullptr;
  b.device = Device::Cuda(0);
  return b;
}

TEST(DeviceRouteDispatch, DeviceBatchGivesRouteBatchsBytes) {
  SHARDREC_REQUIRE_DEVICE();
  std::mt19937 rng(1123);
  const int64_t calls_before = FakeRouteCalls();
  DeviceRouteBackend be(0);
  RoutedBatch got;  // reused: every field must be rewritten
  int plans = 0, accepted = 0, rejected = 0;
  for (int attempt = 0; attempt < 400 && plans < 40; ++attempt) {
    testing::Case c;
    if (!testing::RandomCase(rng, &c)) continue;
    ++plans;
    const RouteTables tables = BuildRouteTables(c.layout);
    for (int k = 0; k < 3; ++k) {
      testing::BatchData d;
      testing::RandomBatch(rng, c, k == 2, &d);
      DeviceArena dev;
      ASSERT_TRUE(dev.ok());
      const Batch on_device = OnDevice(d, dev);
      ASSERT_TRUE(dev.Sync());
      for (BoundsPolicy bp : {BoundsPolicy::kError, BoundsPolicy::kClamp, BoundsPolicy::kSkip}) {
        const RouteOptions o{bp, true};
        const std::string what = "plan " + std::to_string(plans) + " batch " + std::to_string(k) +
                                 " policy " + std::to_string(static_cast<int>(bp));
        RoutedBatch want;
        const Status sw = RouteBatch(ExecContext(), c.layout, o, d.batch, &want);
        const Status sg = RouteWith(c.layout, tables, o, on_device, be, &got);
        ASSERT_EQ(sw.code(), sg.code()) << what << ": " << sw.ToString() << " | " << sg.ToString();
        ASSERT_EQ(sw.message(), sg.message()) << what;
        if (!sw.ok()) {
          ++rejected;
          continue;
        }
        ++accepted;
        testing::ExpectSameRoute(want, got, what);
        if (HasFatalFailure()) return;
      }
    }
  }
  EXPECT_GE(plans, 30);
  EXPECT_GE(accepted, 100);
  EXPECT_GE(rejected, 5);
  // Under the fake, the entry really ran (its device memory is host memory: a host route handed
  // these pointers would give the same bytes unnoticed).
  if (FakePlugin()) {
    ASSERT_GE(calls_before, 0);
    EXPECT_GE(FakeRouteCalls() - calls_before, 2 * accepted);
  }
}

// The plan's tables are uploaded with the first batch and kept: the next batch of the same plan
// copies two arrays fewer to the device (and the same bytes come out); a plan with other tables
// uploads its own, and going back re-uploads (the backend keeps one plan's tables).
TEST(DeviceRouteDispatch, PlanTablesAreUploadedOncePerPlan) {
  SHARDREC_REQUIRE_DEVICE();
  if (!FakePlugin()) GTEST_SKIP() << "copies are counted by the fake plugin";
  std::mt19937 rng(77);
  testing::Case c1, c2;
  auto accepted_batch = [&](const testing::Case& c, testing::BatchData* d) {
    for (;;) {
      testing::RandomBatch(rng, c, false, d);
      RoutedBatch rb;
      if (RouteBatch(ExecContext(), c.layout, RouteOptions{BoundsPolicy::kClamp, true}, d->batch,
                     &rb)
              .ok())
        return;
    }
  };
  while (!testing::RandomCase(rng, &c1)) {
  }
  RouteTables t1 = BuildRouteTables(c1.layout), t2;
  do {
    while (!testing::RandomCase(rng, &c2)) {
    }
    t2 = BuildRouteTables(c2.layout);
  } while (t2.i32 == t1.i32 && t2.i64 == t1.i64);
  ASSERT_FALSE(t1.i32.empty());
  ASSERT_FALSE(t1.i64.empty());
  ASSERT_FALSE(t2.i32.empty());
  ASSERT_FALSE(t2.i64.empty());
  testing::BatchData d1, d2;
  accepted_batch(c1, &d1);
  accepted_batch(c2, &d2);
  DeviceArena dev;
  ASSERT_TRUE(dev.ok());
  const Batch b1 = OnDevice(d1, dev), b2 = OnDevice(d2, dev);
  ASSERT_TRUE(dev.Sync());
  const RouteOptions o{BoundsPolicy::kClamp, true};
  DeviceRouteBackend be(0);
  // Host-to-device copies of one route of `b` with `t`.
  auto uploads = [&](const testing::Case& c, const RouteTables& t, const Batch& b,
                     const testing::BatchData& d) -> int64_t {
    const int64_t before = FakeRuntimeCalls(1);
    RoutedBatch got, want;
    EXPECT_TRUE(RouteWith(c.layout, t, o, b, be, &got).ok());
    EXPECT_TRUE(RouteBatch(ExecContext(), c.layout, o, d.batch, &want).ok());
    testing::ExpectSameRoute(want, got, "tables kept");
    return FakeRuntimeCalls(1) - before;
  };
  const int64_t first = uploads(c1, t1, b1, d1);
  const int64_t again = uploads(c1, t1, b1, d1);
  EXPECT_EQ(again, first - 2) << "the int32 and int64 tables are copied once";
  // A copy of the tables (another object, same contents) is the same plan.
  const RouteTables t1_copy = t1;
  EXPECT_EQ(uploads(c1, t1_copy, b1, d1), again);
  const int64_t other_first = uploads(c2, t2, b2, d2);
  EXPECT_EQ(uploads(c2, t2, b2, d2), other_first - 2);
  EXPECT_EQ(uploads(c1, t1, b1, d1), first);
}

// The fake refuses a batch left in host memory, naming the array (the real plugin would fault).
TEST(DeviceRouteDispatch, HostBuffersAreRefused) {
  SHARDREC_REQUIRE_DEVICE();
  if (!FakePlugin()) GTEST_SKIP() << "only the fake plugin checks pointers";
  std::mt19937 rng(5);
  testing::Case c;
  while (!testing::RandomCase(rng, &c)) {
  }
  testing::BatchData d;
  do {
    testing::RandomBatch(rng, c, false, &d);
  } while (d.batch.num_values == 0);
  DeviceArena dev;
  Batch b = OnDevice(d, dev);
  ASSERT_TRUE(dev.Sync());
  b.values = d.batch.values;  // host memory
  DeviceRouteBackend be(0);
  RoutedBatch rb;
  const Status s = RouteWith(c.layout, BuildRouteTables(c.layout),
                             RouteOptions{BoundsPolicy::kError, true}, b, be, &rb);
  EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("route values"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("not inside a live device allocation"), std::string::npos)
      << s.ToString();
}

}  // namespace
}  // namespace shardrec::embedding
