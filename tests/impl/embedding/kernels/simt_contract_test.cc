// The single-source kernel bodies built as a GPU builds them by default (multiply-adds contracted
// into FMAs; here -mfma -ffp-contract=fast), against the CPU twins built without contraction. The
// results are no longer bit-identical; the stated tolerance is 1e-6 relative for fp32, measured
// per output row against the row's largest magnitude: max_c |a_c - b_c| <= 1e-6 * max_c |b_c|.
// The tolerance holds per kernel call (one lookup, one update step); over many steps the
// difference grows as any perturbation of training does (Adagrad with eps 1e-8 reaches ~6e-6
// after three steps on these inputs). Deterministic builds (SHARDREC_DETERMINISTIC_FP=ON, the
// default) do not contract and are checked bit for bit by simt_test.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "impl/embedding/kernels/kernels.h"
#include "tests/impl/embedding/kernels/simt_fixtures.h"
#include "tests/impl/embedding/kernels/simt_runner.h"

namespace shardrec::embedding::kernels {
namespace {

constexpr double kTolerance = 1e-6;

bool HostHasFma() {
#if defined(__x86_64__)
  return __builtin_cpu_supports("fma");
#else
  return true;
#endif
}

// Largest per-row relative difference of two [rows, cols] arrays.
double WorstRowError(const std::vector<float>& a, const std::vector<float>& b, int64_t cols) {
  double worst = 0;
  for (size_t r = 0; r * cols < a.size(); ++r) {
    double diff = 0, mag = 0;
    for (int64_t c = 0; c < cols; ++c) {
      diff = std::max(diff, std::fabs(double(a[r * cols + c]) - double(b[r * cols + c])));
      mag = std::max(mag, std::fabs(double(b[r * cols + c])));
    }
    if (mag > 0) worst = std::max(worst, diff / mag);
  }
  return worst;
}

TEST(SimtContracted, PooledLookupIsWithinTheStatedTolerance) {
  if (!HostHasFma()) GTEST_SKIP() << "this CPU has no FMA";
  double worst = 0;
  bool any_differs = false;
  for (int32_t cols : {8, 64, 128, 300}) {
    Table table(500, cols, cols, DType::kFloat32, 3);
    Bags bags = MakeBags(400, 20, 500, 5, 10, 100);
    std::vector<float> twin(bags.num_bags() * cols), simt_out(twin.size());
    LookupJob job{table.View(), bags.Run(true), twin.data(), cols};
    ASSERT_TRUE(Lookup(ExecContext(), std::span<const LookupJob>(&job, 1)).ok());
    job.out = simt_out.data();
    simt_body::RunLookup(std::span<const LookupJob>(&job, 1), nullptr);
    worst = std::max(worst, WorstRowError(simt_out, twin, cols));
    any_differs |= simt_out != twin;
  }
  EXPECT_LE(worst, kTolerance);
  // Contraction really happened (else this test checks nothing the bit-exact one does not). In
  // the clang sanitizer build the optimiser may leave this loop uncontracted (it did once the
  // coverage instrumentation was gone), so only the tolerance holds there; the release builds
  // assert both.
  RecordProperty("lookup_contracted", any_differs ? "yes" : "no");
#if !SHARDREC_SANITIZED_BUILD
  EXPECT_TRUE(any_differs);
#endif
  RecordProperty("worst_relative_error", std::to_string(worst));
  std::printf("pooled lookup, contracted vs twin: worst row error %.3g\n", worst);
}

TEST(SimtContracted, FusedUpdatesAreWithinTheStatedTolerance) {
  if (!HostHasFma()) GTEST_SKIP() << "this CPU has no FMA";
  for (int type = 0; type < optim::kNumOptimizerTypes; ++type) {
    const int32_t cols = 64;
    optim::OptimizerConfig cfg;
    cfg.type = static_cast<optim::OptimizerType>(type);
    cfg.learning_rate = 0.01f;
    cfg.weight_decay = 0.01f;
    cfg.weight_decay_mode = optim::WeightDecayMode::kL2;
    Table t(300, cols, cols, DType::kFloat32, 11);
    std::vector<float> w_twin = t.f32, w_simt = t.f32;
    std::vector<std::vector<float>> s_twin, s_simt;
    for (auto& s : optim::StateSpecs(cfg.type))
      s_twin.emplace_back(s.row_wise ? 300 : 300 * cols, 0.0f);
    s_simt = s_twin;
    auto params = [&](std::vector<float>& w, std::vector<std::vector<float>>& st) {
      optim::ShardParams p;
      p.weights = w.data();
      p.rows = 300;
      p.cols = cols;
      p.stride = cols;
      for (auto& s : st) p.states.push_back(s.data());
      return p;
    };
    Bags bags = MakeBags(500, 20, 300, 17 + type, 25, 200);
    std::vector<float> grads(500 * cols);
    for (size_t i = 0; i < grads.size(); ++i) grads[i] = std::sin(0.37f * static_cast<float>(i));
    BagRun run = bags.Run(true);
    optim::ShardParams pt = params(w_twin, s_twin), ps = params(w_simt, s_simt);
    for (int64_t step = 1; step <= 1; ++step) {
      const int ns = optim::NumRowStats(cfg.type);
      std::vector<uint8_t> ws(BackwardWorkspaceBytes(ExecContext(), run.num_ids(), cols, ns));
      int64_t nu = 0;
      std::span<const BagRun> runs(&run, 1);
      ASSERT_TRUE(GroupRows(ExecContext(), runs, ws.data(), ws.size(), &nu).ok());
      ASSERT_TRUE(FusedBackward(ExecContext(), runs, grads.data(), cols, 0.5f, cfg, step, cols, pt,
                                ws.data())
                      .ok());
      simt_body::RowSink sink;
      sink.fused = true;
      sink.params = optim::MakeRowParams(cfg, step, cols, ps);
      simt_body::SimtBackward sb;
      sb.Run(runs, 300, grads.data(), cols, cols, 0.5f, sink);
    }
    const double worst = WorstRowError(w_simt, w_twin, cols);
    EXPECT_LE(worst, kTolerance) << optim::OptimizerName(cfg.type);
    std::printf("%s, contracted vs twin, one step: worst row error %.3g\n",
                optim::OptimizerName(cfg.type), worst);
  }
}

}  // namespace
}  // namespace shardrec::embedding::kernels
