// Host embedding kernels at every instruction-set level the host has (baseline, AVX2, AVX-512):
// the same bits for lookups and for the fused backward (and the column shards' two-phase path)
// as the scalar reference.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <vector>

#include "impl/core/fp8.h"
#include "impl/core/half.h"
#include "impl/embedding/kernels/kernels.h"
#include "tests/impl/embedding/kernels/kernels_test_util.h"

namespace shardrec::embedding::kernels {
namespace {

using namespace test_util;  // NOLINT: the shared helpers of kernels_test_util.h

void ToBf16Row(const float* src, size_t n, uint16_t* dst) {
  for (size_t i = 0; i < n; ++i) dst[i] = FloatToBFloat16(src[i]);
}

// Every instruction-set level the host has computes the same bits (same summation order, no
// contraction): pooled and sequence runs, weighted or not, fp32/fp16/bf16 rows, dims with and
// without a partial vector, and rows wider than one register tile; rows encoded as they are
// produced equal the fp32 rows encoded afterwards.
TEST(EmbeddingKernels, EveryCpuLevelGivesTheSameBits) {
  std::vector<CpuLevel> levels = {CpuLevel::kBaseline};
  if (HostCpuLevel() >= CpuLevel::kAvx2) levels.push_back(CpuLevel::kAvx2);
  if (HostCpuLevel() >= CpuLevel::kAvx512) levels.push_back(CpuLevel::kAvx512);
  std::printf("levels on this host: up to %s\n", CpuLevelName(HostCpuLevel()));
  const int64_t R = 200;
  Batch batch = MakeBatch(300, 30, R, 21);
  for (int32_t D : {1, 3, 4, 16, 17, 64, 100, 128, 300, 513}) {
    auto table = MakeTable(R, D);
    std::vector<uint16_t> half(table.size()), bf(table.size());
    for (size_t i = 0; i < table.size(); ++i) {
      half[i] = FloatToHalf(table[i]);
      bf[i] = FloatToBFloat16(table[i]);
    }
    for (DType dt : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
      const void* data = dt == DType::kFloat32   ? static_cast<const void*>(table.data())
                         : dt == DType::kFloat16 ? static_cast<const void*>(half.data())
                                                 : static_cast<const void*>(bf.data());
      const WeightsView w{data, dt, R, D, D};
      for (int mode = 0; mode < 3; ++mode) {  // pooled, weighted pooled, weighted sequence
        BagRun run = batch.View(mode > 0);
        if (mode == 2) run = BagRun{nullptr, 150, batch.rows.data(), batch.weights.data(), 0};
        const int64_t n = run.num_bags;
        std::vector<float> ref;
        for (CpuLevel level : levels) {
          std::vector<float> out(static_cast<size_t>(n * D), -1.0f);
          LookupJob job{w, run, out.data(), D};
          LookupOptions o;
          o.level = level;
          ASSERT_TRUE(Lookup(Ctx(), std::span<const LookupJob>(&job, 1), o).ok());
          // The same rows encoded for the wire as they are produced equal the fp32 rows
          // encoded afterwards (LookupJob::out16).
          std::vector<uint16_t> out16(out.size(), 0xffff), want16(out.size());
          job.out16 = out16.data();
          job.encode = &ToBf16Row;
          ASSERT_TRUE(Lookup(Ctx(), std::span<const LookupJob>(&job, 1), o).ok());
          ToBf16Row(out.data(), out.size(), want16.data());
          ASSERT_EQ(out16, want16) << "level " << CpuLevelName(level) << " dim " << D << " dtype "
                                   << DTypeName(dt) << " mode " << mode;
          if (ref.empty()) {
            ref = out;
            continue;
          }
          ASSERT_EQ(0, std::memcmp(out.data(), ref.data(), out.size() * 4))
              << "level " << CpuLevelName(level) << " dim " << D << " dtype " << DTypeName(dt)
              << " mode " << mode;
        }
      }
    }
  }
  // A level above the host's is refused.
  if (HostCpuLevel() < CpuLevel::kAvx512) {
    LookupOptions o;
    o.level = CpuLevel::kAvx512;
    std::vector<float> out(4);
    EXPECT_EQ(Lookup(Ctx(), {}, o).code(), Code::kUnsupported);
  }
}

// The fused backward, and the two-phase path of column shards (AggregateWithRowStats, then
// ApplyRows with the statistics; or ApplyRows taking them from whole rows), at every
// instruction-set level the host has give the bits of AggregateGrads + optim::PartialRowStats +
// optim::Apply (the scalar reference): all six optimizers, every weight-decay mode, fp32 and
// 16-bit and FP8 weights (nearest and stochastic rounding), weighted and unweighted ids, dims on
// both sides of the vector widths and of 128 columns (lanes holding two quads), a hot row (more ids
// than one segment chunk) and rows never touched, over two steps with 1 and 2 threads.
TEST(EmbeddingKernels, FusedBackwardEqualsAggregateThenApplyAtEveryCpuLevel) {
  std::vector<CpuLevel> levels = {CpuLevel::kBaseline};
  if (HostCpuLevel() >= CpuLevel::kAvx2) levels.push_back(CpuLevel::kAvx2);
  if (HostCpuLevel() >= CpuLevel::kAvx512) levels.push_back(CpuLevel::kAvx512);
  const int64_t R = 60;
  Batch batch = MakeBatch(90, 8, R - 4, 31);  // rows R-4..R-1 never appear
  for (int b = 0; b < 3; ++b) {               // row 7 in 3 x 20 more ids: a hot row
    for (int k = 0; k < 20; ++k) {
      batch.rows.push_back(7);
      batch.weights.push_back(0.5f + 0.125f * static_cast<float>(k % 5));
    }
    batch.offsets.push_back(static_cast<int64_t>(batch.rows.size()));
  }
  const int64_t bags = static_cast<int64_t>(batch.offsets.size()) - 1;
  ThreadPool pool(2);
  const optim::WeightDecayMode modes[3] = {optim::WeightDecayMode::kNone,
                                           optim::WeightDecayMode::kL2,
                                           optim::WeightDecayMode::kDecoupled};
  int combo = 0;
  for (int32_t D : {1, 3, 4, 7, 16, 17, 36, 64, 100, 128, 131, 256, 300}) {
    std::vector<float> g(bags * D);
    for (size_t i = 0; i < g.size(); ++i) g[i] = std::sin(0.3f * static_cast<float>(i)) * 0.1f;
    for (auto type : {optim::OptimizerType::kSgd, optim::OptimizerType::kAdagrad,
                      optim::OptimizerType::kRowWiseAdagrad, optim::OptimizerType::kAdam,
                      optim::OptimizerType::kPartialRowWiseAdam, optim::OptimizerType::kLamb}) {
      for (DType dt :
           {DType::kFloat32, DType::kFloat16, DType::kBFloat16, DType::kFp8E4M3, DType::kFp8E5M2}) {
        for (bool weighted : {false, true}) {
          ++combo;
          optim::OptimizerConfig cfg;
          cfg.type = type;
          cfg.learning_rate = 0.05f;
          cfg.weight_decay = 0.01f;
          cfg.weight_decay_mode = modes[combo % 3];
          // eps 0 makes the moments' direction 0 / 0 past a row's last column: those lanes
          // must add nothing to LAMB's norms.
          if (combo % 5 == 0) cfg.eps = 0.0f;
          cfg.stochastic_rounding = dt != DType::kFloat32 && combo % 2 == 0;
          // FP8: rows of D + 4 bytes (the scale, then the codes), `elem` 1 and the stride in
          // bytes; each row encoded by core/fp8.h.
          const bool fp8 = IsFp8DType(dt);
          const size_t elem = dt == DType::kFloat32 ? 4 : fp8 ? 1 : 2;
          const int64_t stride = fp8 ? Fp8RowBytes(D) : D;
          const std::vector<float> t = MakeTable(R, D);
          std::vector<uint8_t> init(static_cast<size_t>(R * stride) * elem);
          for (int64_t r = 0; fp8 && r < R; ++r)
            EncodeFp8Row(Fp8KindOf(dt), t.data() + r * D, D, init.data() + r * stride);
          for (size_t i = 0; !fp8 && i < t.size(); ++i) {
            if (dt == DType::kFloat32) {
              std::memcpy(init.data() + 4 * i, &t[i], 4);
            } else {
              const uint16_t h = dt == DType::kFloat16 ? FloatToHalf(t[i]) : FloatToBFloat16(t[i]);
              std::memcpy(init.data() + 2 * i, &h, 2);
            }
          }
          auto specs = optim::StateSpecs(type);
          // path 0: the scalar reference (AggregateGrads at baseline + optim::PartialRowStats +
          // optim::Apply); 1: FusedBackward; 2: AggregateWithRowStats + ApplyRows with the
          // statistics; 3: AggregateGrads + ApplyRows taking the statistics from whole rows.
          auto run = [&](int path, CpuLevel level, ThreadPool* tp, std::vector<uint8_t>* w,
                         std::vector<std::vector<float>>* st) {
            *w = init;
            st->clear();
            for (auto& sp : specs) st->emplace_back(sp.row_wise ? R : R * D, 0.0f);
            optim::ShardParams p;
            p.weights = w->data();
            p.dtype = dt;
            p.rows = R;
            p.cols = D;
            p.stride = stride;
            p.table_key = 99;
            for (auto& v : *st) p.states.push_back(v.data());
            const ExecContext ctx = Ctx(tp);
            const BagRun view = batch.View(weighted);
            const std::span<const BagRun> runs(&view, 1);
            const int ns = optim::NumRowStats(type);
            for (int64_t step = 1; step <= 2; ++step) {
              if (path == 1) {
                Fused(view, g.data(), D, 0.5f, cfg, step, D, p, tp, level);
                continue;
              }
              std::vector<uint8_t> ws(BackwardWorkspaceBytes(ctx, view.num_ids(), D, ns));
              int64_t num_unique = 0;
              ASSERT_TRUE(GroupRows(ctx, runs, ws.data(), ws.size(), &num_unique).ok());
              std::vector<int64_t> uniq(num_unique);
              std::vector<float> grads(num_unique * D), stats(num_unique * std::max(ns, 1));
              if (path == 2) {
                ASSERT_TRUE(AggregateWithRowStats(ctx, runs, g.data(), D, 0.5f, cfg, step, p,
                                                  ws.data(), uniq.data(), grads.data(),
                                                  stats.data(), level)
                                .ok());
                ASSERT_TRUE(ApplyRows(ctx, cfg, step, D, p, uniq, grads.data(),
                                      ns > 0 ? stats.data() : nullptr, level)
                                .ok());
                continue;
              }
              ASSERT_TRUE(AggregateGrads(ctx, runs, g.data(), D, D, 0.5f, ws.data(), uniq.data(),
                                         grads.data(), path == 0 ? CpuLevel::kBaseline : level)
                              .ok());
              if (path == 3) {
                ASSERT_TRUE(
                    ApplyRows(ctx, cfg, step, D, p, uniq, grads.data(), nullptr, level).ok());
                continue;
              }
              optim::RowUpdate upd{uniq, grads.data()};
              if (ns > 0) optim::PartialRowStats(ctx, cfg, step, p, upd, stats.data());
              optim::Apply(ctx, cfg, step, D, p, upd, ns > 0 ? stats.data() : nullptr);
            }
          };
          std::vector<uint8_t> w_ref, w;
          std::vector<std::vector<float>> s_ref, s;
          run(0, CpuLevel::kAuto, nullptr, &w_ref, &s_ref);
          ASSERT_NE(w_ref, init);
          for (CpuLevel level : levels) {
            for (int path = 1; path <= 3; ++path) {
              run(path, level, combo % 2 == 0 ? &pool : nullptr, &w, &s);
              ASSERT_EQ(w, w_ref) << "path " << path << " level " << CpuLevelName(level) << " dim "
                                  << D << " type " << int(type) << " dtype " << DTypeName(dt)
                                  << " weighted " << weighted;
              ASSERT_EQ(s, s_ref) << "path " << path << " level " << CpuLevelName(level) << " dim "
                                  << D << " type " << int(type) << " dtype " << DTypeName(dt);
            }
          }
          // Rows that no id touched keep their bytes.
          EXPECT_EQ(0, std::memcmp(w.data() + (R - 4) * stride * elem,
                                   init.data() + (R - 4) * stride * elem, 4 * stride * elem));
        }
      }
    }
  }
  if (HostCpuLevel() < CpuLevel::kAvx512) {
    std::vector<float> table(4, 0.0f), grads(4, 1.0f), state(1, 0.0f);
    std::vector<int64_t> rows = {0}, offsets = {0, 1};
    const BagRun run{offsets.data(), 1, rows.data(), nullptr, 0};
    optim::OptimizerConfig cfg;
    optim::ShardParams p;
    p.weights = table.data();
    p.rows = 1;
    p.cols = 4;
    p.stride = 4;
    std::vector<uint8_t> ws(BackwardWorkspaceBytes(Ctx(), 1, 4, 0));
    int64_t num_unique = 0;
    ASSERT_TRUE(
        GroupRows(Ctx(), std::span<const BagRun>(&run, 1), ws.data(), ws.size(), &num_unique).ok());
    EXPECT_EQ(FusedBackward(Ctx(), std::span<const BagRun>(&run, 1), grads.data(), 4, 1.0f, cfg, 1,
                            4, p, ws.data(), CpuLevel::kAvx512)
                  .code(),
              Code::kUnsupported);
  }
}

}  // namespace
}  // namespace shardrec::embedding::kernels
