// Suite cpu_emb (performance-anchors.md section 7.3): CPU pooled lookup forward (c1, c2, c4) and
// backward fused with row-wise Adagrad (c3), with a STREAM triad measured in the same run; every
// figure is reported as GB/s and as a ratio to the triad of the same thread count.
#include <benchmark/benchmark.h>
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <unordered_set>
#include <vector>

#include "impl/core/prefetch.h"
#include "impl/core/thread_pool.h"
#include "impl/embedding/kernels/kernels.h"
#include "impl/optim/optimizer.h"

namespace shardrec::embedding::kernels {
namespace {

using Clock = std::chrono::steady_clock;

ThreadPool& Pool() {
  static ThreadPool pool(0);
  return pool;
}

// --- STREAM triad: a = b + s * c over three arrays far larger than the last-level cache. -------
constexpr int64_t kTriadN = int64_t{1} << 25;  // 128 MiB per array
std::map<int, double> g_triad_gbs;             // threads -> best GB/s

double TriadOnce(int threads, std::vector<float>& a, const std::vector<float>& b,
                 const std::vector<float>& c) {
  auto body = [&](int64_t lo, int64_t hi) {
    float* __restrict pa = a.data();
    const float* __restrict pb = b.data();
    const float* __restrict pc = c.data();
    for (int64_t i = lo; i < hi; ++i) pa[i] = pb[i] + 3.0f * pc[i];
  };
  auto t0 = Clock::now();
  if (threads == 1)
    body(0, kTriadN);
  else
    Pool().ParallelFor(0, kTriadN, kTriadN / (4 * threads), body);
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

void MeasureTriad() {
  std::vector<float> a(kTriadN, 0.0f), b(kTriadN, 1.0f), c(kTriadN, 2.0f);
  for (int threads : {1, Pool().num_threads()}) {
    double best = 1e30;
    for (int r = 0; r < 10; ++r) best = std::min(best, TriadOnce(threads, a, b, c));
    g_triad_gbs[threads] = 3.0 * kTriadN * sizeof(float) / best / 1e9;
  }
}

// The random-row gather roof: the best rate at which this machine reads uniformly random
// 512-byte rows (D = 128 fp32) from the 4 GB table arena (huge pages) with all threads: each row
// read with the widest vectors the host has into register accumulators (the least work a gather
// can do and still read every byte), rows prefetched ahead, the best over instruction sets and
// prefetch distances. Lookups are gathers, so this (not the sequential triad) is their physical
// limit; forward figures are also reported against it (`x_gather`), like BW_gather on GPU.
std::map<int, double> g_gather_gbs;
char* Arena();
size_t ArenaBytes();

constexpr int64_t kRoofRowFloats = 128;

typedef float RoofV4 __attribute__((vector_size(16), aligned(4)));
typedef float RoofV8 __attribute__((vector_size(32), aligned(4)));
typedef float RoofV16 __attribute__((vector_size(64), aligned(4)));

// Rows ids[lo, hi) summed a vector V at a time into 128 / |V| register accumulators.
template <class V>
[[gnu::always_inline]] inline float GatherRows(const float* base, const int64_t* ids, int64_t lo,
                                               int64_t hi, int64_t distance) {
  constexpr int kW = static_cast<int>(sizeof(V) / sizeof(float));
  constexpr int kN = kRoofRowFloats / kW;
  V acc[kN] = {};
  for (int64_t i = lo; i < hi; ++i) {
    if (i + distance < hi) core::PrefetchLines(base + ids[i + distance] * kRoofRowFloats, 512);
    const V* r = reinterpret_cast<const V*>(base + ids[i] * kRoofRowFloats);
#pragma GCC unroll 32
    for (int k = 0; k < kN; ++k) acc[k] += r[k];
  }
  V t = acc[0];
  for (int k = 1; k < kN; ++k) t += acc[k];
  float sum = 0.0f;
  for (int e = 0; e < kW; ++e) sum += t[e];
  return sum;
}

__attribute__((target("avx512f"))) float GatherRowsAvx512(const float* base, const int64_t* ids,
                                                          int64_t lo, int64_t hi, int64_t d) {
  return GatherRows<RoofV16>(base, ids, lo, hi, d);
}
__attribute__((target("avx2"))) float GatherRowsAvx2(const float* base, const int64_t* ids,
                                                     int64_t lo, int64_t hi, int64_t d) {
  return GatherRows<RoofV8>(base, ids, lo, hi, d);
}
float GatherRowsSse(const float* base, const int64_t* ids, int64_t lo, int64_t hi, int64_t d) {
  return GatherRows<RoofV4>(base, ids, lo, hi, d);
}

// The roof's best variant, kept to time it again beside each forward (RoofSeconds).
using GatherFn = float (*)(const float*, const int64_t*, int64_t, int64_t, int64_t);
GatherFn g_roof_fn = nullptr;
int64_t g_roof_distance = 0;
std::vector<int64_t> g_roof_ids;
int64_t g_roof_next = 0;

// Seconds the roof's best variant takes to gather `reads` random rows with all threads.
double RoofSeconds(int64_t reads) {
  const int threads = Pool().num_threads();
  const int64_t n = static_cast<int64_t>(g_roof_ids.size());
  if (g_roof_next + reads > n) g_roof_next = 0;  // a different stretch of ids each time
  const int64_t* ids = g_roof_ids.data() + g_roof_next;
  g_roof_next += reads;
  std::vector<float> sink(static_cast<size_t>(threads) * 16, 0.0f);
  std::atomic<int> slot{0};
  const auto t0 = Clock::now();
  Pool().ParallelFor(
      0, reads, std::max<int64_t>(1, reads / (4 * threads)), [&](int64_t lo, int64_t hi) {
        const float s =
            g_roof_fn(reinterpret_cast<const float*>(Arena()), ids, lo, hi, g_roof_distance);
        sink[static_cast<size_t>(slot.fetch_add(1) % threads) * 16] += s;
      });
  const double t = std::chrono::duration<double>(Clock::now() - t0).count();
  benchmark::DoNotOptimize(sink.data());
  return t;
}

void MeasureGather() {
  const int64_t rows = static_cast<int64_t>(ArenaBytes() / (kRoofRowFloats * sizeof(float)));
  constexpr int64_t kReads = 1 << 19;
  std::mt19937_64 rng(11);
  g_roof_ids.resize(kReads * 4);
  for (auto& id : g_roof_ids) id = static_cast<int64_t>(rng() % static_cast<uint64_t>(rows));
  const std::vector<int64_t> ids(g_roof_ids.begin(), g_roof_ids.begin() + kReads);
  const float* base = reinterpret_cast<const float*>(Arena());
  const int threads = Pool().num_threads();
  std::vector<GatherFn> fns = {&GatherRowsSse};
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2")) fns.push_back(&GatherRowsAvx2);
  if (__builtin_cpu_supports("avx512f")) fns.push_back(&GatherRowsAvx512);
  std::vector<float> sink(static_cast<size_t>(threads) * 16, 0.0f);
  double best = 1e30;
  for (GatherFn fn : fns) {
    for (int64_t distance : {4, 8, 12, 16, 24, 32}) {
      for (int rep = 0; rep < 3; ++rep) {
        std::atomic<int> slot{0};
        auto t0 = Clock::now();
        Pool().ParallelFor(0, kReads, kReads / (4 * threads), [&](int64_t lo, int64_t hi) {
          const float s = fn(base, ids.data(), lo, hi, distance);
          sink[static_cast<size_t>(slot.fetch_add(1) % threads) * 16] += s;
        });
        const double t = std::chrono::duration<double>(Clock::now() - t0).count();
        if (t < best) {
          best = t;
          g_roof_fn = fn;
          g_roof_distance = distance;
        }
      }
    }
  }
  benchmark::DoNotOptimize(sink.data());
  g_gather_gbs[threads] =
      static_cast<double>(kReads) * (kRoofRowFloats * sizeof(float) + 8) / best / 1e9;
}

void BM_GatherRoof(benchmark::State& state) {
  for (auto _ : state) state.SetIterationTime(1.0);
  state.counters["GB/s_best"] = g_gather_gbs[Pool().num_threads()];
  state.counters["threads"] = Pool().num_threads();
  state.counters["x_triad"] =
      g_gather_gbs[Pool().num_threads()] / g_triad_gbs[Pool().num_threads()];
}

// The floor under backward / forward on this machine: the same random 512-byte rows (c4's 32
// tables of 100k x 128 fp32, 10,240 distinct rows per table, in row order as the backward visits
// them) read (what the forward's gather costs), read and written back in place (what any update
// in place costs), and also with a float of state per row in an array of its own read and
// written (row-wise Adagrad's layout), in turn each iteration with all threads and prefetch 16
// rows ahead; no arithmetic beyond one multiply-add per element. The `*_over_read` ratios are the
// medians of the per-iteration ratios.
void BM_RowUpdateRoof(benchmark::State& state) {
  constexpr int64_t kT = 32, kE = 100000, kPerTable = 10240, kD = 128, kAhead = 16;
  std::mt19937_64 rng(5);
  std::vector<int64_t> rows;
  for (int64_t t = 0; t < kT; ++t) {
    std::unordered_set<int64_t> seen;
    while (static_cast<int64_t>(seen.size()) < kPerTable)
      seen.insert(static_cast<int64_t>(rng() % kE));
    std::vector<int64_t> r(seen.begin(), seen.end());
    std::sort(r.begin(), r.end());
    for (int64_t x : r) rows.push_back(t * kE + x);
  }
  float* base = reinterpret_cast<float*>(Arena());
  std::vector<float> row_state(static_cast<size_t>(kT * kE), 0.0f);
  const int64_t n = static_cast<int64_t>(rows.size());
  const int threads = Pool().num_threads();
  std::vector<float> sink(static_cast<size_t>(threads) * 64 * 4, 0.0f);
  auto pass = [&](int mode) {
    std::atomic<int> slot{0};
    auto t0 = Clock::now();
    Pool().ParallelFor(0, n, n / (4 * threads), [&](int64_t lo, int64_t hi) {
      float acc[kD] = {};
      for (int64_t i = lo; i < hi; ++i) {
        if (i + kAhead < hi) {
          const char* p = reinterpret_cast<const char*>(base + rows[i + kAhead] * kD);
          for (int line = 0; line < 8; ++line) {
            if (mode == 0)
              __builtin_prefetch(p + 64 * line, 0, 3);
            else
              __builtin_prefetch(p + 64 * line, 1, 3);
          }
          if (mode == 2) __builtin_prefetch(row_state.data() + rows[i + kAhead], 1, 3);
        }
        float* r = base + rows[i] * kD;
        if (mode == 0) {
          for (int64_t c = 0; c < kD; ++c) acc[c] += r[c];
        } else {
          for (int64_t c = 0; c < kD; ++c) r[c] = r[c] * 0.9999f + 1e-7f;
          if (mode == 2) row_state[rows[i]] += 1.0f;
        }
      }
      sink[static_cast<size_t>(slot.fetch_add(1) % (threads * 4)) * 64] += acc[0] + acc[kD - 1];
    });
    return std::chrono::duration<double>(Clock::now() - t0).count();
  };
  std::vector<double> rd, upd, upd_state, r_upd, r_state;
  for (auto _ : state) {
    const double a = pass(0), b = pass(1), c = pass(2);
    rd.push_back(a);
    upd.push_back(b);
    upd_state.push_back(c);
    r_upd.push_back(b / a);
    r_state.push_back(c / a);
    state.SetIterationTime(a + b + c);
  }
  benchmark::DoNotOptimize(sink.data());
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  state.counters["read_ms"] = median(rd) * 1e3;
  state.counters["update_ms"] = median(upd) * 1e3;
  state.counters["update_state_ms"] = median(upd_state) * 1e3;
  state.counters["update_over_read"] = median(r_upd);
  state.counters["update_state_over_read"] = median(r_state);
  state.counters["threads"] = threads;
}

void BM_StreamTriad(benchmark::State& state) {
  int threads = state.range(0) == 0 ? Pool().num_threads() : 1;
  std::vector<float> a(kTriadN, 0.0f), b(kTriadN, 1.0f), c(kTriadN, 2.0f);
  for (auto _ : state) state.SetIterationTime(TriadOnce(threads, a, b, c));
  state.counters["threads"] = threads;
  state.counters["GB/s_best"] = g_triad_gbs[threads];
  state.SetBytesProcessed(state.iterations() * 3 * kTriadN * int64_t{sizeof(float)});
}

// --- Table memory: one arena sized for the largest config (c1 D=256 fp32 and c2 both need
// 4.096e9 bytes), filled once; the contents only need to be finite. --------------------------
constexpr size_t kArenaBytes = size_t{4096000000};
size_t ArenaBytes() { return kArenaBytes; }

char* Arena() {
  static char* arena = [] {
    void* p = nullptr;
    if (posix_memalign(&p, size_t{2} << 20, kArenaBytes) != 0) std::abort();
    if (std::getenv("SHARDREC_BENCH_NO_HUGEPAGES") == nullptr)
      madvise(p, kArenaBytes, MADV_HUGEPAGE);
    char* c = static_cast<char*>(p);
    const int64_t chunk = int64_t{64} << 20;
    Pool().ParallelFor(
        0, static_cast<int64_t>(kArenaBytes) / chunk + 1, 1, [&](int64_t b, int64_t e) {
          for (int64_t k = b; k < e; ++k) {
            int64_t lo = k * chunk,
                    hi = std::min<int64_t>(static_cast<int64_t>(kArenaBytes), lo + chunk);
            // 0x3c003c00 is 1.0 in fp16 pairs and 0.0078 as fp32: finite either way.
            for (int64_t i = lo; i + 4 <= hi; i += 4) std::memcpy(c + i, "\x00\x3c\x00\x3c", 4);
          }
        });
    return c;
  }();
  return arena;
}

// --- Input generation. -------------------------------------------------------------------------
struct Batch {
  std::vector<int64_t> offsets, rows;
  int64_t unique = 0;  // distinct rows in the batch (backward bytes)
  // A run whose output (or gradient) rows start at element io_offset of the io buffer.
  BagRun View(int64_t io_offset = 0) const {
    return BagRun{offsets.data(), static_cast<int64_t>(offsets.size()) - 1, rows.data(), nullptr,
                  io_offset};
  }
};

// FBGEMM-style: uniform, or Zipf(alpha) over a random permutation of the rows; ids distinct
// within a bag (oversample up to 3L draws).
struct IdSampler {
  int64_t rows;
  double alpha;
  std::vector<double> cdf;
  std::vector<int64_t> perm;
  IdSampler(int64_t e, double a, std::mt19937_64& rng) : rows(e), alpha(a) {
    if (alpha <= 0) return;
    cdf.resize(e);
    double s = 0;
    for (int64_t k = 0; k < e; ++k) cdf[k] = (s += std::pow(double(k + 1), -alpha));
    for (double& v : cdf) v /= s;
    perm.resize(e);
    std::iota(perm.begin(), perm.end(), int64_t{0});
    std::shuffle(perm.begin(), perm.end(), rng);
  }
  int64_t operator()(std::mt19937_64& rng) const {
    if (alpha <= 0) return static_cast<int64_t>(rng() % static_cast<uint64_t>(rows));
    double u = std::uniform_real_distribution<double>(0, 1)(rng);
    int64_t k = std::lower_bound(cdf.begin(), cdf.end(), u) - cdf.begin();
    return perm[std::min(k, rows - 1)];
  }
};

Batch MakeBatch(const IdSampler& ids, int64_t bags, int min_len, int max_len,
                std::mt19937_64& rng) {
  Batch b;
  b.offsets.push_back(0);
  std::unordered_set<int64_t> seen, all;
  for (int64_t i = 0; i < bags; ++i) {
    int len = min_len + static_cast<int>(rng() % static_cast<uint64_t>(max_len - min_len + 1));
    seen.clear();
    for (int draw = 0; draw < 3 * len && static_cast<int>(seen.size()) < len; ++draw) {
      int64_t r = ids(rng);
      if (seen.insert(r).second) b.rows.push_back(r);
    }
    b.offsets.push_back(static_cast<int64_t>(b.rows.size()));
  }
  all.insert(b.rows.begin(), b.rows.end());
  b.unique = static_cast<int64_t>(all.size());
  return b;
}

// --- Timing: manual per-iteration times, reported as median and p90. ---------------------------
struct Timer {
  std::vector<double> times;
  template <typename F>
  void Run(benchmark::State& state, F&& body) {
    for (auto _ : state) {
      auto t0 = Clock::now();
      body();
      double t = std::chrono::duration<double>(Clock::now() - t0).count();
      times.push_back(t);
      state.SetIterationTime(t);
    }
  }
  double Median() {
    std::sort(times.begin(), times.end());
    return times[times.size() / 2];
  }
  double P90() {
    std::sort(times.begin(), times.end());
    return times[times.size() * 9 / 10];
  }
};

void Report(benchmark::State& state, Timer& timer, double bytes, int threads) {
  double med = timer.Median();
  double gbs = bytes / med / 1e9;
  state.counters["median_ms"] = med * 1e3;
  state.counters["p90_ms"] = timer.P90() * 1e3;
  state.counters["GB/s"] = gbs;
  state.counters["x_triad"] = gbs / g_triad_gbs[threads];
  if (g_gather_gbs.count(threads)) state.counters["x_gather"] = gbs / g_gather_gbs[threads];
  state.counters["threads"] = threads;
}

// --- c1: FBGEMM CPU default, one thread. Args: D, fp16, prefetch, flush. -----------------------
void BM_C1(benchmark::State& state) {
  const int64_t E = 4000000, B = 10;
  const int32_t D = static_cast<int32_t>(state.range(0));
  const bool fp16 = state.range(1) != 0, prefetch = state.range(2) != 0,
             flush = state.range(3) != 0;
  std::mt19937_64 rng(1);
  IdSampler ids(E, 0.0, rng);
  Batch batch = MakeBatch(ids, B, 1, 201, rng);
  WeightsView w{Arena(), fp16 ? DType::kFloat16 : DType::kFloat32, E, D, D};
  std::vector<float> out(B * D);
  std::vector<char> flush_buf(flush ? (64 << 20) : 0);
  LookupOptions opts;
  opts.prefetch_distance = prefetch ? 16 : 0;
  Timer timer;
  for (auto _ : state) {
    if (flush) {
      for (size_t i = 0; i < flush_buf.size(); i += 64) flush_buf[i]++;
      benchmark::ClobberMemory();
    }
    auto t0 = Clock::now();
    LookupJob job{w, batch.View(), out.data(), D};
    (void)Lookup(ExecContext(), std::span<const LookupJob>(&job, 1), opts);
    benchmark::DoNotOptimize(out.data());
    double t = std::chrono::duration<double>(Clock::now() - t0).count();
    timer.times.push_back(t);
    state.SetIterationTime(t);
  }
  const double n = static_cast<double>(batch.rows.size());
  Report(state, timer, n * D * (fp16 ? 2 : 4) + n * 8, 1);  // FBGEMM convention: rows + indices
}

// --- c2/c4 forward and c3 backward: T tables of E x D fp32, B bags of exactly L ids. ----------
struct MultiTable {
  int64_t T, E, B;
  int32_t D;
  int64_t S;                                // row stride in floats (>= D)
  std::vector<std::vector<Batch>> batches;  // [rotation][table]
  std::vector<float> grad_out;              // [B, T * D]
  std::vector<std::vector<float>> momentum;
  MultiTable(int64_t t, int64_t e, int32_t d, int64_t b, int l, double alpha, int64_t stride = 0)
      : T(t), E(e), B(b), D(d), S(stride > 0 ? stride : d) {
    std::mt19937_64 rng(7);
    IdSampler ids(E, alpha, rng);
    batches.resize(4);
    for (auto& rot : batches)
      for (int64_t k = 0; k < T; ++k) rot.push_back(MakeBatch(ids, B, l, l, rng));
    grad_out.assign(B * T * D, 1e-3f);
  }
  WeightsView Table(int64_t k) const {
    return WeightsView{reinterpret_cast<const float*>(Arena()) + k * E * S, DType::kFloat32, E, D,
                       S};
  }
  double ForwardBytes(int rot) const {
    double s = 0;
    for (const Batch& b : batches[rot])
      s += double(b.rows.size()) * (D * 4 + 8) + double(B) * D * 4 + (B + 1) * 8.0;
    return s;
  }
  // Physical model: grad_out read + unique rows x (weights read+write, momentum read+write) + ids.
  double BackwardBytes(int rot) const {
    double s = 0;
    for (const Batch& b : batches[rot])
      s += double(B) * D * 4 + double(b.unique) * (2.0 * D * 4 + 8) + b.rows.size() * 8.0;
    return s;
  }
};

std::map<std::string, double> g_fwd_median;  // config name -> forward median seconds

void RunForward(benchmark::State& state, const std::string& name, int64_t T, int64_t E, int64_t B,
                double alpha, int32_t D = 128, int64_t stride = 0) {
  MultiTable mt(T, E, D, B, 20, alpha, stride);
  std::vector<float> out(B * T * mt.D);
  int it = 0;
  Timer timer;
  std::vector<LookupJob> jobs;
  std::vector<double> vs_roof;
  const ExecContext ctx = ExecContext::Host(&Pool());
  for (auto _ : state) {
    const auto& rot = mt.batches[it++ % 4];
    int64_t rows = 0;
    for (const Batch& b : rot) rows += static_cast<int64_t>(b.rows.size());
    // The roof gathers as many rows just before, so the ratio of the two row rates compares
    // times taken moments apart on a shared machine (D = 128 fp32 rows only).
    const double roof = D == kRoofRowFloats && alpha <= 0 ? RoofSeconds(rows) : 0.0;
    const auto t0 = Clock::now();
    // All tables in one call, each writing its columns of the [B, T * D] output.
    jobs.clear();
    for (int64_t k = 0; k < T; ++k)
      jobs.push_back(LookupJob{mt.Table(k), rot[k].View(k * mt.D), out.data(), T * mt.D});
    (void)Lookup(ctx, jobs);
    benchmark::DoNotOptimize(out.data());
    const double t = std::chrono::duration<double>(Clock::now() - t0).count();
    timer.times.push_back(t);
    state.SetIterationTime(t);
    if (roof > 0) vs_roof.push_back(roof / t);
  }
  double bytes = 0;
  for (int r = 0; r < 4; ++r) bytes += mt.ForwardBytes(r) / 4;
  Report(state, timer, bytes, Pool().num_threads());
  if (!vs_roof.empty()) {
    // Rows per second of the lookup over those of the roof gathering as many rows, per
    // iteration; the median (performance-anchors.md: lookup >= 0.85 of the gather roof).
    std::sort(vs_roof.begin(), vs_roof.end());
    state.counters["rows_x_roof"] = vs_roof[vs_roof.size() / 2];
  }
  g_fwd_median[name] = timer.Median();
}

// in_row: the row-wise Adagrad state of each row lives in its weight row, in column D (the
// row stride must leave room for it), instead of a dense array of its own.
void RunBackward(benchmark::State& state, const std::string& name, int64_t T, int64_t E, int64_t B,
                 double alpha, bool fused, int32_t D = 128, int64_t stride = 0,
                 bool in_row = false) {
  MultiTable mt(T, E, D, B, 20, alpha, stride);
  optim::OptimizerConfig cfg;
  cfg.type = optim::OptimizerType::kRowWiseAdagrad;
  std::vector<std::vector<float>> mom(T, std::vector<float>(in_row ? 0 : E, 0.0f));
  if (in_row) {
    if (mt.S <= D) std::abort();
    for (int64_t k = 0; k < T; ++k) {
      float* w = const_cast<float*>(static_cast<const float*>(mt.Table(k).data));
      for (int64_t r = 0; r < E; ++r) w[r * mt.S + D] = 0.0f;
    }
  }
  std::vector<uint8_t> ws;
  const ExecContext ctx = ExecContext::Host(&Pool());
  std::vector<int64_t> uniq;
  std::vector<float> grads, stats;
  int it = 0;
  int64_t step = 0;
  Timer timer;
  timer.Run(state, [&] {
    const auto& rot = mt.batches[it++ % 4];
    ++step;
    for (int64_t k = 0; k < T; ++k) {
      optim::ShardParams sp;
      sp.weights = const_cast<void*>(mt.Table(k).data);
      sp.rows = E;
      sp.cols = mt.D;
      sp.stride = mt.S;
      if (in_row) {
        sp.states = {static_cast<float*>(sp.weights) + mt.D};
        sp.row_state_stride = mt.S;
      } else {
        sp.states = {mom[k].data()};
      }
      const BagRun run = rot[k].View(k * mt.D);
      const std::span<const BagRun> runs(&run, 1);
      const size_t need = BackwardWorkspaceBytes(ctx, run.num_ids(), mt.D, 1);
      if (ws.size() < need) ws.resize(need);
      int64_t num_unique = 0;
      (void)GroupRows(ctx, runs, ws.data(), ws.size(), &num_unique);
      const float* g = mt.grad_out.data();
      if (fused) {
        (void)FusedBackward(ctx, runs, g, T * mt.D, 1.0f, cfg, step, mt.D, sp, ws.data());
      } else {
        // The column-shard path: partial statistics with the aggregation, then the update once
        // the statistics are summed (here the shard holds whole rows, so they are the full ones).
        uniq.resize(static_cast<size_t>(num_unique));
        grads.resize(static_cast<size_t>(num_unique) * mt.D);
        stats.resize(uniq.size());
        (void)AggregateWithRowStats(ctx, runs, g, T * mt.D, 1.0f, cfg, step, sp, ws.data(),
                                    uniq.data(), grads.data(), stats.data());
        (void)ApplyRows(ctx, cfg, step, mt.D, sp, uniq, grads.data(), stats.data());
      }
    }
  });
  double bytes = 0;
  for (int r = 0; r < 4; ++r) bytes += mt.BackwardBytes(r) / 4;
  Report(state, timer, bytes, Pool().num_threads());
  auto f = g_fwd_median.find(name);
  if (f != g_fwd_median.end()) state.counters["bwd_over_fwd"] = timer.Median() / f->second;
}

void BM_C2_Forward(benchmark::State& s) {
  RunForward(s, s.range(0) ? "c2_zipf" : "c2_uniform", 8, 1000000, 2048, s.range(0) ? 1.15 : 0.0);
}
void BM_C3_BackwardRowWiseAdagrad(benchmark::State& s) {
  RunBackward(s, s.range(0) ? "c2_zipf" : "c2_uniform", 8, 1000000, 2048, s.range(0) ? 1.15 : 0.0,
              s.range(1) != 0);
}
void BM_C4_Forward(benchmark::State& s) { RunForward(s, "c4", 32, 100000, 512, 0.0); }
void BM_C4_BackwardRowWiseAdagrad(benchmark::State& s) {
  RunBackward(s, "c4", 32, 100000, 512, 0.0, true);
}
// c4 with row-wise Adagrad's state kept in the weight row's cache lines instead of a dense
// array of its own (ShardParams::row_state_stride), to price that layout: (D, stride) =
// (128, 144) puts the state on a ninth line next to the row's eight, (120, 128) in the row's
// last line (padding a layout would need). Every iteration runs the forward, the backward with
// the dense state array and the backward with the in-row state, in turn, on the same tables (the
// in-row state sits in column D, which the dense case leaves alone), so the ratios compare
// times taken moments apart on a shared machine.
void BM_C4_StateLayout(benchmark::State& state) {
  const int32_t D = static_cast<int32_t>(state.range(0));
  const int64_t T = 32, E = 100000, B = 512;
  MultiTable mt(T, E, D, B, 20, 0.0, state.range(1));
  if (mt.S <= D) std::abort();
  for (int64_t k = 0; k < T; ++k) {
    float* w = const_cast<float*>(static_cast<const float*>(mt.Table(k).data));
    for (int64_t r = 0; r < E; ++r) w[r * mt.S + D] = 0.0f;
  }
  optim::OptimizerConfig cfg;
  cfg.type = optim::OptimizerType::kRowWiseAdagrad;
  std::vector<std::vector<float>> mom(T, std::vector<float>(E, 0.0f));
  const ExecContext ctx = ExecContext::Host(&Pool());
  std::vector<uint8_t> ws;
  std::vector<float> out(B * T * D);
  std::vector<LookupJob> jobs;
  std::vector<double> fwd, sep, in_row, r_sep, r_in, r_gain;
  int it = 0;
  int64_t step = 0;
  auto backward = [&](const std::vector<Batch>& rot, bool row_state_in_row) {
    for (int64_t k = 0; k < T; ++k) {
      optim::ShardParams sp;
      sp.weights = const_cast<void*>(mt.Table(k).data);
      sp.rows = E;
      sp.cols = D;
      sp.stride = mt.S;
      if (row_state_in_row) {
        sp.states = {static_cast<float*>(sp.weights) + D};
        sp.row_state_stride = mt.S;
      } else {
        sp.states = {mom[k].data()};
      }
      const BagRun run = rot[k].View(k * D);
      const std::span<const BagRun> runs(&run, 1);
      const size_t need = BackwardWorkspaceBytes(ctx, run.num_ids(), D, 1);
      if (ws.size() < need) ws.resize(need);
      int64_t num_unique = 0;
      (void)GroupRows(ctx, runs, ws.data(), ws.size(), &num_unique);
      (void)FusedBackward(ctx, runs, mt.grad_out.data(), T * D, 1.0f, cfg, step, D, sp, ws.data());
    }
  };
  auto seconds = [](Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
  };
  for (auto _ : state) {
    const auto& rot = mt.batches[it % 4];
    ++step;
    auto t0 = Clock::now();
    jobs.clear();
    for (int64_t k = 0; k < T; ++k)
      jobs.push_back(LookupJob{mt.Table(k), rot[k].View(k * D), out.data(), T * D});
    (void)Lookup(ctx, jobs);
    benchmark::DoNotOptimize(out.data());
    const double f = seconds(t0);
    // Alternate which backward goes first, so neither always finds the other's rows in cache.
    double ts = 0, ti = 0;
    for (int j = 0; j < 2; ++j) {
      const bool inr = (j == 0) == (it % 2 == 0);
      t0 = Clock::now();
      backward(mt.batches[(it + 1 + j) % 4], inr);
      (inr ? ti : ts) = seconds(t0);
    }
    ++it;
    fwd.push_back(f);
    sep.push_back(ts);
    in_row.push_back(ti);
    r_sep.push_back(ts / f);
    r_in.push_back(ti / f);
    r_gain.push_back(ti / ts);
    state.SetIterationTime(f + ts + ti);
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  state.counters["fwd_ms"] = median(fwd) * 1e3;
  state.counters["bwd_dense_ms"] = median(sep) * 1e3;
  state.counters["bwd_in_row_ms"] = median(in_row) * 1e3;
  state.counters["dense_over_fwd"] = median(r_sep);
  state.counters["in_row_over_fwd"] = median(r_in);
  state.counters["in_row_over_dense"] = median(r_gain);
}

BENCHMARK(BM_StreamTriad)->ArgNames({"single"})->Arg(1)->Arg(0)->UseManualTime()->Iterations(5);
BENCHMARK(BM_GatherRoof)->UseManualTime()->Iterations(1);
BENCHMARK(BM_RowUpdateRoof)->UseManualTime()->Iterations(60);
BENCHMARK(BM_C1)
    ->ArgNames({"D", "fp16", "prefetch", "flush"})
    ->ArgsProduct({{32, 64, 128, 256}, {0, 1}, {0, 1}, {0, 1}})
    ->UseManualTime()
    ->Iterations(200);
BENCHMARK(BM_C2_Forward)->ArgNames({"zipf"})->Arg(0)->Arg(1)->UseManualTime()->Iterations(100);
BENCHMARK(BM_C3_BackwardRowWiseAdagrad)
    ->ArgNames({"zipf", "fused"})
    ->Args({0, 1})
    ->Args({1, 1})
    ->Args({0, 0})
    ->UseManualTime()
    ->Iterations(100);
BENCHMARK(BM_C4_Forward)->UseManualTime()->Iterations(200);
BENCHMARK(BM_C4_BackwardRowWiseAdagrad)->UseManualTime()->Iterations(200);
BENCHMARK(BM_C4_StateLayout)
    ->ArgNames({"D", "stride"})
    ->Args({128, 144})
    ->Args({120, 128})
    ->UseManualTime()
    ->Iterations(120);

}  // namespace
}  // namespace shardrec::embedding::kernels

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  shardrec::embedding::kernels::MeasureTriad();
  shardrec::embedding::kernels::MeasureGather();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
