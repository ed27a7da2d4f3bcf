// Black-box tests of the communicator C API: creation three ways, split, collectives, failure
// codes, and argument validation.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "shardrec/comm.h"
#include "shardrec/device.h"
#include "shardrec/shardrec.hpp"
#include "tests/capi/comm/mismatch_cases.h"

namespace {

void RunThreads(int n, const std::function<void(int)>& fn) {
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) threads.emplace_back(fn, r);
  for (auto& t : threads) t.join();
}

std::string LastError() { return shardrec_last_error(); }

TEST(CapiComm, UniqueIdRanksOnThreadsRunCollectives) {
  shardrec_unique_id_t id;
  ASSERT_EQ(shardrec_comm_unique_id_create(&id), SHARDREC_OK) << LastError();
  const int world = 3;
  std::vector<shardrec_comm_t*> comms(world, nullptr);
  RunThreads(world, [&](int r) {
    shardrec_comm_options_t opts = SHARDREC_COMM_OPTIONS_INIT;
    opts.timeout_ms = 10000;
    ASSERT_EQ(shardrec_comm_create(&comms[r], &id, world, r, &opts), SHARDREC_OK) << LastError();
    int32_t rank = -1, size = -1;
    ASSERT_EQ(shardrec_comm_rank(&rank, comms[r]), SHARDREC_OK);
    ASSERT_EQ(shardrec_comm_size(&size, comms[r]), SHARDREC_OK);
    EXPECT_EQ(rank, r);
    EXPECT_EQ(size, world);
    std::vector<float> v(100, static_cast<float>(r + 1));
    ASSERT_EQ(shardrec_comm_allreduce(comms[r], v.data(), v.data(), v.size(),
                                      SHARDREC_DTYPE_FLOAT32, SHARDREC_REDUCE_AVG, nullptr),
              SHARDREC_OK)
        << LastError();
    EXPECT_FLOAT_EQ(v[99], 2.0f);
    int64_t b = r == 2 ? 42 : 0;
    ASSERT_EQ(shardrec_comm_broadcast(comms[r], &b, 1, SHARDREC_DTYPE_INT64, 2, nullptr),
              SHARDREC_OK);
    EXPECT_EQ(b, 42);
    int32_t mine[2] = {r, r * 10}, all[6] = {};
    ASSERT_EQ(shardrec_comm_allgather(comms[r], mine, all, 2, SHARDREC_DTYPE_INT32, nullptr),
              SHARDREC_OK);
    for (int q = 0; q < world; ++q) {
      EXPECT_EQ(all[2 * q], q);
      EXPECT_EQ(all[2 * q + 1], q * 10);
    }
    ASSERT_EQ(shardrec_comm_barrier(comms[r]), SHARDREC_OK);
    EXPECT_EQ(shardrec_comm_async_error(comms[r]), SHARDREC_OK);
    shardrec_comm_destroy(comms[r]);  // concurrent destroys: rank 0 waits for the others
  });
}

TEST(CapiComm, LocalGroupSplitAndMax) {
  shardrec_comm_t* comms[4] = {};
  ASSERT_EQ(shardrec_comm_create_local_group(comms, 4, nullptr), SHARDREC_OK) << LastError();
  shardrec_comm_t* subs[4] = {};
  RunThreads(4, [&](int r) {
    ASSERT_EQ(shardrec_comm_split(&subs[r], comms[r], r == 3 ? -1 : r % 2, -r), SHARDREC_OK)
        << LastError();
    if (r == 3) {
      EXPECT_EQ(subs[r], nullptr);
      return;
    }
    int32_t rank = -1, size = -1;
    shardrec_comm_rank(&rank, subs[r]);
    shardrec_comm_size(&size, subs[r]);
    EXPECT_EQ(size, r % 2 == 0 ? 2 : 1);
    EXPECT_EQ(rank, r == 2 ? 0 : 0 + (r == 0 ? 1 : 0));  // key -r: rank 2 before rank 0
    double x = r;
    ASSERT_EQ(shardrec_comm_allreduce(subs[r], &x, &x, 1, SHARDREC_DTYPE_FLOAT64,
                                      SHARDREC_REDUCE_MAX, nullptr),
              SHARDREC_OK);
    EXPECT_EQ(x, r % 2 == 0 ? 2.0 : 1.0);
  });
  for (int r = 0; r < 4; ++r) {
    shardrec_comm_destroy(subs[r]);
    shardrec_comm_destroy(comms[r]);
  }
}

// A host key-value store for shardrec_comm_create_with_store.
struct KvStore {
  std::mutex mu;
  std::condition_variable cv;
  std::map<std::string, std::string> data;
};

int32_t KvSet(void* p, const char* key, const void* value, size_t len) {
  auto* kv = static_cast<KvStore*>(p);
  {
    std::lock_guard<std::mutex> lock(kv->mu);
    kv->data[key].assign(static_cast<const char*>(value), len);
  }
  kv->cv.notify_all();
  return SHARDREC_OK;
}

int32_t KvGet(void* p, const char* key, int64_t timeout_ms, void* buf, size_t buf_len,
              size_t* len) {
  auto* kv = static_cast<KvStore*>(p);
  std::unique_lock<std::mutex> lock(kv->mu);
  if (!kv->cv.wait_for(lock, std::chrono::milliseconds(timeout_ms),
                       [&] { return kv->data.count(key) > 0; })) {
    return SHARDREC_ETIMEOUT;
  }
  const std::string& v = kv->data[key];
  *len = v.size();
  if (v.size() <= buf_len) std::memcpy(buf, v.data(), v.size());
  return SHARDREC_OK;
}

// A local group whose sockets (a connection between every two ranks) exceed the open-file limit
// is refused at once with EINVAL naming the limit; it used to fail at (or long past) its timeout
// with ETIMEOUT blaming a missing peer. The limit is lowered for the call and put back.
TEST(CapiComm, LocalGroupBeyondTheOpenFileLimitIsRefusedAtOnce) {
  rlimit saved{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &saved), 0);
  rlimit low = saved;
  low.rlim_cur = 300;  // 16 ranks need up to 2 x 16 x 15 = 480 sockets
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
  std::vector<shardrec_comm_t*> comms(16, nullptr);
  const auto start = std::chrono::steady_clock::now();
  const shardrec_status_t st = shardrec_comm_create_local_group(comms.data(), 16, nullptr);
  const auto took = std::chrono::steady_clock::now() - start;
  const std::string msg = shardrec_last_error();
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &saved), 0);
  EXPECT_EQ(st, SHARDREC_EINVAL) << msg;
  EXPECT_NE(msg.find("open-file limit of 300"), std::string::npos) << msg;
  EXPECT_LT(took, std::chrono::seconds(1));
  for (shardrec_comm_t* c : comms) EXPECT_EQ(c, nullptr);
  // Within the limit it works.
  ASSERT_EQ(shardrec_comm_create_local_group(comms.data(), 4, nullptr), SHARDREC_OK)
      << shardrec_last_error();
  for (shardrec_comm_t* c : comms)
    if (c != nullptr) shardrec_comm_destroy(c);
}

TEST(CapiComm, HostStoreCallbacks) {
  KvStore kv;
  shardrec_store_callbacks_t cb;
  ASSERT_EQ(shardrec_store_callbacks_init(&cb, SHARDREC_STORE_CALLBACKS_VERSION), SHARDREC_OK);
  cb.set = &KvSet;
  cb.get = &KvGet;
  cb.payload = &kv;
  RunThreads(2, [&](int r) {
    shardrec_comm_t* c = nullptr;
    ASSERT_EQ(shardrec_comm_create_with_store(&c, &cb, 2, r, nullptr), SHARDREC_OK) << LastError();
    int32_t v = r + 5;
    ASSERT_EQ(
        shardrec_comm_allreduce(c, &v, &v, 1, SHARDREC_DTYPE_INT32, SHARDREC_REDUCE_SUM, nullptr),
        SHARDREC_OK);
    EXPECT_EQ(v, 11);
    shardrec_comm_destroy(c);
  });
  EXPECT_FALSE(kv.data.empty());
}

TEST(CapiComm, TimeoutPoisonsTheCommunicator) {
  shardrec_comm_t* comms[2] = {};
  shardrec_comm_options_t opts;
  ASSERT_EQ(shardrec_comm_options_init(&opts, SHARDREC_COMM_OPTIONS_VERSION), SHARDREC_OK);
  opts.timeout_ms = 60000;
  ASSERT_EQ(shardrec_comm_create_local_group(comms, 2, &opts), SHARDREC_OK) << LastError();
  ASSERT_EQ(shardrec_comm_set_timeout(comms[0], 300), SHARDREC_OK);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(shardrec_comm_barrier(comms[0]), SHARDREC_ETIMEOUT);  // rank 1 never arrives
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(3));
  EXPECT_NE(LastError().find("barrier"), std::string::npos) << LastError();
  EXPECT_EQ(shardrec_comm_async_error(comms[0]), SHARDREC_ETIMEOUT);
  EXPECT_FALSE(LastError().empty());
  EXPECT_EQ(shardrec_comm_barrier(comms[0]), SHARDREC_EUSAGE);
  EXPECT_EQ(shardrec_comm_abort(comms[1]), SHARDREC_OK);
  EXPECT_EQ(shardrec_comm_async_error(comms[1]), SHARDREC_EABORTED);
  shardrec_comm_destroy(comms[0]);
  shardrec_comm_destroy(comms[1]);
}

// INT64_MAX as a timeout ("for ever") overflowed the clock's arithmetic and expired at once
// (creation failed, a barrier timed out in 10 ms); such values now wait 10^12 ms.
TEST(CapiComm, AHugeTimeoutWaitsInsteadOfExpiring) {
  shardrec_comm_t* comms[2] = {};
  shardrec_comm_options_t opts;
  ASSERT_EQ(shardrec_comm_options_init(&opts, SHARDREC_COMM_OPTIONS_VERSION), SHARDREC_OK);
  opts.timeout_ms = INT64_MAX;
  opts.store_grace_ms = INT64_MAX;
  ASSERT_EQ(shardrec_comm_create_local_group(comms, 2, &opts), SHARDREC_OK) << LastError();
  std::thread peer([&] { EXPECT_EQ(shardrec_comm_barrier(comms[1]), SHARDREC_OK) << LastError(); });
  EXPECT_EQ(shardrec_comm_barrier(comms[0]), SHARDREC_OK) << LastError();
  peer.join();
  ASSERT_EQ(shardrec_comm_set_timeout(comms[0], INT64_MAX), SHARDREC_OK);
  const auto start = std::chrono::steady_clock::now();
  std::thread aborter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    EXPECT_EQ(shardrec_comm_abort(comms[0]), SHARDREC_OK);
  });
  EXPECT_EQ(shardrec_comm_barrier(comms[0]), SHARDREC_EABORTED) << LastError();  // rank 1 stays
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(250));
  aborter.join();
  shardrec_comm_destroy(comms[0]);
  shardrec_comm_destroy(comms[1]);
}

// comm.h: one thread at a time per communicator. A second thread's call, made while the first is
// blocked in one, used to go out beside it (its peers then read mismatched messages; over Gloo a
// pair thread threw and ended a process). It is refused with EUSAGE, changing nothing: the first
// call completes once its peer joins, and the ranks stay in step.
TEST(CapiComm, ASecondThreadOnACommunicatorInUseIsRefused) {
  shardrec_comm_t* comms[2] = {};
  shardrec_comm_options_t opts;
  ASSERT_EQ(shardrec_comm_options_init(&opts, SHARDREC_COMM_OPTIONS_VERSION), SHARDREC_OK);
  opts.timeout_ms = 30000;
  ASSERT_EQ(shardrec_comm_create_local_group(comms, 2, &opts), SHARDREC_OK) << LastError();
  std::thread first(
      [&] { EXPECT_EQ(shardrec_comm_barrier(comms[0]), SHARDREC_OK) << LastError(); });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // `first` waits for rank 1
  int64_t v = 1;
  EXPECT_EQ(shardrec_comm_allreduce(comms[0], &v, &v, 1, SHARDREC_DTYPE_INT64, SHARDREC_REDUCE_SUM,
                                    nullptr),
            SHARDREC_EUSAGE);
  EXPECT_NE(LastError().find("in use by another thread"), std::string::npos) << LastError();
  EXPECT_EQ(v, 1);
  EXPECT_EQ(shardrec_comm_barrier(comms[1]), SHARDREC_OK) << LastError();
  first.join();
  std::thread peer([&] { EXPECT_EQ(shardrec_comm_barrier(comms[1]), SHARDREC_OK) << LastError(); });
  EXPECT_EQ(shardrec_comm_barrier(comms[0]), SHARDREC_OK) << LastError();
  peer.join();
  shardrec_comm_destroy(comms[0]);
  shardrec_comm_destroy(comms[1]);
}

// A split is collective: a rank passing a NULL `out` failed alone, its peers waited out their
// timeout in the split's exchange and were poisoned. It now takes part in that exchange as a
// refusal: every rank fails at once (the others naming it), nothing is created, and the
// communicator stays good.
TEST(CapiComm, ASplitRefusedOnOneRankFailsEveryRankAtOnce) {
  shardrec_comm_t* comms[2] = {};
  shardrec_comm_options_t opts;
  ASSERT_EQ(shardrec_comm_options_init(&opts, SHARDREC_COMM_OPTIONS_VERSION), SHARDREC_OK);
  opts.timeout_ms = 30000;
  ASSERT_EQ(shardrec_comm_create_local_group(comms, 2, &opts), SHARDREC_OK) << LastError();
  const auto rank = [&](int r) {
    const auto start = std::chrono::steady_clock::now();
    shardrec_comm_t* child = nullptr;
    EXPECT_EQ(shardrec_comm_split(r == 1 ? nullptr : &child, comms[r], 0, r), SHARDREC_EINVAL);
    EXPECT_NE(LastError().find(r == 1 ? "out" : "rank 1 refused its split"), std::string::npos)
        << LastError();
    EXPECT_EQ(child, nullptr);
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
    EXPECT_EQ(shardrec_comm_barrier(comms[r]), SHARDREC_OK) << LastError();
    ASSERT_EQ(shardrec_comm_split(&child, comms[r], 0, r), SHARDREC_OK) << LastError();
    EXPECT_EQ(shardrec_comm_barrier(child), SHARDREC_OK) << LastError();
    shardrec_comm_destroy(child);
  };
  std::thread peer(rank, 1);
  rank(0);
  peer.join();
  shardrec_comm_destroy(comms[0]);
  shardrec_comm_destroy(comms[1]);
}

void ExpectInvalid(shardrec_status_t rc, const char* word) {
  EXPECT_EQ(rc, SHARDREC_EINVAL);
  EXPECT_NE(LastError().find(word), std::string::npos)
      << "message '" << LastError() << "' lacks '" << word << "'";
}

TEST(CapiComm, ValidationErrorsNameTheArgument) {
  shardrec_comm_t* comms[2] = {};
  ASSERT_EQ(shardrec_comm_create_local_group(comms, 2, nullptr), SHARDREC_OK);
  shardrec_comm_t* c = comms[0];
  shardrec_unique_id_t id;
  std::memset(&id, 0, sizeof(id));
  shardrec_comm_t* out = reinterpret_cast<shardrec_comm_t*>(&id);  // must be reset to NULL
  int32_t i32 = 0;
  ExpectInvalid(shardrec_comm_unique_id_create(nullptr), "out");
  ExpectInvalid(shardrec_comm_create(nullptr, &id, 2, 0, nullptr), "out");
  ExpectInvalid(shardrec_comm_create(&out, nullptr, 2, 0, nullptr), "id");
  EXPECT_EQ(out, nullptr);
  ExpectInvalid(shardrec_comm_create(&out, &id, 0, 0, nullptr), "world_size");
  ExpectInvalid(shardrec_comm_create(&out, &id, 2, 2, nullptr), "rank");
  ExpectInvalid(shardrec_comm_create(&out, &id, 2, -1, nullptr), "rank");
  EXPECT_EQ(shardrec_comm_create(&out, &id, 1, 0, nullptr), SHARDREC_ECORRUPT);  // all-zero id
  shardrec_comm_options_t opts = SHARDREC_COMM_OPTIONS_INIT;
  opts.version = 99;
  ExpectInvalid(shardrec_comm_create_local_group(comms, 2, &opts), "version");
  opts = shardrec_comm_options_t SHARDREC_COMM_OPTIONS_INIT;
  opts.timeout_ms = -1;
  ExpectInvalid(shardrec_comm_create_local_group(comms, 2, &opts), "timeout_ms");
  opts = shardrec_comm_options_t SHARDREC_COMM_OPTIONS_INIT;
  opts.backend = 7;
  ExpectInvalid(shardrec_comm_create_local_group(comms, 2, &opts), "backend");
  opts = shardrec_comm_options_t SHARDREC_COMM_OPTIONS_INIT;
  opts.device_type = 5;
  ExpectInvalid(shardrec_comm_create_local_group(comms, 2, &opts), "device_type");
  opts = shardrec_comm_options_t SHARDREC_COMM_OPTIONS_INIT;
  opts.bind_address = "not-an-address";
  ExpectInvalid(shardrec_comm_create_local_group(comms, 2, &opts), "bind_address");
  EXPECT_EQ(comms[0], c);  // a failed call touched nothing
  shardrec_comm_t* group[2];
  ExpectInvalid(shardrec_comm_create_local_group(group, 0, nullptr), "n ");
  ExpectInvalid(shardrec_comm_create_local_group(nullptr, 2, nullptr), "comms_out");
  shardrec_store_callbacks_t cb = SHARDREC_STORE_CALLBACKS_INIT;
  ExpectInvalid(shardrec_comm_create_with_store(&out, &cb, 2, 0, nullptr), "callbacks->set");
  ExpectInvalid(shardrec_comm_create_with_store(&out, nullptr, 2, 0, nullptr), "callbacks");
  ExpectInvalid(shardrec_comm_split(&out, nullptr, 0, 0), "comm");
  ExpectInvalid(shardrec_comm_rank(nullptr, c), "out");
  ExpectInvalid(shardrec_comm_size(&i32, nullptr), "comm");
  ExpectInvalid(shardrec_comm_set_timeout(c, 0), "timeout_ms");
  ExpectInvalid(shardrec_comm_abort(nullptr), "comm");
  ExpectInvalid(shardrec_comm_async_error(nullptr), "comm");
  // A raw collective's refusal of its own arguments joins the agreement (comm.h), so every rank
  // makes each call.
  RunThreads(2, [&](int r) {
    shardrec_comm_t* cr = comms[r];
    float y = 0;
    ExpectInvalid(shardrec_comm_allreduce(cr, nullptr, &y, 1, SHARDREC_DTYPE_FLOAT32,
                                          SHARDREC_REDUCE_SUM, nullptr),
                  "send");
    ExpectInvalid(shardrec_comm_allreduce(cr, &y, nullptr, 1, SHARDREC_DTYPE_FLOAT32,
                                          SHARDREC_REDUCE_SUM, nullptr),
                  "recv");
    ExpectInvalid(shardrec_comm_allreduce(cr, &y, &y, 1, 42, SHARDREC_REDUCE_SUM, nullptr),
                  "dtype");
    ExpectInvalid(shardrec_comm_allreduce(cr, &y, &y, 1, SHARDREC_DTYPE_FLOAT32, 9, nullptr), "op");
    ExpectInvalid(shardrec_comm_broadcast(cr, &y, 1, SHARDREC_DTYPE_FLOAT32, 2, nullptr), "root");
    ExpectInvalid(shardrec_comm_broadcast(cr, &y, 1, SHARDREC_DTYPE_FLOAT32, -1, nullptr), "root");
    ExpectInvalid(shardrec_comm_broadcast(cr, nullptr, 1, SHARDREC_DTYPE_FLOAT32, 0, nullptr),
                  "buf");
    ExpectInvalid(shardrec_comm_allgather(cr, &y, &y, 1, SHARDREC_DTYPE_FLOAT32, nullptr), "recv");
  });
  ExpectInvalid(shardrec_comm_barrier(nullptr), "comm");
  ExpectInvalid(shardrec_comm_options_init(nullptr, 1), "options");
  ExpectInvalid(shardrec_comm_options_init(&opts, 0), "version");
  // Nothing above poisoned the communicators: a real collective still works.
  RunThreads(2, [&](int r) {
    float v = 1.0f;
    EXPECT_EQ(shardrec_comm_allreduce(comms[r], &v, &v, 1, SHARDREC_DTYPE_FLOAT32,
                                      SHARDREC_REDUCE_SUM, nullptr),
              SHARDREC_OK);
    EXPECT_EQ(v, 2.0f);
  });
  shardrec_comm_destroy(comms[0]);
  shardrec_comm_destroy(comms[1]);
}

// Sizes of the raw collectives come from the caller. Ranks giving different counts, or calling
// different collectives, made Gloo's pair thread throw (the process aborted) or returned
// corrupted sums; every rank now fails with EINVAL before any data moves, and the communicator
// stays usable. The cases (mismatch_cases.h) also run over MPI and Gloo processes under mpirun
// (tests/capi/mpi/mpi_mismatch_test.cc).
class CapiCommMismatch : public ::testing::TestWithParam<shardrec::testing::mismatch::NamedCase> {};

TEST_P(CapiCommMismatch, EveryRankFailsAndTheNextCallWorks) {
  shardrec_comm_t* comms[2] = {};
  shardrec_comm_options_t opts = SHARDREC_COMM_OPTIONS_INIT;
  opts.timeout_ms = 20000;
  ASSERT_EQ(shardrec_comm_create_local_group(comms, 2, &opts), SHARDREC_OK) << LastError();
  RunThreads(2, [&](int r) { GetParam().run(comms[r], r, 2); });
  shardrec_comm_destroy(comms[0]);
  shardrec_comm_destroy(comms[1]);
}

INSTANTIATE_TEST_SUITE_P(
    Gloo, CapiCommMismatch, ::testing::ValuesIn(shardrec::testing::mismatch::AllCases()),
    [](const ::testing::TestParamInfo<shardrec::testing::mismatch::NamedCase>& info) {
      return std::string(info.param.name);
    });

// A rank refusing its own arguments used to fail alone while its peers waited out their timeout
// in the exchange it never joined; it now joins the agreement, so every rank fails at once (the
// others naming it) and the communicator stays usable.
TEST(CapiComm, ARankRefusingItsArgumentsFailsEveryRankAtOnce) {
  shardrec_comm_t* comms[2] = {};
  shardrec_comm_options_t opts = SHARDREC_COMM_OPTIONS_INIT;
  opts.timeout_ms = 60000;
  ASSERT_EQ(shardrec_comm_create_local_group(comms, 2, &opts), SHARDREC_OK) << LastError();
  RunThreads(2, [&](int r) {
    std::vector<float> x(4, 1.0f), y(8, 0.0f);
    const bool bad = r == 1;
    const auto t0 = std::chrono::steady_clock::now();
    auto expect_refused = [&](shardrec_status_t st, const char* own) {
      EXPECT_EQ(st, SHARDREC_EINVAL);
      const std::string want = bad ? own : "rank 1 refused its ";
      EXPECT_NE(LastError().find(want), std::string::npos) << LastError();
    };
    expect_refused(shardrec_comm_allreduce(comms[r], bad ? nullptr : x.data(), x.data(), 4,
                                           SHARDREC_DTYPE_FLOAT32, SHARDREC_REDUCE_SUM, nullptr),
                   "send");
    expect_refused(
        shardrec_comm_allreduce(comms[r], x.data(), x.data(), 4, bad ? 42 : SHARDREC_DTYPE_FLOAT32,
                                SHARDREC_REDUCE_SUM, nullptr),
        "dtype");
    expect_refused(shardrec_comm_broadcast(comms[r], x.data(), 4, SHARDREC_DTYPE_FLOAT32,
                                           bad ? 5 : 0, nullptr),
                   "root");
    expect_refused(shardrec_comm_allgather(comms[r], x.data(), bad ? x.data() : y.data(), 4,
                                           SHARDREC_DTYPE_FLOAT32, nullptr),
                   "recv");
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_LT(seconds, 30.0) << "a peer waited for the refusing rank";
    for (float v : x) EXPECT_EQ(v, 1.0f);  // nothing moved
    EXPECT_EQ(shardrec_comm_allreduce(comms[r], x.data(), x.data(), 4, SHARDREC_DTYPE_FLOAT32,
                                      SHARDREC_REDUCE_SUM, nullptr),
              SHARDREC_OK)
        << LastError();
    for (float v : x) EXPECT_EQ(v, 2.0f);
  });
  shardrec_comm_destroy(comms[0]);
  shardrec_comm_destroy(comms[1]);
}

// A count whose bytes wrap around (2^61 + 1 int64 elements are 8 bytes past 2^64) moved one
// element and returned OK; it is refused on every rank.
TEST(CapiComm, ACountWhoseBytesWrapAroundIsRefused) {
  shardrec_comm_t* comms[2] = {};
  ASSERT_EQ(shardrec_comm_create_local_group(comms, 2, nullptr), SHARDREC_OK) << LastError();
  RunThreads(2, [&](int r) {
    int64_t x[2] = {1, 1};
    const size_t count = (size_t{1} << 61) + 1;
    EXPECT_EQ(shardrec_comm_allreduce(comms[r], x, x, count, SHARDREC_DTYPE_INT64,
                                      SHARDREC_REDUCE_SUM, nullptr),
              SHARDREC_EINVAL);
    EXPECT_NE(LastError().find("too large for any buffer"), std::string::npos) << LastError();
    EXPECT_EQ(shardrec_comm_broadcast(comms[r], x, count, SHARDREC_DTYPE_INT64, 0, nullptr),
              SHARDREC_EINVAL);
    // An all-gather's recv holds world x count elements.
    EXPECT_EQ(shardrec_comm_allgather(comms[r], x, x, (size_t{1} << 59) + 1, SHARDREC_DTYPE_FLOAT64,
                                      nullptr),
              SHARDREC_EINVAL);
    EXPECT_EQ(x[0], 1);
    EXPECT_EQ(shardrec_comm_barrier(comms[r]), SHARDREC_OK) << LastError();
  });
  shardrec_comm_destroy(comms[0]);
  shardrec_comm_destroy(comms[1]);
}

// A peer's refusal is named with its call only when every rank made that kind of call: here rank 1
// refuses an allreduce while rank 0 calls barrier, and rank 0 must not read "refused its barrier".
TEST(CapiComm, ARefusalBesideAnotherCallSaysTheCallsDiffer) {
  shardrec_comm_t* comms[2] = {};
  ASSERT_EQ(shardrec_comm_create_local_group(comms, 2, nullptr), SHARDREC_OK) << LastError();
  RunThreads(2, [&](int r) {
    std::vector<float> x(4, 1.0f);
    if (r == 0) {
      EXPECT_EQ(shardrec_comm_barrier(comms[r]), SHARDREC_EINVAL);
      const std::string msg = LastError();
      EXPECT_NE(msg.find("rank 1 refused its arguments"), std::string::npos) << msg;
      EXPECT_NE(msg.find("called different collectives (this rank: barrier)"), std::string::npos)
          << msg;
      EXPECT_EQ(msg.find("refused its barrier"), std::string::npos) << msg;
    } else {
      EXPECT_EQ(shardrec_comm_allreduce(comms[r], nullptr, x.data(), 4, SHARDREC_DTYPE_FLOAT32,
                                        SHARDREC_REDUCE_SUM, nullptr),
                SHARDREC_EINVAL);
    }
    EXPECT_EQ(shardrec_comm_barrier(comms[r]), SHARDREC_OK) << LastError();  // still in step
  });
  shardrec_comm_destroy(comms[0]);
  shardrec_comm_destroy(comms[1]);
}

// The C++ wrapper refuses spans of different sizes itself; it still meets the other ranks in the
// C call's agreement (the other rank fails at once naming it, and the next call pairs up).
TEST(CapiComm, TheCppWrapperRefusingItsSpansFailsEveryRankAtOnce) {
  std::vector<shardrec::Comm> comms = shardrec::Comm::local_group(2);
  RunThreads(2, [&](int r) {
    std::vector<float> x(4, 1.0f), y(r == 1 ? 3 : 4, 0.0f);
    const auto t0 = std::chrono::steady_clock::now();
    try {
      comms[r].allreduce(x, y);
      ADD_FAILURE() << "rank " << r << ": the refused allreduce returned";
    } catch (const shardrec::Error& e) {
      EXPECT_EQ(e.code(), SHARDREC_EINVAL);
      const std::string want = r == 1 ? "recv 3" : "rank 1 refused its allreduce";
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 30.0);
    comms[r].allreduce(x, x);
    for (float v : x) EXPECT_EQ(v, 2.0f);
    comms[r].barrier();
  });
}

TEST(CapiComm, DestroyNullIsANoOp) {
  shardrec_comm_destroy(nullptr);
  EXPECT_STREQ(shardrec_last_error(), "");
}

TEST(CapiComm, GpuRequestWithoutGpuIsNoDevice) {
  // ENODEVICE where the CUDA plugin is built, EUNSUPPORTED in a build without CUDA.
  const shardrec_status_t expected = shardrec_device_check(SHARDREC_DEVICE_CUDA, 0);
  if (expected == SHARDREC_OK) GTEST_SKIP() << "a GPU is present";
  ASSERT_TRUE(expected == SHARDREC_ENODEVICE || expected == SHARDREC_EUNSUPPORTED) << expected;
  shardrec_comm_options_t opts = SHARDREC_COMM_OPTIONS_INIT;
  opts.device_type = SHARDREC_DEVICE_CUDA;
  shardrec_comm_t* comms[2] = {};
  for (int32_t backend : {SHARDREC_BACKEND_AUTO, SHARDREC_BACKEND_GLOO, SHARDREC_BACKEND_NCCL}) {
    opts.backend = backend;
    EXPECT_EQ(shardrec_comm_create_local_group(comms, 2, &opts), expected) << backend;
    EXPECT_NE(LastError().find("cuda:0"), std::string::npos) << LastError();
    EXPECT_EQ(comms[0], nullptr);  // untouched
    shardrec_unique_id_t id;
    ASSERT_EQ(shardrec_comm_unique_id_create(&id), SHARDREC_OK);
    shardrec_comm_t* one = nullptr;
    EXPECT_EQ(shardrec_comm_create(&one, &id, 1, 0, &opts), expected);
    EXPECT_EQ(one, nullptr);
  }
}

}  // namespace
