// Dense gradient synchronisation on CPU over Gloo (suite dense_sync, performance-anchors §7.5,
// scaled down to 2 ranks as threads on loopback; OpenBLAS at 1 thread per rank). The limit of
// every comparison is measured in the same run, each iteration timing the variants back to back:
//  - BM_Overlap (e1, e3): an MLP step with the bucketer (sync on) against the same step with sync
//    off (compute + bookkeeping only) and a plain all-reduce of all the gradient bytes alone.
//    exposed = median(step with sync - step without) / median(plain all-reduce); target <= 0.10.
//    Bucket caps 1, 5, 25 MB (first bucket 1 MiB); fp32 and bf16 compression.
//  - BM_NoSync (e3): cycles of k = 4 steps, sync only on the last; communication per step
//    against the synced step's.
//  - BM_Bookkeeping (e4): 128 gradients of 16 KiB, one bucket each, no compute: the training
//    thread's cost per bucket (mark_ready: hook + launch), buckets reduced in place (views, no
//    copies), and the step against 128 plain all-reduces of 16 KiB.
//  - BM_Fsdp (e5): the fully sharded step (gather with prefetch, reduce-scatter, local Adam)
//  against
//    the DDP step (bucketer + Adam) on the same MLP, and the bytes each rank holds.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <memory>
#include <vector>

#include "impl/comm/factory.h"
#include "impl/ddp/bucketer.h"
#include "impl/ddp/sharded.h"
#include "impl/dense/gemm.h"
#include "impl/dense/mlp.h"
#include "impl/dense/optimizer.h"
#include "tests/bench/rank_threads.h"

namespace shardrec::ddp {
namespace {

using bench::RankThreads;
using Clock = std::chrono::steady_clock;

constexpr int kWorld = 2;
constexpr int64_t kBatch = 256;  // per rank
// 256 -> 1024 -> 1024 -> 1024 -> 1024 -> 1: 3.41 M parameters, 13.6 MB of fp32 gradients, and
// about 2.6 GFLOP of backward per rank per step.
constexpr int64_t kIn = 256;
const std::vector<int64_t> kOuts = {1024, 1024, 1024, 1024, 1};

double Seconds(Clock::time_point a) {
  return std::chrono::duration<double>(Clock::now() - a).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

std::vector<std::shared_ptr<comm::Communicator>> Group() {
  std::vector<std::unique_ptr<comm::Communicator>> comms;
  ThrowIfError(comm::CreateLocalGroup(kWorld, comm::CommOptions(), &comms));
  std::vector<std::shared_ptr<comm::Communicator>> out;
  for (auto& c : comms) out.push_back(std::move(c));
  return out;
}

std::unique_ptr<dense::Mlp> MakeMlp() {
  std::vector<dense::Activation> acts(kOuts.size(), dense::Activation::kRelu);
  acts.back() = dense::Activation::kNone;
  std::unique_ptr<dense::Mlp> m;
  ThrowIfError(dense::Mlp::Create(kIn, kOuts, acts, 5, "bench", &m));
  return m;
}

// One rank's DDP state: its MLP with gradients bound into the bucketer, its batch.
struct DdpRank {
  std::unique_ptr<dense::Mlp> mlp;
  std::unique_ptr<Bucketer> ddp;
  std::unique_ptr<dense::DenseOptimizer> opt;
  std::vector<float> x, y, dy, plain;
  int64_t params = 0;

  DdpRank(std::shared_ptr<comm::Communicator> comm, const DdpOptions& options, int rank) {
    mlp = MakeMlp();
    std::vector<int64_t> counts;
    for (const auto& t : mlp->tensors()) counts.push_back(t.count);
    for (int64_t c : counts) params += c;
    ThrowIfError(Bucketer::Create(std::move(comm), counts, options, &ddp));
    for (size_t i = 0; i < counts.size(); ++i)
      ThrowIfError(mlp->BindTensor(i, nullptr, ddp->Grad(i)));
    optim::OptimizerConfig oc;
    oc.type = optim::OptimizerType::kAdam;
    oc.learning_rate = 1e-4f;
    ThrowIfError(dense::DenseOptimizer::Create(oc, &opt));
    x.resize(static_cast<size_t>(kBatch * kIn));
    for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.01f * static_cast<float>(i + rank));
    y.resize(kBatch);
    dy.resize(kBatch);
    plain.assign(static_cast<size_t>(params), 1.0f);
  }

  // zero grad, forward, d(0.5 y^2)/dy, backward marking each gradient ready, finish.
  void Step(const ExecContext& ctx) {
    ThrowIfError(ddp->ZeroGrad());
    ThrowIfError(mlp->Forward(ctx, x.data(), kBatch, y.data()));
    for (int64_t i = 0; i < kBatch; ++i) dy[i] = y[i] / static_cast<float>(kBatch);
    ThrowIfError(
        mlp->Backward(ctx, dy.data(), nullptr, [&](size_t i) { ThrowIfError(ddp->MarkReady(i)); }));
    ThrowIfError(ddp->Finish());
  }
  // The bucketer alone: every gradient marked ready at once, no compute to overlap.
  void SyncOnly() {
    for (size_t i = mlp->tensors().size(); i-- > 0;) ThrowIfError(ddp->MarkReady(i));
    ThrowIfError(ddp->Finish());
  }
  void PlainAllReduce() {
    ThrowIfError(ddp->comm().AllReduce(plain.data(), plain.data(), plain.size(), DType::kFloat32,
                                       comm::ReduceOp::kAvg));
  }
};

double Timed(RankThreads& threads, const std::function<void(int)>& job) {
  const auto t = Clock::now();
  threads.Run(job);
  return Seconds(t);
}

struct Setup {
  RankThreads threads{kWorld};
  std::vector<std::unique_ptr<DdpRank>> ranks;
  explicit Setup(const DdpOptions& o) {
    ThrowIfError(dense::SetBlasThreads(1));  // ranks are threads: one core each
    auto comms = Group();
    ranks.resize(kWorld);
    threads.Run([&](int r) { ranks[r] = std::make_unique<DdpRank>(comms[r], o, r); });
  }
};

// Arg 0: bucket cap in MB (first bucket 1 MiB); arg 1: compression (0 fp32, 1 bf16).
void BM_Overlap(benchmark::State& state) {
  DdpOptions o;
  o.bucket_cap_bytes = state.range(0) * 1000 * 1000;
  o.compression = static_cast<Compression>(state.range(1));
  Setup s(o);
  const ExecContext ctx;
  auto synced = [&](int r) {
    s.ranks[r]->ddp->set_sync(true);
    s.ranks[r]->Step(ctx);
  };
  auto unsynced = [&](int r) {
    s.ranks[r]->ddp->set_sync(false);
    s.ranks[r]->Step(ctx);
  };
  auto plain = [&](int r) { s.ranks[r]->PlainAllReduce(); };
  auto alone = [&](int r) {
    s.ranks[r]->ddp->set_sync(true);
    s.ranks[r]->SyncOnly();
  };
  s.threads.Run(synced);  // first synced step rebuilds the buckets
  s.threads.Run(unsynced);
  s.threads.Run(plain);
  const DdpStats before = s.ranks[0]->ddp->stats();
  std::vector<double> with, without, ar, diff, sync_alone;
  double alone_comm = 0, alone_wait = 0;
  for (auto _ : state) {
    without.push_back(Timed(s.threads, unsynced));
    with.push_back(Timed(s.threads, synced));
    ar.push_back(Timed(s.threads, plain));
    const DdpStats a0 = s.ranks[0]->ddp->stats();
    sync_alone.push_back(Timed(s.threads, alone));
    alone_comm += s.ranks[0]->ddp->stats().comm_seconds - a0.comm_seconds;
    alone_wait += s.ranks[0]->ddp->stats().exposed_seconds - a0.exposed_seconds;
    diff.push_back(with.back() - without.back());
    state.SetIterationTime(with.back());
  }
  const DdpStats& after = s.ranks[0]->ddp->stats();
  const double iterations = static_cast<double>(with.size());
  // Counters of the synced training steps only (the bucketer-alone runs are taken out).
  const double steps = static_cast<double>(after.steps - before.steps) - iterations;
  const double ar_s = Median(ar);
  state.counters["grad_MB"] = 4e-6 * static_cast<double>(s.ranks[0]->params);
  state.counters["buckets"] = static_cast<double>(after.buckets);
  state.counters["step_ms"] = 1e3 * Median(with);
  state.counters["nosync_ms"] = 1e3 * Median(without);
  state.counters["allreduce_ms"] = 1e3 * ar_s;
  state.counters["comm_ms"] = 1e3 * (after.comm_seconds - before.comm_seconds - alone_comm) / steps;
  // The bucketer's average (reduce-scatter + all-gather per bucket) with nothing to overlap,
  // against the plain all-reduce of the same bytes.
  state.counters["alone_vs_allreduce"] = Median(sync_alone) / ar_s;
  state.counters["wire_MB"] = 1e-6 * static_cast<double>(after.bytes_reduced);
  // Exposed communication as a fraction of the plain all-reduce: from the step times (the
  // suite's definition) and from the bucketer's own wait in finish.
  state.counters["exposed"] = Median(diff) / ar_s;
  state.counters["finish_wait"] =
      (after.exposed_seconds - before.exposed_seconds - alone_wait) / steps / ar_s;
}

BENCHMARK(BM_Overlap)
    ->ArgsProduct({{1, 5, 25}, {0, 1}})
    ->ArgNames({"cap_MB", "bf16"})
    ->Unit(benchmark::kMillisecond)
    ->UseManualTime()
    ->Iterations(12);

// no_sync: k-step cycles, sync on the last; against k synced steps.
void BM_NoSync(benchmark::State& state) {
  const int k = static_cast<int>(state.range(0));
  Setup s(DdpOptions{});
  const ExecContext ctx;
  auto cycle = [&](bool accumulate) {
    return [&, accumulate](int r) {
      for (int i = 0; i < k; ++i) {
        s.ranks[r]->ddp->set_sync(!accumulate || i == k - 1);
        s.ranks[r]->Step(ctx);
      }
    };
  };
  auto unsynced = [&](int r) {
    s.ranks[r]->ddp->set_sync(false);
    for (int i = 0; i < k; ++i) s.ranks[r]->Step(ctx);
  };
  const auto accumulated = cycle(true), every = cycle(false);
  s.threads.Run(every);
  std::vector<double> acc_t, every_t, none_t;
  double acc_comm = 0, every_comm = 0;
  for (auto _ : state) {
    none_t.push_back(Timed(s.threads, unsynced));
    double c0 = s.ranks[0]->ddp->stats().comm_seconds;
    acc_t.push_back(Timed(s.threads, accumulated));
    double c1 = s.ranks[0]->ddp->stats().comm_seconds;
    every_t.push_back(Timed(s.threads, every));
    acc_comm += c1 - c0;
    every_comm += s.ranks[0]->ddp->stats().comm_seconds - c1;
    state.SetIterationTime(acc_t.back());
  }
  const double none = Median(none_t);
  state.counters["k"] = k;
  state.counters["step_ms_nosync_k"] = 1e3 * Median(acc_t) / k;
  state.counters["step_ms_sync_every"] = 1e3 * Median(every_t) / k;
  state.counters["step_ms_no_comm"] = 1e3 * none / k;
  // Communication per step with no_sync(k) against syncing every step: 1/k is the ideal.
  state.counters["comm_share"] = acc_comm / every_comm;
  state.counters["overhead_share"] = (Median(acc_t) - none) / (Median(every_t) - none);
}

BENCHMARK(BM_NoSync)
    ->Arg(4)
    ->ArgNames({"k"})
    ->Unit(benchmark::kMillisecond)
    ->UseManualTime()
    ->Iterations(8);

// e4: bookkeeping only. 128 gradients of 16 KiB, one bucket each; no compute.
void BM_Bookkeeping(benchmark::State& state) {
  constexpr size_t kTensors = 128;
  constexpr int64_t kCount = 4096;
  const bool sync = state.range(0) != 0;
  RankThreads threads(kWorld);
  auto comms = Group();
  std::vector<std::unique_ptr<Bucketer>> ddps(kWorld);
  DdpOptions o;
  o.first_bucket_bytes = kCount * 4;
  o.bucket_cap_bytes = kCount * 4;
  std::vector<std::vector<float>> plain(kWorld, std::vector<float>(kTensors * kCount, 1.0f));
  threads.Run([&](int r) {
    ThrowIfError(Bucketer::Create(comms[r], std::vector<int64_t>(kTensors, kCount), o, &ddps[r]));
    ddps[r]->set_sync(sync);
  });
  std::vector<double> mark_s(kWorld);
  auto step = [&](int r) {
    Bucketer& d = *ddps[r];
    double marking = 0;
    for (size_t i = kTensors; i-- > 0;) {
      const auto t = Clock::now();
      ThrowIfError(d.MarkReady(i));
      marking += Seconds(t);
    }
    ThrowIfError(d.Finish());
    mark_s[r] = marking;
  };
  auto plain_job = [&](int r) {
    for (size_t i = 0; i < kTensors; ++i) {
      float* p = plain[r].data() + i * kCount;
      ThrowIfError(comms[r]->AllReduce(p, p, kCount, DType::kFloat32, comm::ReduceOp::kAvg));
    }
  };
  threads.Run(step);
  std::vector<double> step_t, plain_t, mark_t;
  for (auto _ : state) {
    step_t.push_back(Timed(threads, step));
    mark_t.push_back(std::max(mark_s[0], mark_s[1]));
    if (sync) plain_t.push_back(Timed(threads, plain_job));
    state.SetIterationTime(step_t.back());
  }
  // Buckets averaged in place: their members are adjacent views into the arena.
  const auto& buckets = ddps[0]->buckets();
  size_t in_place = 0;
  for (const auto& b : buckets) {
    bool adjacent = true;
    for (size_t k = 1; k < b.size(); ++k) {
      adjacent &= ddps[0]->Grad(b[k]) == ddps[0]->Grad(b[k - 1]) + kCount;
    }
    in_place += adjacent ? 1 : 0;
  }
  const double n = static_cast<double>(buckets.size());
  state.counters["buckets"] = n;
  state.counters["in_place"] = static_cast<double>(in_place);
  state.counters["mark_us_per_bucket"] = 1e6 * Median(mark_t) / n;
  state.counters["step_us_per_bucket"] = 1e6 * Median(step_t) / n;
  if (sync) state.counters["allreduce_us_per_bucket"] = 1e6 * Median(plain_t) / n;
}

BENCHMARK(BM_Bookkeeping)
    ->Arg(1)
    ->Arg(0)
    ->ArgNames({"sync"})
    ->Unit(benchmark::kMillisecond)
    ->UseManualTime()
    ->Iterations(20);

// e5: fully sharded step against the DDP step, both with Adam, on the same MLP.
void BM_Fsdp(benchmark::State& state) {
  Setup s(DdpOptions{});
  const ExecContext ctx;
  auto comms = Group();
  std::vector<std::unique_ptr<dense::Mlp>> mlps(kWorld);
  std::vector<std::unique_ptr<ShardedParams>> fsdp(kWorld);
  s.threads.Run([&](int r) {
    mlps[r] = MakeMlp();
    std::vector<int64_t> units;
    std::vector<const float*> init;
    for (int l = 0; l < mlps[r]->num_layers(); ++l) {
      units.push_back(mlps[r]->layer_params(l));
      init.push_back(mlps[r]->tensors()[2 * l].param);
    }
    optim::OptimizerConfig oc;
    oc.type = optim::OptimizerType::kAdam;
    oc.learning_rate = 1e-4f;
    ThrowIfError(ShardedParams::Create(comms[r], units, init, oc, &fsdp[r]));
  });
  auto ddp_step = [&](int r) {
    s.ranks[r]->Step(ctx);
    ThrowIfError(s.ranks[r]->opt->Step(s.ranks[r]->mlp->tensors()));
  };
  auto fsdp_step = [&](int r) {
    dense::Mlp& m = *mlps[r];
    ShardedParams& f = *fsdp[r];
    DdpRank& d = *s.ranks[r];
    const int L = m.num_layers();
    auto bind = [&](int l, float* p, float* g) {
      const int64_t wc = m.layer(l).out * m.layer(l).in;
      ThrowIfError(m.BindTensor(2 * l, p, g));
      ThrowIfError(m.BindTensor(2 * l + 1, p + wc, g ? g + wc : nullptr));
    };
    ThrowIfError(m.BeginForward(d.x.data(), kBatch));
    for (int l = 0; l < L; ++l) {
      float* p = nullptr;
      ThrowIfError(f.Gather(l, l + 1 < L ? l + 1 : -1, &p));
      bind(l, p, nullptr);
      ThrowIfError(m.ForwardLayer(ctx, l));
      ThrowIfError(f.Release(l));
    }
    for (int64_t i = 0; i < kBatch; ++i) d.dy[i] = m.output()[i] / static_cast<float>(kBatch);
    ThrowIfError(m.BeginBackward(d.dy.data(), nullptr));
    for (int l = L - 1; l >= 0; --l) {
      float *p = nullptr, *g = nullptr;
      ThrowIfError(f.Gather(l, l > 0 ? l - 1 : -1, &p));
      ThrowIfError(f.Grad(l, &g));
      bind(l, p, g);
      ThrowIfError(m.BackwardLayer(ctx, l));
      ThrowIfError(f.ReduceGrad(l));
      ThrowIfError(f.Release(l));
    }
    ThrowIfError(f.Step());
  };
  s.threads.Run(ddp_step);
  s.threads.Run(fsdp_step);
  std::vector<double> d_t, f_t;
  for (auto _ : state) {
    d_t.push_back(Timed(s.threads, ddp_step));
    f_t.push_back(Timed(s.threads, fsdp_step));
    state.SetIterationTime(f_t.back());
  }
  const double params = static_cast<double>(s.ranks[0]->params);
  state.counters["ddp_ms"] = 1e3 * Median(d_t);
  state.counters["fsdp_ms"] = 1e3 * Median(f_t);
  state.counters["fsdp_vs_ddp"] = Median(f_t) / Median(d_t);
  // DDP holds parameters, gradients and two Adam moments in full: 16 bytes per parameter.
  state.counters["ddp_MB"] = 16e-6 * params;
  state.counters["fsdp_MB"] = 1e-6 * static_cast<double>(fsdp[0]->memory_bytes());
  state.counters["fsdp_peak_MB"] = 1e-6 * static_cast<double>(fsdp[0]->peak_memory_bytes());
}

BENCHMARK(BM_Fsdp)->Unit(benchmark::kMillisecond)->UseManualTime()->Iterations(10);

}  // namespace
}  // namespace shardrec::ddp

BENCHMARK_MAIN();
