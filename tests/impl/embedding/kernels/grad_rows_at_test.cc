// Gradient rows read where they lie (BagRun::grads_at): the sample side's output gradient read in
// place gives the bits of its packed copy in the io buffer, for the fused backward, the plain
// aggregation and the column shards' aggregation with row statistics, at every instruction-set
// level the host has.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "impl/core/thread_pool.h"
#include "impl/embedding/kernels/kernels.h"
#include "tests/impl/embedding/kernels/kernels_test_util.h"

namespace shardrec::embedding::kernels {
namespace {

using namespace test_util;  // NOLINT: the shared helpers of kernels_test_util.h

std::vector<CpuLevel> Levels() {
  std::vector<CpuLevel> levels = {CpuLevel::kBaseline};
  if (HostCpuLevel() >= CpuLevel::kAvx2) levels.push_back(CpuLevel::kAvx2);
  if (HostCpuLevel() >= CpuLevel::kAvx512) levels.push_back(CpuLevel::kAvx512);
  return levels;
}

// A caller's output gradient of `samples` rows of `stride` floats, and the runs of one shard
// whose bags read its columns [col, col + cols) of the rows `index` names, as the packing would
// have copied them (packed: bag b of run j at io_offset + b * cols of `io`) or in place.
struct Case {
  int32_t cols = 0;
  int64_t stride = 0;
  int64_t col = 0;
  std::vector<float> grad;  // the caller's gradient
  Batch a, b;               // pooled runs (b also weighted when asked)
  std::vector<int64_t> seq;
  std::vector<int64_t> index_a, index_b, index_seq;  // per bag: its gradient row in `grad`
  std::vector<float> io;                             // the packed copy

  Case(int32_t cols_in, int64_t rows, uint32_t seed) : cols(cols_in) {
    stride = cols + 11;
    col = 5;
    const int64_t samples = 700;
    grad.resize(static_cast<size_t>(samples * stride));
    for (size_t i = 0; i < grad.size(); ++i)
      grad[i] = std::sin(0.013f * static_cast<float>(i) + static_cast<float>(seed)) * 2.0f;
    a = MakeBatch(400, 6, rows, seed);  // bags 0..6 ids, empty ones among them
    b = MakeBatch(150, 3, 30, seed + 1);
    for (size_t i = 0; i < a.rows.size(); i += 4) a.rows[i] = 7;  // a hot row, over the runs
    b.rows[0] = 7;
    seq.resize(120);
    for (size_t i = 0; i < seq.size(); ++i) seq[i] = static_cast<int64_t>((i * 13) % 50);
    // Run a: samples read in order with every third one skipped; run b: bags that read one
    // sample repeatedly (a request's candidates read a user bag), out of order; the sequence
    // run: descending rows.
    for (int64_t k = 0; k < 400; ++k) index_a.push_back(k + k / 2);
    for (int64_t k = 0; k < 150; ++k) index_b.push_back(600 - 4 * (k / 3));
    for (int64_t k = 0; k < 120; ++k) index_seq.push_back(690 - 5 * k);
    // The packed copy: run a's rows at io row 0, b's at 400, the sequence's at 550.
    io.assign(static_cast<size_t>(670) * cols, 0.0f);
    auto pack = [&](const std::vector<int64_t>& index, int64_t at) {
      for (size_t k = 0; k < index.size(); ++k)
        std::memcpy(io.data() + (at + static_cast<int64_t>(k)) * cols,
                    grad.data() + index[k] * stride + col, sizeof(float) * cols);
    };
    pack(index_a, 0);
    pack(index_b, 400);
    pack(index_seq, 550);
  }

  // The io buffer of a call whose runs `in_place` read in place: their rows there are NaN, so a
  // kernel that read them from the io buffer would train NaN into the rows.
  std::vector<float> Io(unsigned in_place) const {
    std::vector<float> out = io;
    const int64_t begin[] = {0, 400, 550, 670};
    for (int j = 0; j < 3; ++j)
      if ((in_place >> j) & 1u)
        std::fill(out.begin() + begin[j] * cols, out.begin() + begin[j + 1] * cols, std::nanf(""));
    return out;
  }

  // `in_place`: which runs read `grad` in place (bit j for run j), the others the packed copy.
  std::vector<BagRun> Runs(bool weighted, unsigned in_place) const {
    std::vector<BagRun> runs = {BagRun{a.offsets.data(), 400, a.rows.data(), nullptr, 0},
                                BagRun{b.offsets.data(), 150, b.rows.data(),
                                       weighted ? b.weights.data() : nullptr, 400 * int64_t{cols}},
                                BagRun{nullptr, static_cast<int64_t>(seq.size()), seq.data(),
                                       nullptr, 550 * int64_t{cols}}};
    const std::vector<int64_t>* index[] = {&index_a, &index_b, &index_seq};
    for (size_t j = 0; j < runs.size(); ++j)
      if ((in_place >> j) & 1u) runs[j].grads_at = {grad.data() + col, index[j]->data(), stride};
    return runs;
  }
};

int64_t Ids(const std::vector<BagRun>& runs) {
  int64_t n = 0;
  for (const BagRun& r : runs) n += r.num_ids();
  return n;
}

// The fused backward of row-wise Adagrad (a row-wise state) and Adam (element-wise states), at
// scale 1 (a row of one id then reads its gradient where it lies) and 0.5, over three steps.
TEST(EmbeddingKernelsGradRowsAt, FusedBackwardReadsInPlaceAsFromThePackedCopy) {
  const int64_t R = 300;
  for (int32_t cols : {13, 32}) {
    const Case c(cols, R, 3 + static_cast<uint32_t>(cols));
    for (CpuLevel level : Levels())
      for (int threads : {1, 2})
        for (auto type : {optim::OptimizerType::kRowWiseAdagrad, optim::OptimizerType::kAdam})
          for (float scale : {1.0f, 0.5f})
            for (bool weighted : {false, true}) {
              SCOPED_TRACE(::testing::Message()
                           << "cols " << cols << " level " << CpuLevelName(level) << " threads "
                           << threads << " optimizer " << static_cast<int>(type) << " scale "
                           << scale << " weighted " << weighted);
              ThreadPool pool(threads);
              const ExecContext ctx = Ctx(&pool);
              optim::OptimizerConfig cfg;
              cfg.type = type;
              cfg.learning_rate = 0.05f;
              const bool row_wise = type == optim::OptimizerType::kRowWiseAdagrad;
              const size_t state =
                  row_wise ? static_cast<size_t>(R) : static_cast<size_t>(R) * cols;
              // in_place 0: every run packed (the reference); 7: every run in place; 5: mixed.
              std::vector<std::vector<float>> tables, m1s, m2s;
              for (unsigned in_place : {0u, 7u, 5u}) {
                std::vector<float> t = MakeTable(R, cols), m1(state, 0.0f), m2(state, 0.0f);
                const std::vector<BagRun> runs = c.Runs(weighted, in_place);
                const std::vector<float> io = c.Io(in_place);
                for (int64_t step = 1; step <= 3; ++step) {
                  optim::ShardParams sp;
                  sp.weights = t.data();
                  sp.rows = R;
                  sp.cols = cols;
                  sp.stride = cols;
                  sp.states = {m1.data(), m2.data()};
                  std::vector<uint8_t> ws(BackwardWorkspaceBytes(ctx, Ids(runs), cols, 1));
                  int64_t num_unique = 0;
                  ASSERT_TRUE(GroupRows(ctx, runs, ws.data(), ws.size(), &num_unique).ok());
                  ASSERT_TRUE(FusedBackward(ctx, runs, io.data(), cols, scale, cfg, step, cols, sp,
                                            ws.data(), level)
                                  .ok());
                }
                tables.push_back(t);
                m1s.push_back(m1);
                m2s.push_back(m2);
              }
              EXPECT_NE(0, std::memcmp(tables[0].data(), MakeTable(R, cols).data(),
                                       tables[0].size() * 4));  // the steps trained
              for (size_t v = 1; v < tables.size(); ++v) {
                EXPECT_EQ(0, std::memcmp(tables[0].data(), tables[v].data(), tables[0].size() * 4))
                    << v;
                EXPECT_EQ(0, std::memcmp(m1s[0].data(), m1s[v].data(), m1s[0].size() * 4)) << v;
                EXPECT_EQ(0, std::memcmp(m2s[0].data(), m2s[v].data(), m2s[0].size() * 4)) << v;
              }
            }
  }
}

// The aggregation alone (rows updated later) and with a column shard's row statistics read the
// same rows in place, hot rows (summed apart in chunks) included.
TEST(EmbeddingKernelsGradRowsAt, AggregationReadsInPlaceAsFromThePackedCopy) {
  const int64_t R = 300;
  for (int32_t cols : {13, 32})
    for (CpuLevel level : Levels())
      for (bool weighted : {false, true}) {
        SCOPED_TRACE(::testing::Message() << "cols " << cols << " level " << CpuLevelName(level)
                                          << " weighted " << weighted);
        Case c(cols, R, 9);
        // A row hotter than one segment chunk.
        for (size_t i = 0; i < c.a.rows.size(); i += 2) c.a.rows[i] = 11;
        std::vector<std::vector<int64_t>> uniq(2);
        std::vector<std::vector<float>> sums(2), stats(2), tables(2);
        for (unsigned v = 0; v < 2; ++v) {
          const std::vector<BagRun> runs = c.Runs(weighted, v == 0 ? 0u : 6u);
          const std::vector<float> io = c.Io(v == 0 ? 0u : 6u);
          const ExecContext ctx = Ctx();
          std::vector<uint8_t> ws(BackwardWorkspaceBytes(ctx, Ids(runs), cols, 1));
          int64_t num_unique = 0;
          ASSERT_TRUE(GroupRows(ctx, runs, ws.data(), ws.size(), &num_unique).ok());
          uniq[v].assign(static_cast<size_t>(num_unique), -1);
          sums[v].assign(static_cast<size_t>(num_unique) * cols, 0.0f);
          ASSERT_TRUE(AggregateGrads(ctx, runs, io.data(), cols, cols, 0.5f, ws.data(),
                                     uniq[v].data(), sums[v].data(), level)
                          .ok());
          optim::OptimizerConfig cfg;
          cfg.type = optim::OptimizerType::kRowWiseAdagrad;
          tables[v] = MakeTable(R, cols);
          std::vector<float> m1(R, 0.0f), row_grads(sums[v].size());
          optim::ShardParams sp;
          sp.weights = tables[v].data();
          sp.rows = R;
          sp.cols = cols;
          sp.stride = cols;
          sp.states = {m1.data()};
          stats[v].assign(static_cast<size_t>(num_unique), 0.0f);
          std::vector<int64_t> rows(static_cast<size_t>(num_unique));
          ASSERT_TRUE(AggregateWithRowStats(ctx, runs, io.data(), cols, 0.5f, cfg, 1, sp, ws.data(),
                                            rows.data(), row_grads.data(), stats[v].data(), level)
                          .ok());
          EXPECT_EQ(rows, uniq[v]);
          EXPECT_EQ(0, std::memcmp(row_grads.data(), sums[v].data(), sums[v].size() * 4));
        }
        EXPECT_EQ(uniq[0], uniq[1]);
        EXPECT_EQ(0, std::memcmp(sums[0].data(), sums[1].data(), sums[0].size() * 4));
        EXPECT_EQ(0, std::memcmp(stats[0].data(), stats[1].data(), stats[0].size() * 4));
        bool nonzero = false;
        for (float x : sums[0]) nonzero |= x != 0.0f;
        EXPECT_TRUE(nonzero);
      }
}

}  // namespace
}  // namespace shardrec::embedding::kernels
