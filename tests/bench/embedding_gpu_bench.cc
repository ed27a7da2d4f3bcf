// Suites gpu_fwd and gpu_bwd (performance-anchors.md sections 7.1, 7.2), a first subset: the
// CUDA twins' pooled forward over several table shapes (all tables of the rank in one Lookup
// call) and the backward fused with row-wise Adagrad (GroupRows + FusedBackward per table),
// with the two roofs of section 7.0 measured in the same run: BW_copy (a device-to-device copy,
// bytes read + written) and BW_gather (uniformly random 512-byte rows, bytes read + written).
// Each case is timed with CUDA events around the op alone: 10 warm-ups, then 100 timed calls over
// 4 rotating id batches; the median and p90 are reported (one Google Benchmark iteration holds
// the whole loop and reports the median as its manual time). Bytes, per call:
//   fbgemm  (forward) B*sum(D)*L*w + B*sum(D)*4          (FBGEMM's convention, for comparison)
//   phys    (forward) sum_t U_t*D_t*w + B*sum(D)*4 + N*8 (+ N*4 weighted) + T*(B+1)*8
//   phys    (backward) B*sum(D)*4 + sum_t U_t*(2*D_t*w + 8) + N*(8 + 8 + 4 + 4) (+ N*4 weighted)
//           (the group_only shape times GroupRows alone and is reported against the same bytes)
// where U_t is the number of distinct rows of table t in the batch (counted exactly), N the ids,
// w the weight bytes; the backward's sort passes are not counted. x_copy and x_gather are phys
// GB/s over the roofs. Environment: SHARDREC_GPU_BENCH_QUICK=1 keeps only the smaller shapes;
// --print_fwd_shapes prints the forward shapes as JSON lines and exits.
#include <benchmark/benchmark.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "impl/embedding/kernels/cuda/kernels_cuda.h"
#include "impl/optim/optimizer.h"
#include "tests/bench/gpu_bench_kernels.h"

namespace shardrec::embedding::kernels {
namespace {

void Check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}
void CheckStatus(const Status& s) {
  if (!s.ok()) throw std::runtime_error(s.ToString());
}

struct DevBuf {
  void* p = nullptr;
  explicit DevBuf(size_t bytes) { Check(cudaMalloc(&p, bytes < 1 ? 1 : bytes), "cudaMalloc"); }
  ~DevBuf() { (void)cudaFree(p); }
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
  template <class T>
  T* as() const {
    return static_cast<T*>(p);
  }
};

template <class T>
void Upload(void* dst, const std::vector<T>& v) {
  Check(cudaMemcpy(dst, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice), "upload");
}

constexpr int kWarmups = 10;
constexpr int kTimed = 100;
constexpr int kBatches = 4;

struct Timing {
  double median_s = 0, p90_s = 0;
};

// Runs op(batch) kWarmups + kTimed times on `stream`, timing each call with events.
template <class Op>
Timing TimeOp(cudaStream_t stream, Op&& op) {
  cudaEvent_t a, b;
  Check(cudaEventCreate(&a), "cudaEventCreate");
  Check(cudaEventCreate(&b), "cudaEventCreate");
  std::vector<double> t;
  for (int i = 0; i < kWarmups + kTimed; ++i) {
    Check(cudaEventRecord(a, stream), "cudaEventRecord");
    op(i % kBatches);
    Check(cudaEventRecord(b, stream), "cudaEventRecord");
    Check(cudaEventSynchronize(b), "cudaEventSynchronize");
    float ms = 0;
    Check(cudaEventElapsedTime(&ms, a, b), "cudaEventElapsedTime");
    if (i >= kWarmups) t.push_back(ms * 1e-3);
  }
  (void)cudaEventDestroy(a);
  (void)cudaEventDestroy(b);
  std::sort(t.begin(), t.end());
  return {t[t.size() / 2], t[t.size() * 9 / 10]};
}

// ---- Roofs ----------------------------------------------------------------------------------

double g_copy_gbs = 0, g_gather_gbs = 0;

void MeasureRoofs() {
  cudaStream_t s = nullptr;
  const size_t copy_bytes = size_t{2} << 30;
  {
    DevBuf src(copy_bytes), dst(copy_bytes);
    Check(bench::FillRandom(src.p, copy_bytes / 4, 32, false, 1, s), "fill");
    const Timing t = TimeOp(s, [&](int) {
      Check(cudaMemcpyAsync(dst.p, src.p, copy_bytes, cudaMemcpyDeviceToDevice, s), "copy");
    });
    g_copy_gbs = 2.0 * copy_bytes / t.median_s / 1e9;
  }
  {
    const uint64_t table_bytes = uint64_t{16} << 30, rows = table_bytes / 512, n = 1 << 22;
    DevBuf table(table_bytes), out(n * 512);
    Check(bench::FillRandom(table.p, table_bytes / 4, 32, false, 2, s), "fill");
    const Timing t = TimeOp(s, [&](int batch) {
      Check(bench::GatherRoof(table.p, rows, out.p, n, 1000 + batch, s), "gather");
    });
    g_gather_gbs = 2.0 * n * 512 / t.median_s / 1e9;
  }
}

void Roof(benchmark::State& state, bool copy) {
  for (auto _ : state) state.SetIterationTime(1e-3);
  state.counters["GBps"] = copy ? g_copy_gbs : g_gather_gbs;
}

// ---- Shapes ---------------------------------------------------------------------------------

struct Shape {
  std::string id;
  int T;
  int64_t E;
  std::vector<int32_t> dims;  // cycled over the tables
  int B, L;
  DType dtype;
  bool weighted = false;
  double hot = 0;  // fraction of ids on row 0 of each table (hot-row backward)
  bool quick = true;
  bool group_only = false;  // backward: GroupRows alone (the sort and bookkeeping share)
  int32_t D(int t) const { return dims[t % dims.size()]; }
};

size_t WBytes(DType d) { return d == DType::kFloat32 ? 4 : 2; }

// A shape's tables, batches (ids, offsets, weights on the device) and output/gradient buffer.
struct Setup {
  const Shape& s;
  int64_t sum_d = 0, ids_per_table = 0;
  std::vector<int64_t> col_off, table_off;  // per table: column in the output, element in weights
  std::unique_ptr<DevBuf> weights, io, state;
  std::vector<std::unique_ptr<DevBuf>> ids, offsets, id_weights;  // per batch: all tables
  std::vector<int64_t> unique;                                    // per table, batch 0

  explicit Setup(const Shape& shape) : s(shape) {
    int64_t elems = 0;
    for (int t = 0; t < s.T; ++t) {
      col_off.push_back(sum_d);
      table_off.push_back(elems);
      sum_d += s.D(t);
      elems += s.E * s.D(t);
    }
    ids_per_table = int64_t{s.B} * s.L;
    weights = std::make_unique<DevBuf>(elems * WBytes(s.dtype));
    Check(bench::FillRandom(weights->p, elems, s.dtype == DType::kFloat32 ? 32 : 16,
                            s.dtype == DType::kBFloat16, 7, nullptr),
          "fill");
    io = std::make_unique<DevBuf>(int64_t{s.B} * sum_d * 4);
    Check(bench::FillRandom(io->p, int64_t{s.B} * sum_d, 32, false, 8, nullptr), "fill");
    state = std::make_unique<DevBuf>(s.T * s.E * 4);
    Check(cudaMemset(state->p, 0, s.T * s.E * 4), "cudaMemset");
    std::vector<int64_t> off(s.B + 1);
    for (int b = 0; b <= s.B; ++b) off[b] = int64_t{b} * s.L;
    std::mt19937_64 rng(42);
    std::uniform_real_distribution<float> u(0.0f, 1.0f);
    const int64_t n = ids_per_table * s.T;
    for (int batch = 0; batch < kBatches; ++batch) {
      std::vector<int64_t> v(n);
      for (int64_t i = 0; i < n; ++i)
        v[i] = s.hot > 0 && u(rng) < s.hot ? 0 : static_cast<int64_t>(rng() % s.E);
      if (batch == 0) {
        for (int t = 0; t < s.T; ++t) {
          std::vector<int64_t> x(v.begin() + t * ids_per_table,
                                 v.begin() + (t + 1) * ids_per_table);
          std::sort(x.begin(), x.end());
          unique.push_back(std::unique(x.begin(), x.end()) - x.begin());
        }
      }
      ids.push_back(std::make_unique<DevBuf>(n * 8));
      Upload(ids.back()->p, v);
      offsets.push_back(std::make_unique<DevBuf>((s.B + 1) * 8));
      Upload(offsets.back()->p, off);
      std::vector<float> w(s.weighted ? n : 0);
      for (float& x : w) x = u(rng);
      id_weights.push_back(std::make_unique<DevBuf>(w.size() * 4));
      if (s.weighted) Upload(id_weights.back()->p, w);
    }
  }

  BagRun Run(int batch, int t) const {
    BagRun r;
    r.offsets = offsets[batch]->as<int64_t>();
    r.num_bags = s.B;
    r.rows = ids[batch]->as<int64_t>() + t * ids_per_table;
    r.weights = s.weighted ? id_weights[batch]->as<float>() + t * ids_per_table : nullptr;
    r.io_offset = col_off[t];
    return r;
  }
  WeightsView Weights(int t) const {
    const char* base = weights->as<char>() + table_off[t] * WBytes(s.dtype);
    return WeightsView{base, s.dtype, s.E, s.D(t), s.D(t)};
  }
  double FbgemmFwdBytes() const {
    return double(s.B) * sum_d * (double(s.L) * WBytes(s.dtype) + 4);
  }
  double PhysFwdBytes() const {
    double b = double(s.B) * sum_d * 4 + double(s.T) * (s.B + 1) * 8;
    const double n = double(ids_per_table) * s.T;
    b += n * (8 + (s.weighted ? 4 : 0));
    for (int t = 0; t < s.T; ++t) b += double(unique[t]) * s.D(t) * WBytes(s.dtype);
    return b;
  }
  double PhysBwdBytes() const {
    double b = double(s.B) * sum_d * 4;
    const double n = double(ids_per_table) * s.T;
    b += n * (8 + 8 + 4 + 4 + (s.weighted ? 4 : 0));
    for (int t = 0; t < s.T; ++t) b += double(unique[t]) * (2.0 * s.D(t) * WBytes(s.dtype) + 8);
    return b;
  }
};

void Report(benchmark::State& state, const Timing& t, double phys, double fbgemm) {
  state.counters["median_us"] = t.median_s * 1e6;
  state.counters["p90_us"] = t.p90_s * 1e6;
  state.counters["phys_GBps"] = phys / t.median_s / 1e9;
  if (fbgemm > 0) state.counters["fbgemm_GBps"] = fbgemm / t.median_s / 1e9;
  state.counters["x_copy"] = phys / t.median_s / 1e9 / g_copy_gbs;
  state.counters["x_gather"] = phys / t.median_s / 1e9 / g_gather_gbs;
}

void Forward(benchmark::State& state, const Shape& shape) {
  try {
    Setup st(shape);
    std::vector<std::vector<LookupJob>> jobs(kBatches);
    for (int batch = 0; batch < kBatches; ++batch)
      for (int t = 0; t < shape.T; ++t)
        jobs[batch].push_back(
            LookupJob{st.Weights(t), st.Run(batch, t), st.io->as<float>(), st.sum_d});
    const ExecContext ctx = ExecContext::Cuda(0, nullptr);
    Timing t;
    for (auto _ : state) {
      t = TimeOp(nullptr, [&](int batch) { CheckStatus(cuda::Lookup(ctx, jobs[batch], nullptr)); });
      state.SetIterationTime(t.median_s);
    }
    Report(state, t, st.PhysFwdBytes(), st.FbgemmFwdBytes());
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
}

void Backward(benchmark::State& state, const Shape& shape) {
  try {
    Setup st(shape);
    optim::OptimizerConfig cfg;
    cfg.type = optim::OptimizerType::kRowWiseAdagrad;
    cfg.learning_rate = 0.01f;
    const ExecContext ctx = ExecContext::Cuda(0, nullptr);
    size_t ws_bytes = 0;
    for (int t = 0; t < shape.T; ++t)
      ws_bytes =
          std::max(ws_bytes, cuda::BackwardWorkspaceBytes(ctx, st.ids_per_table, shape.D(t), 1));
    DevBuf ws(ws_bytes);
    std::vector<optim::ShardParams> shards(shape.T);
    for (int t = 0; t < shape.T; ++t) {
      optim::ShardParams& p = shards[t];
      const WeightsView w = st.Weights(t);
      p.weights = const_cast<void*>(w.data);
      p.dtype = shape.dtype;
      p.rows = shape.E;
      p.cols = shape.D(t);
      p.stride = shape.D(t);
      p.states = {st.state->as<float>() + t * shape.E};
    }
    int64_t step = 0;
    auto op = [&](int batch) {
      ++step;
      for (int t = 0; t < shape.T; ++t) {
        const BagRun run = st.Run(batch, t);
        const int64_t n = st.ids_per_table;
        const cuda::DeviceRuns dr{std::span<const BagRun>(&run, 1), std::span<const int64_t>(&n, 1),
                                  shape.E};
        CheckStatus(cuda::GroupRows(ctx, dr, ws.p, ws_bytes, nullptr));
        if (!shape.group_only)
          CheckStatus(cuda::FusedBackward(ctx, dr, st.io->as<float>(), st.sum_d, 1.0f, cfg, step,
                                          shape.D(t), shards[t], ws.p));
      }
    };
    Timing t;
    for (auto _ : state) {
      t = TimeOp(nullptr, op);
      state.SetIterationTime(t.median_s);
    }
    Report(state, t, st.PhysBwdBytes(), 0);
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
}

std::vector<Shape> FwdShapes() {
  const DType f32 = DType::kFloat32, f16 = DType::kFloat16, bf16 = DType::kBFloat16;
  std::vector<Shape> v = {
      {"a1_T32_E1e5_D128_B512_L20_fp32", 32, 100000, {128}, 512, 20, f32},
      {"a3_T2_E1e7_D192_B65536_L32_fp32", 2, 10000000, {192}, 65536, 32, f32, false, 0, false},
      {"a3_T2_E1e7_D192_B65536_L32_fp16", 2, 10000000, {192}, 65536, 32, f16, false, 0, false},
      {"a4_T32_E1e6_D128_B16384_L20_fp32", 32, 1000000, {128}, 16384, 20, f32, false, 0, false},
      {"a4_T32_E1e6_D128_B16384_L20_fp16", 32, 1000000, {128}, 16384, 20, f16, false, 0, false},
      {"a4_T32_E1e6_D128_B16384_L20_bf16", 32, 1000000, {128}, 16384, 20, bf16, false, 0, false},
      {"a7_T32_E1e5_Dmix_B4096_L20_fp16_weighted",
       32,
       100000,
       {32, 64, 128, 256},
       4096,
       20,
       f16,
       true},
  };
  for (int32_t d : {16, 32, 64, 256, 512})
    v.push_back(
        {"a5_T32_E1e5_D" + std::to_string(d) + "_B4096_L20_fp16", 32, 100000, {d}, 4096, 20, f16});
  for (int l : {1, 4, 64})
    v.push_back(
        {"a6_T32_E1e5_D128_B" + std::to_string(4096 * 20 / l) + "_L" + std::to_string(l) + "_fp16",
         32,
         100000,
         {128},
         4096 * 20 / l,
         l,
         f16});
  return v;
}

std::vector<Shape> BwdShapes() {
  const DType f32 = DType::kFloat32, f16 = DType::kFloat16;
  return {
      {"b1_T32_E1e5_D128_B512_L20_fp32_rowwise_adagrad", 32, 100000, {128}, 512, 20, f32},
      {"b1hot_T32_E1e5_D128_B512_L20_fp32_hot50pct", 32, 100000, {128}, 512, 20, f32, false, 0.5},
      {"b4_T32_E1e6_D128_B16384_L20_fp32_rowwise_adagrad",
       32,
       1000000,
       {128},
       16384,
       20,
       f32,
       false,
       0,
       false},
      {"b4_T32_E1e6_D128_B16384_L20_fp16_rowwise_adagrad",
       32,
       1000000,
       {128},
       16384,
       20,
       f16,
       false,
       0,
       false},
      {"b4_T32_E1e6_D128_B16384_L20_fp32_group_only",
       32,
       1000000,
       {128},
       16384,
       20,
       f32,
       false,
       0,
       false,
       true},
  };
}

// The forward shapes as JSON lines, for the PyTorch side (tests/bench/gpu_fwd_torch.py), so both
// sides time the same shapes.
void PrintFwdShapes() {
  for (const Shape& s : FwdShapes()) {
    std::string dims;
    for (int32_t d : s.dims) dims += (dims.empty() ? "" : ",") + std::to_string(d);
    std::printf(
        "{\"id\": \"%s\", \"T\": %d, \"E\": %lld, \"dims\": [%s], \"B\": %d, \"L\": %d, "
        "\"dtype\": \"%s\", \"weighted\": %s, \"quick\": %s}\n",
        s.id.c_str(), s.T, static_cast<long long>(s.E), dims.c_str(), s.B, s.L, DTypeName(s.dtype),
        s.weighted ? "true" : "false", s.quick ? "true" : "false");
  }
}

}  // namespace
}  // namespace shardrec::embedding::kernels

int main(int argc, char** argv) {
  using namespace shardrec::embedding::kernels;
  if (argc > 1 && std::string(argv[1]) == "--print_fwd_shapes") {
    PrintFwdShapes();
    return 0;
  }
  benchmark::Initialize(&argc, argv);
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::fprintf(stderr, "embedding_gpu_bench: no CUDA device\n");
    return 77;
  }
  cudaDeviceProp prop{};
  Check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  benchmark::AddCustomContext("gpu", prop.name);
  MeasureRoofs();
  benchmark::AddCustomContext("BW_copy_GBps", std::to_string(g_copy_gbs));
  benchmark::AddCustomContext("BW_gather_GBps", std::to_string(g_gather_gbs));
  const bool quick = std::getenv("SHARDREC_GPU_BENCH_QUICK") != nullptr;
  benchmark::RegisterBenchmark("roof/BW_copy", [](benchmark::State& s) { Roof(s, true); })
      ->UseManualTime()
      ->Iterations(1);
  benchmark::RegisterBenchmark("roof/BW_gather", [](benchmark::State& s) { Roof(s, false); })
      ->UseManualTime()
      ->Iterations(1);
  static const std::vector<Shape> fwd = FwdShapes(), bwd = BwdShapes();
  for (const Shape& s : fwd)
    if (s.quick || !quick)
      benchmark::RegisterBenchmark(("gpu_fwd/" + s.id).c_str(),
                                   [&s](benchmark::State& st) { Forward(st, s); })
          ->UseManualTime()
          ->Unit(benchmark::kMicrosecond)
          ->Iterations(1);
  for (const Shape& s : bwd)
    if (s.quick || !quick)
      benchmark::RegisterBenchmark(("gpu_bwd/" + s.id).c_str(),
                                   [&s](benchmark::State& st) { Backward(st, s); })
          ->UseManualTime()
          ->Unit(benchmark::kMicrosecond)
          ->Iterations(1);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
