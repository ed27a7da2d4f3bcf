// The fake embedding plugin's NCCL double (fake_nccl.h) through the communicator C API: the
// results NCCL gives, its refusal of host memory, and a missing member's timeout and poisoning.
#include <gtest/gtest.h>

#include <atomic>
#include <barrier>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "shardrec/comm.h"
#include "shardrec/replica.h"
#include "tests/capi/embedding/embedding_test_util.h"
#include "tests/capi/embedding/gpu_test_util.h"
#include "tests/capi/embedding/nccl_test_util.h"
#include "tests/support/spawn_ranks.h"

namespace shardrec::testing {
namespace {

// A block of the fake's device memory (host memory the test reads directly).
struct FakeDeviceBlock {
  explicit FakeDeviceBlock(size_t bytes) {
    auto alloc = reinterpret_cast<void* (*)(size_t)>(FakeSymbol("shardrec_fake_device_alloc"));
    free_ = reinterpret_cast<void (*)(void*)>(FakeSymbol("shardrec_fake_device_free"));
    if (alloc != nullptr && free_ != nullptr) p = alloc(bytes);
  }
  ~FakeDeviceBlock() {
    if (p != nullptr) free_(p);
  }
  FakeDeviceBlock(const FakeDeviceBlock&) = delete;
  FakeDeviceBlock& operator=(const FakeDeviceBlock&) = delete;
  template <typename T>
  T* as() const {
    return static_cast<T*>(p);
  }
  void* p = nullptr;
  void (*free_)(void*) = nullptr;
};

// The NCCL double itself through the communicator C API, at world 3 on fake device memory:
// all-reduce (sum in place, average, integer maximum), broadcast, all-gather and a split group
// give the values NCCL would; a host buffer is refused as a GPU would fault on it.
TEST(FakeNcclDouble, CollectivesGiveNcclsResults) {
  REQUIRE_DEVICE();
  if (!FakeLoaded()) GTEST_SKIP() << "tests the fake's NCCL double";
  constexpr int kWorld = 3;
  shardrec_unique_id_t id;
  ASSERT_EQ(shardrec_comm_unique_id_create(&id), SHARDREC_OK);
  SpawnRanks(kWorld, [&](int r) {
    CommPtr c(NcclComm(id, kWorld, r, 20000));
    ASSERT_NE(c, nullptr);
    FakeDeviceBlock f(4 * sizeof(float)), i(2 * sizeof(int64_t)), g(kWorld * 2 * sizeof(float));
    ASSERT_TRUE(f.p && i.p && g.p);
    for (int k = 0; k < 4; ++k) f.as<float>()[k] = static_cast<float>(r + 1) * (k + 1);
    ASSERT_EQ(shardrec_comm_allreduce(c.get(), f.p, f.p, 4, SHARDREC_DTYPE_FLOAT32,
                                      SHARDREC_REDUCE_SUM, nullptr),
              SHARDREC_OK)
        << shardrec_last_error();
    for (int k = 0; k < 4; ++k) EXPECT_EQ(f.as<float>()[k], 6.0f * (k + 1)) << "rank " << r;
    ASSERT_EQ(shardrec_comm_allreduce(c.get(), f.p, f.p, 4, SHARDREC_DTYPE_FLOAT32,
                                      SHARDREC_REDUCE_AVG, nullptr),
              SHARDREC_OK);
    for (int k = 0; k < 4; ++k) EXPECT_EQ(f.as<float>()[k], 6.0f * (k + 1)) << "rank " << r;
    i.as<int64_t>()[0] = 10 * r;
    i.as<int64_t>()[1] = -r;
    ASSERT_EQ(shardrec_comm_allreduce(c.get(), i.p, i.p, 2, SHARDREC_DTYPE_INT64,
                                      SHARDREC_REDUCE_MAX, nullptr),
              SHARDREC_OK);
    EXPECT_EQ(i.as<int64_t>()[0], 20);
    EXPECT_EQ(i.as<int64_t>()[1], 0);
    f.as<float>()[0] = static_cast<float>(100 + r);
    ASSERT_EQ(shardrec_comm_broadcast(c.get(), f.p, 1, SHARDREC_DTYPE_FLOAT32, 2, nullptr),
              SHARDREC_OK);
    EXPECT_EQ(f.as<float>()[0], 102.0f);
    f.as<float>()[0] = static_cast<float>(r);
    f.as<float>()[1] = static_cast<float>(-r);
    ASSERT_EQ(shardrec_comm_allgather(c.get(), f.p, g.p, 2, SHARDREC_DTYPE_FLOAT32, nullptr),
              SHARDREC_OK);
    for (int q = 0; q < kWorld; ++q) {
      EXPECT_EQ(g.as<float>()[2 * q], static_cast<float>(q));
      EXPECT_EQ(g.as<float>()[2 * q + 1], static_cast<float>(-q));
    }
    // Ranks 0 and 2 form one group (rank 2 first by key), rank 1 none.
    shardrec_comm_t* child = nullptr;
    ASSERT_EQ(shardrec_comm_split(&child, c.get(), r == 1 ? -1 : 0, -r), SHARDREC_OK)
        << shardrec_last_error();
    CommPtr cc(child);
    if (r == 1) {
      EXPECT_EQ(child, nullptr);
    } else {
      ASSERT_NE(child, nullptr);
      int32_t cr = -1, cs = 0;
      shardrec_comm_rank(&cr, child);
      shardrec_comm_size(&cs, child);
      EXPECT_EQ(cs, 2);
      EXPECT_EQ(cr, r == 2 ? 0 : 1);
      i.as<int64_t>()[0] = r;
      ASSERT_EQ(shardrec_comm_allreduce(child, i.p, i.p, 1, SHARDREC_DTYPE_INT64,
                                        SHARDREC_REDUCE_SUM, nullptr),
                SHARDREC_OK);
      EXPECT_EQ(i.as<int64_t>()[0], 2);
    }
    EXPECT_EQ(shardrec_comm_barrier(c.get()), SHARDREC_OK) << shardrec_last_error();
  });
  // A host buffer on a communicator of one (no peer left waiting): refused, naming it.
  shardrec_unique_id_t one;
  ASSERT_EQ(shardrec_comm_unique_id_create(&one), SHARDREC_OK);
  CommPtr c(NcclComm(one, 1, 0, 5000));
  ASSERT_NE(c, nullptr);
  float host[2] = {1, 2};
  EXPECT_EQ(shardrec_comm_allreduce(c.get(), host, host, 2, SHARDREC_DTYPE_FLOAT32,
                                    SHARDREC_REDUCE_SUM, nullptr),
            SHARDREC_EINVAL);
  EXPECT_NE(std::string(shardrec_last_error()).find("not inside a live device allocation"),
            std::string::npos)
      << shardrec_last_error();
}

// A rank that never arrives: the others' collective returns ETIMEOUT within (about) the
// timeout, the communicator is poisoned afterwards (EUSAGE naming the error) and reports it.
TEST(FakeNcclDouble, AMissingMemberTimesOutAndPoisons) {
  REQUIRE_DEVICE();
  if (!FakeLoaded()) GTEST_SKIP() << "tests the fake's NCCL double";
  shardrec_unique_id_t id;
  ASSERT_EQ(shardrec_comm_unique_id_create(&id), SHARDREC_OK);
  constexpr int64_t kTimeoutMs = 800;
  std::atomic<int> finished{0};
  SpawnRanks(3, [&](int r) {
    CommPtr c(NcclComm(id, 3, r, kTimeoutMs));
    ASSERT_NE(c, nullptr);
    if (r == 2) {
      // Alive but silent until the others have given up.
      while (finished.load() < 2) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      return;
    }
    struct Done {
      std::atomic<int>* n;
      ~Done() { n->fetch_add(1); }
    } done{&finished};
    FakeDeviceBlock f(sizeof(float));
    ASSERT_NE(f.p, nullptr);
    const auto t0 = std::chrono::steady_clock::now();
    EXPECT_EQ(shardrec_comm_allreduce(c.get(), f.p, f.p, 1, SHARDREC_DTYPE_FLOAT32,
                                      SHARDREC_REDUCE_SUM, nullptr),
              SHARDREC_ETIMEOUT);
    const auto ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0)
            .count();
    EXPECT_LT(ms, 4 * kTimeoutMs);
    EXPECT_EQ(shardrec_comm_allreduce(c.get(), f.p, f.p, 1, SHARDREC_DTYPE_FLOAT32,
                                      SHARDREC_REDUCE_SUM, nullptr),
              SHARDREC_EUSAGE);
    EXPECT_NE(shardrec_comm_async_error(c.get()), SHARDREC_OK);
  });
}

}  // namespace
}  // namespace shardrec::testing
