// Shared pieces of the C API tests of a GPU collection over NCCL (embedding_gpu_nccl_*): on the
// CPU the fake embedding plugin's NCCL double (tests/support/fake_plugins/fake_nccl.h) stands
// in for NCCL, its ranks threads of the test meeting on the one fake device; on a GPU (the real
// plugin) only world 1 runs, since NCCL wants one GPU per rank.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <memory>

#include "shardrec/comm.h"
#include "tests/capi/embedding/embedding_test_util.h"
#include "tests/capi/embedding/gpu_test_util.h"
#include "tests/support/spawn_ranks.h"

namespace shardrec::testing {

struct CommDeleter {
  void operator()(shardrec_comm_t* c) const { shardrec_comm_destroy(c); }
};
using CommPtr = std::unique_ptr<shardrec_comm_t, CommDeleter>;

// The fake NCCL double's counter `which` (0 collectives, 1 bytes received into device memory);
// -1 when the fake is not loaded.
inline int64_t NcclCounter(int32_t which) {
  auto fn = reinterpret_cast<int64_t (*)(int32_t)>(FakeSymbol("shardrec_fake_nccl_calls"));
  return fn != nullptr ? fn(which) : -1;
}

// The fake runtime's counter `which` (0 syncs, 1 host-to-device copies, 2 device-to-host).
inline int64_t RuntimeCounter(int32_t which) {
  auto fn = reinterpret_cast<int64_t (*)(int32_t)>(FakeSymbol("shardrec_fake_runtime_calls"));
  return fn != nullptr ? fn(which) : -1;
}

// Skips multi-rank cases where NCCL is real (one GPU here; NCCL wants one per rank).
#define REQUIRE_WORLD(world)                                                           \
  do {                                                                                 \
    REQUIRE_DEVICE();                                                                  \
    if ((world) > 1 && !FakeLoaded())                                                  \
      GTEST_SKIP() << "NCCL needs one GPU per rank; multi-rank cases run on the fake"; \
  } while (0)

// One rank of an NCCL communicator on CUDA device 0 (all ranks share it under the fake), met
// through `id`.
inline shardrec_comm_t* NcclComm(const shardrec_unique_id_t& id, int32_t world, int32_t rank,
                                 int64_t timeout_ms) {
  shardrec_comm_options_t o = SHARDREC_COMM_OPTIONS_INIT;
  o.timeout_ms = timeout_ms;
  o.backend = SHARDREC_BACKEND_NCCL;
  o.device_type = SHARDREC_DEVICE_CUDA;
  o.device_index = 0;
  shardrec_comm_t* c = nullptr;
  EXPECT_EQ(shardrec_comm_create(&c, &id, world, rank, &o), SHARDREC_OK)
      << "rank " << rank << ": " << shardrec_last_error();
  return c;
}

// Ranks of `s.world` as threads, each with an NCCL communicator (the double on the CPU) of
// timeout `timeout_ms` and a GPU collection of `plan` over it; body(r, collection, output_dim)
// runs on rank r's thread, and the collection goes before its communicator.
inline void ForEachNcclRank(const Scenario& s, const shardrec_plan_t* plan,
                            const shardrec_optimizer_config_t& opt, int64_t timeout_ms,
                            const std::function<void(int, shardrec_embedding_t*, int64_t)>& body) {
  shardrec_unique_id_t id;
  ASSERT_EQ(shardrec_comm_unique_id_create(&id), SHARDREC_OK);
  SpawnRanks(s.world, [&](int r) {
    CommPtr nccl(NcclComm(id, s.world, r, timeout_ms));
    ASSERT_NE(nccl, nullptr);
    const shardrec_embedding_options_t od = Options(s, true);
    shardrec_embedding_t* d = nullptr;
    ASSERT_EQ(shardrec_embedding_create(&d, plan, nccl.get(), &opt, &od), SHARDREC_OK)
        << shardrec_last_error();
    CollPtr cd(d);
    int64_t dim = 0;
    shardrec_embedding_output_dim(d, &dim);
    body(r, d, dim);
  });
}

}  // namespace shardrec::testing
