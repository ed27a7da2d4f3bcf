// CPU dense path (suite gemm): GFLOP/s of the library's MLP forward and backward (dense::Mlp:
// OpenBLAS sgemm behind the Gemm seam plus the bias/activation and bias-gradient passes) against
// OpenBLAS's own cblas_sgemm on exactly the same GEMM sequence, measured in the same run with
// the same library instance (blas_loader.h). Each iteration times the four back to back, and the
// medians are compared: `fwd_vs_blas` and `bwd_vs_blas` are library GFLOP/s / sgemm GFLOP/s.
// Shapes: DLRM's bottom MLP 13-512-256-128 and top MLP 479-1024-1024-512-256-1 at batch 256 and
// 2048, and a square 1024 layer at batch 1024; 1 and 2 OpenBLAS threads.
#include <benchmark/benchmark.h>
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <vector>

#include "impl/dense/blas_loader.h"
#include "impl/dense/gemm.h"
#include "impl/dense/mlp.h"

namespace shardrec::dense {
namespace {

using Clock = std::chrono::steady_clock;

struct Config {
  const char* name;
  int64_t in;
  std::vector<int64_t> outs;
  bool need_dx;  // the top MLP's and the square layer's input gradient is needed by the model
};

const Config kConfigs[] = {
    {"bottom", 13, {512, 256, 128}, false},
    {"top", 479, {1024, 1024, 512, 256, 1}, true},
    {"square", 1024, {1024}, true},
};

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Arg 0: config index; arg 1: batch; arg 2: OpenBLAS threads.
void BM_Mlp(benchmark::State& state) {
  const Config& cfg = kConfigs[state.range(0)];
  const int64_t batch = state.range(1);
  const int threads = static_cast<int>(state.range(2));
  const BlasApi* blas = nullptr;
  if (!LoadBlas(&blas).ok() || !SetBlasThreads(threads).ok()) {
    state.SkipWithError("no OpenBLAS");
    return;
  }
  std::vector<Activation> acts(cfg.outs.size(), Activation::kRelu);
  acts.back() = Activation::kNone;
  std::unique_ptr<Mlp> mlp;
  if (!Mlp::Create(cfg.in, cfg.outs, acts, 1, "bench", &mlp).ok()) {
    state.SkipWithError("MLP");
    return;
  }
  const int L = mlp->num_layers();
  std::vector<float> x(static_cast<size_t>(batch * cfg.in)), y(batch * mlp->out_dim()),
      dy(y.size()), dx(x.size());
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.01f * static_cast<float>(i));
  for (size_t i = 0; i < dy.size(); ++i) dy[i] = 1e-3f * std::cos(0.7f * static_cast<float>(i));
  // The raw sgemm sequence on buffers of the same shapes.
  std::vector<std::vector<float>> w(L), gw(L), act(L + 1), dact(L + 1);
  double fwd_flops = 0, bwd_flops = 0;
  act[0] = x;
  dact[0].resize(x.size());
  for (int l = 0; l < L; ++l) {
    const LinearShape& s = mlp->layer(l);
    w[l].assign(static_cast<size_t>(s.out * s.in), 0.01f);
    gw[l].assign(w[l].size(), 0.0f);
    act[l + 1].assign(static_cast<size_t>(batch * s.out), 0.5f);
    dact[l + 1].assign(act[l + 1].size(), 1e-3f);
    const double f = 2.0 * static_cast<double>(batch) * s.in * s.out;
    fwd_flops += f;
    bwd_flops += (l > 0 || cfg.need_dx) ? 2 * f : f;
  }
  const ExecContext ctx;  // what the C API passes: OpenBLAS threads the GEMMs itself
  auto lib_fwd = [&] {
    if (!mlp->Forward(ctx, x.data(), batch, y.data()).ok()) state.SkipWithError("forward");
  };
  auto lib_bwd = [&] {
    if (!mlp->Backward(ctx, dy.data(), cfg.need_dx ? dx.data() : nullptr).ok()) {
      state.SkipWithError("backward");
    }
  };
  auto raw_fwd = [&] {
    for (int l = 0; l < L; ++l) {
      const LinearShape& s = mlp->layer(l);
      blas->sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(batch),
                  static_cast<int>(s.out), static_cast<int>(s.in), 1.0f, act[l].data(),
                  static_cast<int>(s.in), w[l].data(), static_cast<int>(s.in), 0.0f,
                  act[l + 1].data(), static_cast<int>(s.out));
    }
  };
  auto raw_bwd = [&] {
    for (int l = L - 1; l >= 0; --l) {
      const LinearShape& s = mlp->layer(l);
      blas->sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, static_cast<int>(s.out),
                  static_cast<int>(s.in), static_cast<int>(batch), 1.0f, dact[l + 1].data(),
                  static_cast<int>(s.out), act[l].data(), static_cast<int>(s.in), 1.0f,
                  gw[l].data(), static_cast<int>(s.in));
      if (l > 0 || cfg.need_dx) {
        blas->sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(batch),
                    static_cast<int>(s.in), static_cast<int>(s.out), 1.0f, dact[l + 1].data(),
                    static_cast<int>(s.out), w[l].data(), static_cast<int>(s.in), 0.0f,
                    dact[l].data(), static_cast<int>(s.in));
      }
    }
  };
  auto timed = [](auto&& fn) {
    const auto t = Clock::now();
    fn();
    return std::chrono::duration<double>(Clock::now() - t).count();
  };
  lib_fwd();
  lib_bwd();
  raw_fwd();
  raw_bwd();
  std::vector<double> lf, lb, rf, rb;
  for (auto _ : state) {
    rf.push_back(timed(raw_fwd));
    lf.push_back(timed(lib_fwd));
    rb.push_back(timed(raw_bwd));
    lb.push_back(timed(lib_bwd));
    state.SetIterationTime(lf.back() + lb.back());
  }
  const double lib_f = fwd_flops / Median(lf) / 1e9, lib_b = bwd_flops / Median(lb) / 1e9;
  const double raw_f = fwd_flops / Median(rf) / 1e9, raw_b = bwd_flops / Median(rb) / 1e9;
  state.counters["fwd_GFLOPs"] = lib_f;
  state.counters["blas_fwd_GFLOPs"] = raw_f;
  state.counters["fwd_vs_blas"] = lib_f / raw_f;
  state.counters["bwd_GFLOPs"] = lib_b;
  state.counters["blas_bwd_GFLOPs"] = raw_b;
  state.counters["bwd_vs_blas"] = lib_b / raw_b;
  state.SetLabel(cfg.name);
}

BENCHMARK(BM_Mlp)
    ->ArgsProduct({{0, 1}, {256, 2048}, {1, 2}})
    ->Args({2, 1024, 1})
    ->Args({2, 1024, 2})
    ->ArgNames({"cfg", "batch", "threads"})
    ->Unit(benchmark::kMillisecond)
    ->UseManualTime()
    ->MinTime(2.0);

}  // namespace
}  // namespace shardrec::dense

BENCHMARK_MAIN();
