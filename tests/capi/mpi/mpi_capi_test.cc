// The MPI backend through the public C API, one rank per process under mpirun: collectives
// against a reference computed on every rank, chunked messages against unchunked ones, split,
// a stalled peer's timeout and bad arguments. Training runs: mpi_training_test.cc.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "shardrec/comm.h"
#include "tests/capi/mpi/mpi_test_world.h"

namespace shardrec::testing {

namespace {
shardrec_comm_t* g_world = nullptr;
shardrec_status_t g_create_rc = SHARDREC_OK;
std::string g_create_error;
}  // namespace

shardrec_comm_t* MpiWorld() { return g_world; }
std::string MpiWorldError() { return std::to_string(g_create_rc) + ": " + g_create_error; }
int32_t MpiRank() {
  int32_t r = 0;
  shardrec_comm_rank(&r, g_world);
  return r;
}
int32_t MpiSize() {
  int32_t n = 0;
  shardrec_comm_size(&n, g_world);
  return n;
}

namespace {

shardrec_comm_t* World() { return MpiWorld(); }
int32_t Rank() { return MpiRank(); }
int32_t Size() { return MpiSize(); }

// Every rank's input, reproducible on every rank: values small enough that fp32 sums of a few
// ranks are exact in every order, so results can be compared bit for bit.
std::vector<float> Input(int32_t rank, size_t n) {
  std::mt19937 gen(1000 + rank);
  std::uniform_int_distribution<int> d(-64, 64);
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(d(gen)) / 8.0f;
  return v;
}

template <typename T>
std::vector<T> Cast(const std::vector<float>& in) {
  std::vector<T> out(in.size());
  for (size_t i = 0; i < in.size(); ++i) out[i] = static_cast<T>(in[i]);
  return out;
}

// fp32 -> bf16 (the inputs are exactly representable, so truncation is exact) and back.
uint16_t ToBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return static_cast<uint16_t>(u >> 16);
}
float FromBf16(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Reference of op over every rank's Input(r, n), in double.
std::vector<double> Reference(int32_t op, size_t n, int32_t world) {
  std::vector<std::vector<float>> in;
  for (int32_t r = 0; r < world; ++r) in.push_back(Input(r, n));
  std::vector<double> out(n);
  for (size_t i = 0; i < n; ++i) {
    double acc = in[0][i];
    for (int32_t r = 1; r < world; ++r) {
      const double x = in[r][i];
      acc = op == SHARDREC_REDUCE_MAX   ? std::max(acc, x)
            : op == SHARDREC_REDUCE_MIN ? std::min(acc, x)
                                        : acc + x;
    }
    out[i] = op == SHARDREC_REDUCE_AVG ? acc / world : acc;
  }
  return out;
}

void AllReduceFloats(size_t n);

TEST_F(MpiTest, AllReduceEveryFloatDtypeAndOpMatchesTheReference) {
  // Small buffers gather every rank's buffer, larger ones go as reduce-scatter (in place at every
  // rank, the ranks from 2 on included) and all-gather: 40000 takes that path for fp64 at world 2
  // and for every dtype but bf16 at world 4. The inputs are sums of eighths, exact in any order,
  // so all compare bit for bit.
  for (size_t n : {size_t{1000}, size_t{40000}}) AllReduceFloats(n);
}

void AllReduceFloats(size_t n) {
  const int32_t w = Size();
  for (int32_t op :
       {SHARDREC_REDUCE_SUM, SHARDREC_REDUCE_AVG, SHARDREC_REDUCE_MAX, SHARDREC_REDUCE_MIN}) {
    const std::vector<double> ref = Reference(op, n, w);
    std::vector<float> f32 = Input(Rank(), n);
    ASSERT_EQ(shardrec_comm_allreduce(World(), f32.data(), f32.data(), n, SHARDREC_DTYPE_FLOAT32,
                                      op, nullptr),
              SHARDREC_OK)
        << shardrec_last_error();
    std::vector<double> f64 = Cast<double>(Input(Rank(), n));
    std::vector<double> f64_out(n);
    ASSERT_EQ(shardrec_comm_allreduce(World(), f64.data(), f64_out.data(), n,
                                      SHARDREC_DTYPE_FLOAT64, op, nullptr),
              SHARDREC_OK)
        << shardrec_last_error();
    std::vector<uint16_t> bf(n);
    const std::vector<float> in = Input(Rank(), n);
    for (size_t i = 0; i < n; ++i) bf[i] = ToBf16(in[i]);
    ASSERT_EQ(shardrec_comm_allreduce(World(), bf.data(), bf.data(), n, SHARDREC_DTYPE_BFLOAT16, op,
                                      nullptr),
              SHARDREC_OK)
        << shardrec_last_error();
    for (size_t i = 0; i < n; ++i) {
      ASSERT_EQ(f32[i], static_cast<float>(ref[i])) << "fp32 op " << op << " element " << i;
      ASSERT_EQ(f64_out[i], ref[i]) << "fp64 op " << op << " element " << i;
      // bf16 keeps 8 significant bits: the averages of eighths round.
      ASSERT_NEAR(FromBf16(bf[i]), ref[i], std::fabs(ref[i]) / 128 + 1e-6)
          << "bf16 op " << op << " element " << i;
    }
  }
}

TEST_F(MpiTest, AllReduceIntegersAreExact) {
  const size_t n = 257;
  const int32_t w = Size();
  for (int32_t op :
       {SHARDREC_REDUCE_SUM, SHARDREC_REDUCE_AVG, SHARDREC_REDUCE_MAX, SHARDREC_REDUCE_MIN}) {
    std::vector<int64_t> i64(n), i64_ref(n);
    std::vector<int32_t> i32(n);
    for (size_t i = 0; i < n; ++i) {
      i64[i] = (static_cast<int64_t>(Rank()) + 1) * 1000003 * static_cast<int64_t>(i + 1) -
               (int64_t{1} << 40);
      i32[i] = static_cast<int32_t>(Rank() * 7 + i) - 100;
      int64_t acc = 0;
      for (int32_t r = 0; r < w; ++r) {
        const int64_t x = (static_cast<int64_t>(r) + 1) * 1000003 * static_cast<int64_t>(i + 1) -
                          (int64_t{1} << 40);
        acc = r == 0                      ? x
              : op == SHARDREC_REDUCE_MAX ? std::max(acc, x)
              : op == SHARDREC_REDUCE_MIN ? std::min(acc, x)
                                          : acc + x;
      }
      i64_ref[i] = op == SHARDREC_REDUCE_AVG ? acc / w : acc;
    }
    ASSERT_EQ(shardrec_comm_allreduce(World(), i64.data(), i64.data(), n, SHARDREC_DTYPE_INT64, op,
                                      nullptr),
              SHARDREC_OK)
        << shardrec_last_error();
    EXPECT_EQ(i64, i64_ref) << "int64 op " << op;
    ASSERT_EQ(shardrec_comm_allreduce(World(), i32.data(), i32.data(), n, SHARDREC_DTYPE_INT32, op,
                                      nullptr),
              SHARDREC_OK)
        << shardrec_last_error();
  }
}

TEST_F(MpiTest, BroadcastAllGatherBarrierAndSplit) {
  const int32_t w = Size(), r = Rank();
  for (int32_t root = 0; root < w; ++root) {
    std::vector<int32_t> buf(33, r == root ? root + 10 : -1);
    ASSERT_EQ(shardrec_comm_broadcast(World(), buf.data(), buf.size(), SHARDREC_DTYPE_INT32, root,
                                      nullptr),
              SHARDREC_OK)
        << shardrec_last_error();
    EXPECT_EQ(buf, std::vector<int32_t>(33, root + 10));
  }
  for (size_t count : {size_t{0}, size_t{1}, size_t{1001}}) {
    std::vector<uint8_t> send(count, static_cast<uint8_t>(r + 1));
    std::vector<uint8_t> recv(count * w, 0);
    ASSERT_EQ(shardrec_comm_allgather(World(), send.data(), recv.data(), count,
                                      SHARDREC_DTYPE_UINT8, nullptr),
              SHARDREC_OK)
        << shardrec_last_error();
    for (int32_t s = 0; s < w; ++s)
      for (size_t i = 0; i < count; ++i) ASSERT_EQ(recv[s * count + i], s + 1);
  }
  ASSERT_EQ(shardrec_comm_barrier(World()), SHARDREC_OK) << shardrec_last_error();
  // Even and odd ranks, ordered by descending key; a negative color joins no group.
  shardrec_comm_t* half = nullptr;
  ASSERT_EQ(shardrec_comm_split(&half, World(), r % 2, -r), SHARDREC_OK) << shardrec_last_error();
  ASSERT_NE(half, nullptr);
  int32_t hr = -1, hs = -1;
  shardrec_comm_rank(&hr, half);
  shardrec_comm_size(&hs, half);
  EXPECT_EQ(hs, (w - r % 2 + 1) / 2);
  EXPECT_EQ(hr, (w - 1 - r) / 2);  // members of higher rank come first
  int64_t mine = r, sum = 0;
  ASSERT_EQ(shardrec_comm_allreduce(half, &mine, &sum, 1, SHARDREC_DTYPE_INT64, SHARDREC_REDUCE_SUM,
                                    nullptr),
            SHARDREC_OK);
  int64_t expect = 0;
  for (int32_t q = r % 2; q < w; q += 2) expect += q;
  EXPECT_EQ(sum, expect);
  shardrec_comm_destroy(half);
  shardrec_comm_t* none = reinterpret_cast<shardrec_comm_t*>(1);
  ASSERT_EQ(shardrec_comm_split(&none, World(), r == 0 ? -1 : 0, 0), SHARDREC_OK);
  EXPECT_EQ(none == nullptr, r == 0);
  shardrec_comm_destroy(none);
}

TEST_F(MpiTest, ChunkedMessagesGiveTheSameBits) {
  // Pieces of at most 7 bytes: every all-reduce element, all-gather byte run and broadcast goes
  // as many MPI messages, in order.
  ::setenv("SHARDREC_MPI_MAX_MESSAGE_BYTES", "7", 1);
  shardrec_comm_t* small = nullptr;
  shardrec_comm_options_t o = SHARDREC_COMM_OPTIONS_INIT;
  o.timeout_ms = 60000;
  ASSERT_EQ(shardrec_comm_create_mpi(&small, 0, &o), SHARDREC_OK) << shardrec_last_error();
  ::unsetenv("SHARDREC_MPI_MAX_MESSAGE_BYTES");
  const size_t n = 301;
  std::vector<float> a = Input(Rank(), n), b = a;
  ASSERT_EQ(shardrec_comm_allreduce(World(), a.data(), a.data(), n, SHARDREC_DTYPE_FLOAT32,
                                    SHARDREC_REDUCE_SUM, nullptr),
            SHARDREC_OK);
  ASSERT_EQ(shardrec_comm_allreduce(small, b.data(), b.data(), n, SHARDREC_DTYPE_FLOAT32,
                                    SHARDREC_REDUCE_SUM, nullptr),
            SHARDREC_OK)
      << shardrec_last_error();
  EXPECT_EQ(std::memcmp(a.data(), b.data(), n * 4), 0);
  std::vector<float> ga(n * Size()), gb(n * Size());
  const std::vector<float> in = Input(Rank(), n);
  ASSERT_EQ(
      shardrec_comm_allgather(World(), in.data(), ga.data(), n, SHARDREC_DTYPE_FLOAT32, nullptr),
      SHARDREC_OK);
  ASSERT_EQ(
      shardrec_comm_allgather(small, in.data(), gb.data(), n, SHARDREC_DTYPE_FLOAT32, nullptr),
      SHARDREC_OK)
      << shardrec_last_error();
  EXPECT_EQ(ga, gb);
  std::vector<double> bc = Cast<double>(Input(Size() - 1, n));
  if (Rank() != Size() - 1) std::fill(bc.begin(), bc.end(), 0.0);
  ASSERT_EQ(
      shardrec_comm_broadcast(small, bc.data(), n, SHARDREC_DTYPE_FLOAT64, Size() - 1, nullptr),
      SHARDREC_OK)
      << shardrec_last_error();
  EXPECT_EQ(bc, Cast<double>(Input(Size() - 1, n)));
  shardrec_comm_destroy(small);
}

TEST_F(MpiTest, ReduceScatterInSeveralRoundsGivesTheSameBits) {
  // 64 KiB messages and no direct reads: an in-place all-reduce of 300001 floats takes the
  // reduce-scatter path in 5 to 10 rounds (world 4 to 2), with blocks of unequal length, against
  // the world (direct reads of the peers' buffers where the ranks share a host).
  ::setenv("SHARDREC_MPI_MAX_MESSAGE_BYTES", "65536", 1);
  ::setenv("SHARDREC_MPI_DIRECT", "0", 1);
  shardrec_comm_t* rounds = nullptr;
  shardrec_comm_options_t o = SHARDREC_COMM_OPTIONS_INIT;
  o.timeout_ms = 60000;
  ASSERT_EQ(shardrec_comm_create_mpi(&rounds, 0, &o), SHARDREC_OK) << shardrec_last_error();
  ::unsetenv("SHARDREC_MPI_MAX_MESSAGE_BYTES");
  ::unsetenv("SHARDREC_MPI_DIRECT");
  const size_t n = 300001;
  std::vector<float> a = Input(Rank(), n), b = a;
  ASSERT_EQ(shardrec_comm_allreduce(World(), a.data(), a.data(), n, SHARDREC_DTYPE_FLOAT32,
                                    SHARDREC_REDUCE_AVG, nullptr),
            SHARDREC_OK);
  ASSERT_EQ(shardrec_comm_allreduce(rounds, b.data(), b.data(), n, SHARDREC_DTYPE_FLOAT32,
                                    SHARDREC_REDUCE_AVG, nullptr),
            SHARDREC_OK)
      << shardrec_last_error();
  EXPECT_EQ(std::memcmp(a.data(), b.data(), n * 4), 0);
  const std::vector<double> ref = Reference(SHARDREC_REDUCE_AVG, n, Size());
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(b[i], static_cast<float>(ref[i])) << "element " << i;
  shardrec_comm_destroy(rounds);
}

TEST_F(MpiTest, DirectReadsGiveTheSameBitsAsMessages) {
  // The world reads same-host peers' buffers (128 KiB chunks, several per block here); a
  // communicator created with SHARDREC_MPI_DIRECT=0 sends every byte as a message. Out of place
  // and in place (ranks from 2 on sum into scratch), fp32 average and bf16 sum, uneven blocks:
  // the same bits from both, summed in rank order. Inputs in thirds, so the order shows.
  ::setenv("SHARDREC_MPI_DIRECT", "0", 1);
  shardrec_comm_t* messages = nullptr;
  ASSERT_EQ(shardrec_comm_create_mpi(&messages, 0, nullptr), SHARDREC_OK) << shardrec_last_error();
  ::unsetenv("SHARDREC_MPI_DIRECT");
  const size_t n = 300007;  // 1.2 MB: above the direct path's 1 MiB
  std::vector<float> in = Input(Rank(), n);
  for (float& x : in) x /= 3.0f;
  std::vector<float> a(n), b(n), c = in, d = in;
  for (shardrec_comm_t* comm : {World(), messages}) {
    std::vector<float>& out = comm == World() ? a : b;
    std::vector<float>& inplace = comm == World() ? c : d;
    ASSERT_EQ(shardrec_comm_allreduce(comm, in.data(), out.data(), n, SHARDREC_DTYPE_FLOAT32,
                                      SHARDREC_REDUCE_AVG, nullptr),
              SHARDREC_OK)
        << shardrec_last_error();
    ASSERT_EQ(shardrec_comm_allreduce(comm, inplace.data(), inplace.data(), n,
                                      SHARDREC_DTYPE_FLOAT32, SHARDREC_REDUCE_SUM, nullptr),
              SHARDREC_OK)
        << shardrec_last_error();
  }
  EXPECT_EQ(std::memcmp(a.data(), b.data(), n * 4), 0);
  EXPECT_EQ(std::memcmp(c.data(), d.data(), n * 4), 0);
  // bf16: twice the elements for the same bytes; every rank's input repeated.
  const size_t m = 2 * n;
  std::vector<uint16_t> e(m), f(m);
  for (size_t i = 0; i < m; ++i) e[i] = f[i] = ToBf16(in[i % n]);
  ASSERT_EQ(shardrec_comm_allreduce(World(), e.data(), e.data(), m, SHARDREC_DTYPE_BFLOAT16,
                                    SHARDREC_REDUCE_SUM, nullptr),
            SHARDREC_OK);
  ASSERT_EQ(shardrec_comm_allreduce(messages, f.data(), f.data(), m, SHARDREC_DTYPE_BFLOAT16,
                                    SHARDREC_REDUCE_SUM, nullptr),
            SHARDREC_OK);
  EXPECT_EQ(e, f);
  // Against a sum in rank order computed here.
  std::vector<std::vector<float>> all;
  for (int32_t r = 0; r < Size(); ++r) {
    all.push_back(Input(r, n));
    for (float& x : all.back()) x /= 3.0f;
  }
  for (size_t i = 0; i < n; ++i) {
    float s = all[0][i];
    for (int32_t r = 1; r < Size(); ++r) s += all[r][i];
    ASSERT_EQ(c[i], s) << "element " << i;
  }
  shardrec_comm_destroy(messages);
}

TEST_F(MpiTest, StalledPeerGivesTimeoutNotAHang) {
  if (Size() == 1) GTEST_SKIP() << "needs a peer to stall";
  // Its own root, so the poisoned failure domain is not the world's.
  shardrec_comm_t* t = nullptr;
  ASSERT_EQ(shardrec_comm_create_mpi(&t, 0, nullptr), SHARDREC_OK) << shardrec_last_error();
  ASSERT_EQ(shardrec_comm_set_timeout(t, 300), SHARDREC_OK);
  if (Rank() == 0) {
    EXPECT_EQ(shardrec_comm_barrier(t), SHARDREC_ETIMEOUT);
    EXPECT_NE(std::strstr(shardrec_last_error(), "barrier"), nullptr) << shardrec_last_error();
    EXPECT_NE(std::strstr(shardrec_last_error(), "did not complete within 300 ms"), nullptr)
        << shardrec_last_error();
    EXPECT_EQ(shardrec_comm_barrier(t), SHARDREC_EUSAGE);
    EXPECT_EQ(shardrec_comm_async_error(t), SHARDREC_ETIMEOUT);
  }
  ASSERT_EQ(shardrec_comm_barrier(World()), SHARDREC_OK) << shardrec_last_error();
  // The late ranks now complete the barrier rank 0 gave up on, so its requests drain and the
  // handle can be freed.
  if (Rank() != 0) {
    ASSERT_EQ(shardrec_comm_set_timeout(t, 60000), SHARDREC_OK);
    EXPECT_EQ(shardrec_comm_barrier(t), SHARDREC_OK) << shardrec_last_error();
  }
  ASSERT_EQ(shardrec_comm_barrier(World()), SHARDREC_OK) << shardrec_last_error();
  shardrec_comm_destroy(t);
}

TEST_F(MpiTest, AbortOfARootUnblocksItsSplitWithinASecond) {
  if (Size() == 1) GTEST_SKIP() << "needs a peer that never arrives";
  // Its own root and a split of it, as a collection splits the communicator it is given.
  shardrec_comm_t* root = nullptr;
  ASSERT_EQ(shardrec_comm_create_mpi(&root, 0, nullptr), SHARDREC_OK) << shardrec_last_error();
  shardrec_comm_t* split = nullptr;
  ASSERT_EQ(shardrec_comm_split(&split, root, 0, Rank()), SHARDREC_OK) << shardrec_last_error();
  ASSERT_EQ(shardrec_comm_set_timeout(split, 30000), SHARDREC_OK);
  if (Rank() == 0) {
    std::thread aborter([root] {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      shardrec_comm_abort(root);
    });
    const auto begin = std::chrono::steady_clock::now();
    EXPECT_EQ(shardrec_comm_barrier(split), SHARDREC_EABORTED) << shardrec_last_error();
    const auto waited = std::chrono::steady_clock::now() - begin;
    aborter.join();
    // 200 ms until the abort, then at most a second (the timeout is 30 s).
    EXPECT_LT(waited, std::chrono::milliseconds(1200));
    EXPECT_EQ(shardrec_comm_barrier(split), SHARDREC_EABORTED);
    EXPECT_EQ(shardrec_comm_async_error(root), SHARDREC_EABORTED);
  }
  ASSERT_EQ(shardrec_comm_barrier(World()), SHARDREC_OK) << shardrec_last_error();
  // The other ranks complete the barrier rank 0 gave up on, so its requests drain and the
  // handles can be freed.
  if (Rank() != 0) {
    EXPECT_EQ(shardrec_comm_barrier(split), SHARDREC_OK) << shardrec_last_error();
  }
  ASSERT_EQ(shardrec_comm_barrier(World()), SHARDREC_OK) << shardrec_last_error();
  shardrec_comm_destroy(split);
  shardrec_comm_destroy(root);
}

TEST_F(MpiTest, BadArgumentsAreRefused) {
  shardrec_comm_t* c = reinterpret_cast<shardrec_comm_t*>(1);
  shardrec_comm_options_t o = SHARDREC_COMM_OPTIONS_INIT;
  o.backend = SHARDREC_BACKEND_NCCL;
  EXPECT_EQ(shardrec_comm_create_mpi(&c, 0, &o), SHARDREC_EINVAL);
  EXPECT_EQ(c, nullptr);
  o.backend = SHARDREC_BACKEND_MPI;
  o.device_type = SHARDREC_DEVICE_CUDA;
  EXPECT_EQ(shardrec_comm_create_mpi(&c, 0, &o), SHARDREC_EUNSUPPORTED);
  EXPECT_NE(std::strstr(shardrec_last_error(), "host memory only"), nullptr);
  shardrec_unique_id_t id{};
  o.device_type = SHARDREC_DEVICE_HOST;
  EXPECT_EQ(shardrec_comm_create(&c, &id, 1, 0, &o), SHARDREC_EINVAL);
  EXPECT_NE(std::strstr(shardrec_last_error(), "shardrec_comm_create_mpi"), nullptr);
}

}  // namespace
}  // namespace shardrec::testing

// Creates the world communicator before any test runs; no MPI plugin (a build without MPI) is
// a skip, not a pass.
extern "C" const char* shardrec_test_skip_reason() {
  using shardrec::testing::g_create_error;
  using shardrec::testing::g_create_rc;
  using shardrec::testing::g_world;
  shardrec_comm_options_t o = SHARDREC_COMM_OPTIONS_INIT;
  o.timeout_ms = 60000;  // a failing test must not hang for the default 5 minutes
  g_create_rc = shardrec_comm_create_mpi(&g_world, 0, &o);
  if (g_create_rc == SHARDREC_OK) return nullptr;
  g_create_error = shardrec_last_error();
  if (g_create_rc != SHARDREC_EUNSUPPORTED) return nullptr;  // a failure: the tests report it
  static std::string why = "no MPI backend: " + g_create_error;
  return why.c_str();
}
