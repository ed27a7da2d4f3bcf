// Machine calibration for the host cost model. Sizes are chosen so that each round takes a few
// tens of milliseconds: large enough to leave the caches (64 MiB table, 32 MiB copy), small
// enough for the whole calibration to stay well under a second.
#include "impl/planner/calibrate.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include "impl/core/check.h"
#include "impl/core/host_arena.h"
#include "impl/core/thread_pool.h"

namespace shardrec::planner {
namespace {

using Clock = std::chrono::steady_clock;

double MsSince(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

constexpr size_t kMaxRounds = 3;

// Runs `round` (returns a figure) up to kMaxRounds times, the rounds after the first only while
// the budget lasts; returns the median.
template <typename Fn>
double Rounds(Clock::time_point start, double budget_ms, Fn&& round) {
  std::vector<double> v{round()};
  while (v.size() < kMaxRounds && MsSince(start) < budget_ms) v.push_back(round());
  return Median(v);
}

constexpr int kRowFloats = 64;  // 256-byte rows: a dim-64 fp32 table
constexpr size_t kTableBytes = size_t{64} << 20;
// Rows a gather round reads per thread (~60 MB, a few ms), fewer when many threads share a
// round's kGatherRowsTotal (each thread's ids and sums stay in memory while it runs: ~5 MB at
// kGatherRows).
constexpr int64_t kGatherRows = 240000;
constexpr int64_t kGatherRowsTotal = 1 << 20;
constexpr int64_t kMinGatherRows = 20000;
constexpr int kPrefetchIds = 8;  // rows ahead, as the lookup kernel prefetches
constexpr int64_t kBag = 20;

// The portable bag sum (CalibrateOptions::bag_sum null), prefetching a few rows ahead; rows of
// at most kRowFloats.
void ScalarBagSum(const float* table, int64_t /*table_rows*/, int32_t row_floats,
                  const int64_t* offsets, int64_t num_bags, const int64_t* rows, float* out) {
  const int64_t n = offsets[num_bags];
  for (int64_t b = 0; b < num_bags; ++b) {
    float acc[kRowFloats] = {};
    for (int64_t i = offsets[b]; i < offsets[b + 1]; ++i) {
      if (i + kPrefetchIds < n) {
        const char* ahead =
            reinterpret_cast<const char*>(table + rows[i + kPrefetchIds] * row_floats);
        for (int line = 0; line < row_floats * 4; line += 64) __builtin_prefetch(ahead + line);
      }
      const float* row = table + rows[i] * row_floats;
      for (int d = 0; d < row_floats; ++d) acc[d] += row[d];
    }
    std::memcpy(out + b * row_floats, acc, sizeof(float) * static_cast<size_t>(row_floats));
  }
}

// One thread's share of a gather round: random rows summed per bag of kBag ids by `sum`, as the
// pooled lookup does. The ids are drawn at construction, before any clock starts.
struct GatherJob {
  GatherJob(int64_t table_rows, int64_t num_ids, uint64_t seed)
      : ids(static_cast<size_t>(num_ids)),
        offsets(static_cast<size_t>(num_ids / kBag + 1)),
        out(offsets.size() * kRowFloats) {
    uint64_t x = seed | 1;
    for (auto& id : ids) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      id = static_cast<int64_t>(x % static_cast<uint64_t>(table_rows));
    }
    for (size_t b = 0; b < offsets.size(); ++b) offsets[b] = static_cast<int64_t>(b) * kBag;
  }
  void Run(const float* table, int64_t table_rows, BagSumFn sum) {
    sum(table, table_rows, kRowFloats, offsets.data(), static_cast<int64_t>(offsets.size()) - 1,
        ids.data(), out.data());
  }
  std::vector<int64_t> ids, offsets;
  std::vector<float> out;
};

// Evicts the table from every cache level, so each round reads its rows from memory as lookups
// into tables far larger than the last-level cache do (otherwise what the round finds cached
// depends on what ran before it: the figure moved between ~8 and ~19 GiB/s on a 2-core VM with
// a 32 MiB L3 shared with other guests). Without clflush (not x86) the rounds read what they find.
void EvictFromCaches(const void* data, size_t bytes) {
#if defined(__x86_64__) || defined(__i386__)
  const char* p = static_cast<const char*>(data);
  for (size_t off = 0; off < bytes; off += 64) _mm_clflush(p + off);
  _mm_mfence();
#else
  (void)data;
  (void)bytes;
#endif
}

// A gather round on `threads` threads at once over the same table: aggregate bytes of rows read
// per ms. The threads are started and their ids drawn before the clock starts; they are released
// together and the round ends when the last one finishes.
double ParallelGatherRound(const float* table, BagSumFn sum, int32_t threads, uint64_t* seed) {
  const int64_t rows = static_cast<int64_t>(kTableBytes / (kRowFloats * sizeof(float)));
  const int64_t per_thread =
      std::clamp(kGatherRowsTotal / threads, kMinGatherRows, kGatherRows) / kBag * kBag;
  std::vector<GatherJob> jobs;
  jobs.reserve(static_cast<size_t>(threads));
  for (int32_t i = 0; i < threads; ++i)
    jobs.emplace_back(rows, per_thread, *seed += 0x9e3779b97f4a7c15ull);
  EvictFromCaches(table, kTableBytes);
  std::mutex mu;
  std::condition_variable cv;
  bool go = false;
  std::vector<std::thread> pool;
  for (int32_t i = 1; i < threads; ++i) {
    pool.emplace_back([&, i] {
      {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] { return go; });
      }
      jobs[static_cast<size_t>(i)].Run(table, rows, sum);
    });
  }
  const auto t0 = Clock::now();
  {
    std::lock_guard<std::mutex> lock(mu);
    go = true;
  }
  cv.notify_all();
  jobs[0].Run(table, rows, sum);
  for (auto& t : pool) t.join();
  const double ms = MsSince(t0);
  volatile float keep = jobs[0].out[static_cast<size_t>(*seed % jobs[0].out.size())];
  (void)keep;
  return static_cast<double>(threads) * per_thread * kRowFloats * sizeof(float) /
         std::max(ms, 1e-6);
}

double StreamRound(const std::vector<char>& src, std::vector<char>* dst) {
  const auto t0 = Clock::now();
  std::memcpy(dst->data(), src.data(), src.size());
  const double ms = MsSince(t0);
  return static_cast<double>(src.size()) / std::max(ms, 1e-6);
}

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

Status SysError(const char* call) {
  return Status::Io("calibrate: loopback ", call, " failed: ", std::strerror(errno));
}

// A connected pair of TCP sockets over 127.0.0.1 (an ephemeral port, closed again at once).
Status LoopbackPair(Fd* a, Fd* b) {
  Fd listener;
  listener.fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (listener.fd < 0) return SysError("socket");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  if (::bind(listener.fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0)
    return SysError("bind");
  if (::listen(listener.fd, 1) != 0) return SysError("listen");
  if (::getsockname(listener.fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0)
    return SysError("getsockname");
  a->fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (a->fd < 0) return SysError("socket");
  if (::connect(a->fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0)
    return SysError("connect");
  b->fd = ::accept(listener.fd, nullptr, nullptr);
  if (b->fd < 0) return SysError("accept");
  const int one = 1;
  ::setsockopt(a->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  ::setsockopt(b->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return Status::Ok();
}

bool SendAll(int fd, const char* p, size_t n) {
  while (n > 0) {
    const ssize_t k = ::send(fd, p, n, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    p += k;
    n -= static_cast<size_t>(k);
  }
  return true;
}

bool RecvAll(int fd, char* p, size_t n) {
  while (n > 0) {
    const ssize_t k = ::recv(fd, p, n, 0);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    p += k;
    n -= static_cast<size_t>(k);
  }
  return true;
}

constexpr size_t kLoopbackBytes = size_t{16} << 20;
constexpr size_t kChunk = size_t{256} << 10;
constexpr int kPings = 100;

// Bytes per ms of kLoopbackBytes from a to b; the receiver's clock, ending at the last byte.
Status LoopbackBandwidth(int a, int b, double* out) {
  std::vector<char> send_buf(kChunk, 1), recv_buf(kChunk);
  bool sent = true;
  const auto t0 = Clock::now();
  std::thread sender([&] {
    for (size_t off = 0; off < kLoopbackBytes && sent; off += kChunk)
      sent = SendAll(a, send_buf.data(), kChunk);
  });
  bool received = true;
  for (size_t off = 0; off < kLoopbackBytes && received; off += kChunk)
    received = RecvAll(b, recv_buf.data(), kChunk);
  const double ms = MsSince(t0);
  sender.join();
  if (!sent || !received) return SysError(sent ? "recv" : "send");
  *out = static_cast<double>(kLoopbackBytes) / std::max(ms, 1e-6);
  return Status::Ok();
}

// Half the mean round trip of one byte, in ms.
Status LoopbackLatency(int a, int b, double* out) {
  bool echoed = true;
  std::thread echo([&] {
    char c;
    for (int i = 0; i < kPings && echoed; ++i) echoed = RecvAll(b, &c, 1) && SendAll(b, &c, 1);
  });
  bool ok = true;
  char c = 'x';
  const auto t0 = Clock::now();
  for (int i = 0; i < kPings && ok; ++i) ok = SendAll(a, &c, 1) && RecvAll(a, &c, 1);
  const double ms = MsSince(t0);
  if (!ok) ::shutdown(b, SHUT_RDWR);  // unblocks the echo thread
  echo.join();
  if (!ok || !echoed) return SysError("ping");
  *out = ms / kPings / 2.0;
  return Status::Ok();
}

constexpr int kBarriers = 10;
constexpr double kWorkMs = 0.2;  // busy work of each thread between two barriers

// The cost of one synchronisation point of `n` threads (mutex and condition variable, as an
// in-process group's collective waits) when every thread has work in between, as ranks do:
// the mean time of a round beyond the work itself. Threads that outnumber the free cores wait
// for a descheduled peer here, as they do at every collective of a step.
double HandoffLatency(int32_t n) {
  std::mutex mu;
  std::condition_variable cv;
  int64_t arrived = 0;  // barrier b is complete when arrived reaches (b + 1) * n
  auto round = [&](int64_t b) {
    const auto w0 = Clock::now();
    while (MsSince(w0) < kWorkMs) {
    }
    std::unique_lock<std::mutex> lock(mu);
    if (++arrived == (b + 1) * n) cv.notify_all();
    cv.wait(lock, [&] { return arrived >= (b + 1) * n; });
  };
  std::vector<std::thread> peers;
  const auto t0 = Clock::now();
  for (int32_t i = 1; i < n; ++i)
    peers.emplace_back([&] {
      for (int b = 0; b < kBarriers; ++b) round(b);
    });
  for (int b = 0; b < kBarriers; ++b) round(b);
  const double ms = MsSince(t0);
  for (auto& t : peers) t.join();
  return std::max(ms / kBarriers - kWorkMs, 1e-6);
}

}  // namespace

Status Calibrate(const CalibrateOptions& options, Calibration* out) {
  const auto start = Clock::now();
  // Each stage gets its share of the budget, so a slow stage cannot starve the others of a
  // second round entirely.
  const double share = std::max(options.budget_ms, 0.0) / (options.shm_probe ? 5.0 : 4.0);
  Calibration c;
  const int32_t ranks = std::max(options.ranks_per_node, 1);
  c.oversubscription = std::max(1.0, static_cast<double>(ranks) / UsableCpus());
  {
    // On huge pages like the collection's tables (HostArena), so the TLB behaves as theirs.
    HostArena arena;
    SR_RETURN_IF_ERROR(arena.Allocate(kTableBytes, /*huge_pages=*/true));
    float* table = arena.as<float>();
    for (size_t i = 0; i < kTableBytes / sizeof(float); ++i)
      table[i] = static_cast<float>(i & 1023) * 1e-3f;
    uint64_t seed = 0x9e3779b97f4a7c15ull;
    const BagSumFn sum = options.bag_sum != nullptr ? options.bag_sum : &ScalarBagSum;
    // More threads than CPUs would not read faster, only cost memory and thread starts: the
    // CPUs gather at once and every rank is credited its share of what they read.
    const int32_t threads = static_cast<int32_t>(
        std::min<int64_t>(int64_t{ranks} * std::max(options.threads_per_rank, 1), UsableCpus()));
    const auto t0 = Clock::now();
    // A first round, not counted, faults in the threads' stacks and the page tables: the first
    // calibration in a process read ~30 % below the next ones without it.
    ParallelGatherRound(table, sum, threads, &seed);
    c.gather_bw =
        Rounds(t0, share, [&] { return ParallelGatherRound(table, sum, threads, &seed) / ranks; });
  }
  {
    std::vector<char> src(kTableBytes / 2, 3), dst(kTableBytes / 2, 0);
    const auto t0 = Clock::now();
    c.stream_bw = Rounds(t0, share, [&] { return StreamRound(src, &dst); });
  }
  {
    Fd a, b;
    SR_RETURN_IF_ERROR(LoopbackPair(&a, &b));
    const auto t0 = Clock::now();
    Status status;
    c.loopback_bw = Rounds(t0, share, [&] {
      double bw = 0;
      if (status.ok()) status = LoopbackBandwidth(a.fd, b.fd, &bw);
      return bw;
    });
    SR_RETURN_IF_ERROR(status);
    const auto t1 = Clock::now();
    c.loopback_latency = Rounds(t1, share / 2, [&] {
      double ms = 0;
      if (status.ok()) status = LoopbackLatency(a.fd, b.fd, &ms);
      return ms;
    });
    SR_RETURN_IF_ERROR(status);
  }
  if (options.shm_probe != nullptr) {
    SR_RETURN_IF_ERROR(options.shm_probe(share, &c.shm));
    if (!c.shm.available) c.shm = SharedMemoryFigures{};
  }
  {
    const auto t0 = Clock::now();
    // Four ranks per CPU show what oversubscription costs a barrier; a thousand would only take
    // seconds to show it.
    const int32_t peers = std::max(2, std::min(ranks, 4 * UsableCpus()));
    c.handoff_latency = Rounds(t0, share / 2, [&] { return HandoffLatency(peers); });
  }
  c.elapsed_ms = MsSince(start);
  *out = c;
  return Status::Ok();
}

}  // namespace shardrec::planner
