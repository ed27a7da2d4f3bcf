// Host embedding kernels against naive loops: weighted and unweighted bags, empty bags, duplicate
// ids, fp16/bf16 weights, runs split across an io buffer, the fused backward, the workspace
// contract, and bit-identical results for 1, 2 and 4 threads. Every instruction-set level against
// the others: kernels_isa_test.cc.
#include "impl/embedding/kernels/kernels.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <vector>

#include "impl/core/half.h"
#include "impl/core/thread_pool.h"
#include "tests/impl/embedding/kernels/kernels_test_util.h"

namespace shardrec::embedding::kernels {
namespace {

using namespace test_util;  // NOLINT: the shared helpers of kernels_test_util.h

TEST(EmbeddingKernels, PooledLookupMatchesNaiveSum) {
  const int64_t R = 50, stride = 20;
  const int32_t D = 17;  // not a multiple of the vector width, and stride > cols
  auto table = MakeTable(R, stride);
  Batch batch = MakeBatch(40, 9, R, 1);
  WeightsView w{table.data(), DType::kFloat32, R, D, stride};
  for (bool weighted : {false, true}) {
    const int64_t out_stride = D + 3;
    std::vector<float> out(40 * out_stride, -7.0f);
    PooledLookup(w, batch.View(weighted), out.data(), out_stride, nullptr);
    for (int64_t b = 0; b < 40; ++b) {
      for (int32_t c = 0; c < D; ++c) {
        float want = 0.0f;
        for (int64_t i = batch.offsets[b]; i < batch.offsets[b + 1]; ++i)
          want += (weighted ? batch.weights[i] : 1.0f) * table[batch.rows[i] * stride + c];
        EXPECT_FLOAT_EQ(out[b * out_stride + c], want) << b << "," << c;
      }
      EXPECT_EQ(out[b * out_stride + D], -7.0f);  // padding past cols untouched
    }
  }
}

TEST(EmbeddingKernels, PooledLookupReadsHalfAndBFloat16) {
  const int64_t R = 30;
  const int32_t D = 8;
  auto table = MakeTable(R, D);
  Batch batch = MakeBatch(12, 6, R, 2);
  for (DType dt : {DType::kFloat16, DType::kBFloat16}) {
    std::vector<uint16_t> low(table.size());
    for (size_t i = 0; i < low.size(); ++i)
      low[i] = dt == DType::kFloat16 ? FloatToHalf(table[i]) : FloatToBFloat16(table[i]);
    std::vector<float> out(12 * D);
    PooledLookup(WeightsView{low.data(), dt, R, D, D}, batch.View(true), out.data(), D, nullptr);
    for (int64_t b = 0; b < 12; ++b)
      for (int32_t c = 0; c < D; ++c) {
        float want = 0.0f;
        for (int64_t i = batch.offsets[b]; i < batch.offsets[b + 1]; ++i) {
          uint16_t v = low[batch.rows[i] * D + c];
          want += batch.weights[i] * (dt == DType::kFloat16 ? HalfToFloat(v) : BFloat16ToFloat(v));
        }
        EXPECT_FLOAT_EQ(out[b * D + c], want);
      }
  }
}

TEST(EmbeddingKernels, SequenceLookupCopiesAndScalesRows) {
  const int64_t R = 10;
  const int32_t D = 5;
  auto table = MakeTable(R, D);
  std::vector<int64_t> rows = {3, 3, 0, 9};
  std::vector<float> wts = {1.0f, -2.0f, 0.5f, 3.0f};
  std::vector<float> out(4 * 6, 0.0f);
  SequenceLookup(WeightsView{table.data(), DType::kFloat32, R, D, D}, rows.data(), wts.data(), 4,
                 out.data(), 6, nullptr);
  for (int i = 0; i < 4; ++i)
    for (int c = 0; c < D; ++c) EXPECT_FLOAT_EQ(out[i * 6 + c], wts[i] * table[rows[i] * D + c]);
  SequenceLookup(WeightsView{table.data(), DType::kFloat32, R, D, D}, rows.data(), nullptr, 4,
                 out.data(), 6, nullptr);
  for (int i = 0; i < 4; ++i)
    for (int c = 0; c < D; ++c) EXPECT_EQ(out[i * 6 + c], table[rows[i] * D + c]);
}

// Naive reference: per row, contributions summed in id order.
std::map<int64_t, std::vector<float>> NaivePooledGrads(const Batch& b, bool weighted,
                                                       const std::vector<float>& g, int64_t stride,
                                                       int32_t D, float scale) {
  std::map<int64_t, std::vector<float>> out;
  for (size_t bag = 0; bag + 1 < b.offsets.size(); ++bag)
    for (int64_t i = b.offsets[bag]; i < b.offsets[bag + 1]; ++i) {
      auto [it, fresh] = out.try_emplace(b.rows[i], std::vector<float>(D, 0.0f));
      float f = weighted ? scale * b.weights[i] : scale;
      for (int32_t c = 0; c < D; ++c) {
        float v = f * g[bag * stride + c];
        it->second[c] = fresh ? v : it->second[c] + v;
      }
      fresh = false;
    }
  return out;
}

TEST(EmbeddingKernels, AggregatePooledGradsSumsDuplicatesPerRow) {
  const int32_t D = 6;
  const int64_t stride = 7;
  Batch batch = MakeBatch(60, 8, 25, 3);
  std::vector<float> g(60 * stride);
  for (size_t i = 0; i < g.size(); ++i) g[i] = std::cos(0.1f * static_cast<float>(i));
  for (bool weighted : {false, true}) {
    std::vector<int64_t> uniq;
    std::vector<float> grads;
    AggregatePooledGrads(batch.View(weighted), g.data(), stride, D, 0.5f, &uniq, &grads, nullptr);
    auto want = NaivePooledGrads(batch, weighted, g, stride, D, 0.5f);
    ASSERT_EQ(uniq.size(), want.size());
    size_t u = 0;
    for (auto& [row, vec] : want) {
      EXPECT_EQ(uniq[u], row);
      for (int32_t c = 0; c < D; ++c) EXPECT_FLOAT_EQ(grads[u * D + c], vec[c]);
      ++u;
    }
  }
}

TEST(EmbeddingKernels, AggregateSequenceGradsSumsDuplicatesPerRow) {
  const int32_t D = 3;
  std::vector<int64_t> rows = {4, 1, 4, 4, 0};
  std::vector<float> wts = {1, 2, 3, 4, 5};
  std::vector<float> g(5 * D);
  for (size_t i = 0; i < g.size(); ++i) g[i] = static_cast<float>(i) * 0.5f;
  std::vector<int64_t> uniq;
  std::vector<float> grads;
  BagRun run{nullptr, 5, rows.data(), wts.data(), 0};
  AggregatePooledGrads(run, g.data(), D, D, 2.0f, &uniq, &grads, nullptr);
  ASSERT_EQ(uniq, (std::vector<int64_t>{0, 1, 4}));
  for (int c = 0; c < D; ++c) {
    EXPECT_FLOAT_EQ(grads[0 * D + c], 2.0f * 5 * g[4 * D + c]);
    EXPECT_FLOAT_EQ(grads[1 * D + c], 2.0f * 2 * g[1 * D + c]);
    EXPECT_FLOAT_EQ(grads[2 * D + c],
                    2.0f * 1 * g[0 * D + c] + 2.0f * 3 * g[2 * D + c] + 2.0f * 4 * g[3 * D + c]);
  }
}

TEST(EmbeddingKernels, EmptyInputGivesNoRows) {
  std::vector<int64_t> offsets = {0, 0, 0};
  BagRun bags{offsets.data(), 2, nullptr, nullptr, 0};
  std::vector<float> g(2 * 4, 1.0f), out(2 * 4, 5.0f);
  std::vector<float> table(4, 1.0f);
  PooledLookup(WeightsView{table.data(), DType::kFloat32, 1, 4, 4}, bags, out.data(), 4, nullptr);
  for (float v : out) EXPECT_EQ(v, 0.0f);
  std::vector<int64_t> uniq = {9};
  std::vector<float> grads = {1.0f};
  AggregatePooledGrads(bags, g.data(), 4, 4, 1.0f, &uniq, &grads, nullptr);
  EXPECT_TRUE(uniq.empty());
  EXPECT_TRUE(grads.empty());
}

// Large enough that every kernel really splits the work (and the radix sort runs in parts).
TEST(EmbeddingKernels, ResultsAreBitIdenticalForOneTwoAndFourThreads) {
  const int64_t R = 300000;
  const int32_t D = 16;
  auto table = MakeTable(R, D);
  Batch batch = MakeBatch(20000, 12, R, 4);
  for (int i = 0; i < 3000; ++i) batch.rows[i * 7 % batch.rows.size()] = 12345;  // a hot row
  std::vector<float> g(20000 * D);
  for (size_t i = 0; i < g.size(); ++i) g[i] = std::sin(0.01f * static_cast<float>(i));
  std::vector<float> ref_out, ref_grads, ref_table;
  std::vector<int64_t> ref_uniq;
  for (int threads : {1, 2, 4}) {
    ThreadPool pool(threads);
    std::vector<float> out(20000 * D);
    PooledLookup(WeightsView{table.data(), DType::kFloat32, R, D, D}, batch.View(true), out.data(),
                 D, &pool);
    std::vector<int64_t> uniq;
    std::vector<float> grads;
    AggregatePooledGrads(batch.View(true), g.data(), D, D, 0.1f, &uniq, &grads, &pool);
    std::vector<float> t2 = table, mom(R, 0.0f);
    optim::OptimizerConfig cfg;
    cfg.type = optim::OptimizerType::kRowWiseAdagrad;
    optim::ShardParams sp;
    sp.weights = t2.data();
    sp.rows = R;
    sp.cols = D;
    sp.stride = D;
    sp.states = {mom.data()};
    Fused(batch.View(true), g.data(), D, 0.1f, cfg, 1, D, sp, &pool);
    if (threads == 1) {
      ref_out = out;
      ref_uniq = uniq;
      ref_grads = grads;
      ref_table = t2;
      continue;
    }
    EXPECT_EQ(0, std::memcmp(out.data(), ref_out.data(), out.size() * 4)) << threads;
    EXPECT_EQ(uniq, ref_uniq);
    ASSERT_EQ(grads.size(), ref_grads.size());
    EXPECT_EQ(0, std::memcmp(grads.data(), ref_grads.data(), grads.size() * 4)) << threads;
    EXPECT_EQ(0, std::memcmp(t2.data(), ref_table.data(), t2.size() * 4)) << threads;
  }
}

// The fused backward equals aggregate + PartialRowStats + Apply, and leaves other rows alone.
TEST(EmbeddingKernels, FusedBackwardEqualsAggregateThenApply) {
  const int64_t R = 40;
  const int32_t D = 9;
  Batch batch = MakeBatch(100, 6, R - 5, 5);  // rows R-5..R-1 never appear
  std::vector<float> g(100 * D);
  for (size_t i = 0; i < g.size(); ++i) g[i] = std::sin(0.3f * static_cast<float>(i));
  for (auto type : {optim::OptimizerType::kSgd, optim::OptimizerType::kAdagrad,
                    optim::OptimizerType::kRowWiseAdagrad, optim::OptimizerType::kAdam,
                    optim::OptimizerType::kPartialRowWiseAdam, optim::OptimizerType::kLamb}) {
    optim::OptimizerConfig cfg;
    cfg.type = type;
    cfg.weight_decay = 0.01f;
    cfg.weight_decay_mode = optim::WeightDecayMode::kL2;
    auto t_fused = MakeTable(R, D), t_ref = t_fused, t_init = t_fused;
    auto specs = optim::StateSpecs(type);
    std::vector<std::vector<float>> s_fused, s_ref;
    for (auto& s : specs) s_fused.emplace_back(s.row_wise ? R : R * D, 0.0f);
    s_ref = s_fused;
    optim::ShardParams pf, pr;
    pf.weights = t_fused.data();
    pr.weights = t_ref.data();
    for (auto* p : {&pf, &pr}) {
      p->rows = R;
      p->cols = D;
      p->stride = D;
    }
    for (size_t i = 0; i < specs.size(); ++i) {
      pf.states.push_back(s_fused[i].data());
      pr.states.push_back(s_ref[i].data());
    }
    for (int64_t step = 1; step <= 2; ++step) {
      Fused(batch.View(true), g.data(), D, 0.5f, cfg, step, D, pf, nullptr);
      std::vector<int64_t> uniq;
      std::vector<float> grads;
      AggregatePooledGrads(batch.View(true), g.data(), D, D, 0.5f, &uniq, &grads, nullptr);
      int ns = optim::NumRowStats(type);
      std::vector<float> stats(uniq.size() * std::max(ns, 1));
      optim::RowUpdate upd{uniq, grads.data()};
      if (ns > 0) optim::PartialRowStats(Ctx(), cfg, step, pr, upd, stats.data());
      optim::Apply(Ctx(), cfg, step, D, pr, upd, ns > 0 ? stats.data() : nullptr);
    }
    EXPECT_EQ(t_fused, t_ref) << int(type);
    EXPECT_EQ(s_fused, s_ref) << int(type);
    for (int64_t r = R - 5; r < R; ++r)
      for (int32_t c = 0; c < D; ++c) EXPECT_EQ(t_fused[r * D + c], t_init[r * D + c]);
  }
}

// Row-wise Adagrad's state kept in each weight row's own cache lines (ShardParams::
// row_state_stride, the state in a column past cols) updates exactly like a dense state array,
// fused and through Apply, over three steps with 1 and 2 threads.
TEST(EmbeddingKernels, RowStateInTheWeightRowEqualsADenseArray) {
  const int64_t R = 40;
  const int32_t D = 9;
  const int64_t S = 16;  // stride: columns D..S-1 are padding, the state sits in column D
  Batch batch = MakeBatch(100, 6, R, 8);
  std::vector<float> g(100 * D);
  for (size_t i = 0; i < g.size(); ++i) g[i] = std::cos(0.21f * static_cast<float>(i));
  optim::OptimizerConfig cfg;
  cfg.type = optim::OptimizerType::kRowWiseAdagrad;
  ThreadPool pool(2);
  for (ThreadPool* tp : {static_cast<ThreadPool*>(nullptr), &pool}) {
    for (bool fused : {true, false}) {
      auto dense_w = MakeTable(R, D);
      std::vector<float> dense_state(R, 0.0f);
      std::vector<float> in_row(R * S, -7.0f);
      for (int64_t r = 0; r < R; ++r) {
        std::copy(dense_w.begin() + r * D, dense_w.begin() + (r + 1) * D, in_row.begin() + r * S);
        in_row[r * S + D] = 0.0f;
      }
      optim::ShardParams pd, pi;
      pd.weights = dense_w.data();
      pd.stride = D;
      pd.states = {dense_state.data()};
      pi.weights = in_row.data();
      pi.stride = S;
      pi.states = {in_row.data() + D};
      pi.row_state_stride = S;
      for (auto* p : {&pd, &pi}) {
        p->rows = R;
        p->cols = D;
      }
      ASSERT_TRUE(optim::ValidateShard(cfg, pi).ok());
      for (int64_t step = 1; step <= 3; ++step) {
        for (auto* p : {&pd, &pi}) {
          if (fused) {
            Fused(batch.View(false), g.data(), D, 0.5f, cfg, step, D, *p, tp);
            continue;
          }
          std::vector<int64_t> uniq;
          std::vector<float> grads;
          AggregatePooledGrads(batch.View(false), g.data(), D, D, 0.5f, &uniq, &grads, tp);
          std::vector<float> stats(uniq.size());
          optim::RowUpdate upd{uniq, grads.data()};
          optim::PartialRowStats(Ctx(tp), cfg, step, *p, upd, stats.data());
          optim::Apply(Ctx(tp), cfg, step, D, *p, upd, stats.data());
        }
      }
      for (int64_t r = 0; r < R; ++r) {
        for (int32_t c = 0; c < D; ++c) ASSERT_EQ(in_row[r * S + c], dense_w[r * D + c]);
        ASSERT_EQ(in_row[r * S + D], dense_state[r]) << r;
        for (int64_t c = D + 1; c < S; ++c) ASSERT_EQ(in_row[r * S + c], -7.0f);  // untouched
      }
      EXPECT_GT(*std::max_element(dense_state.begin(), dense_state.end()), 0.0f);
    }
  }
  optim::ShardParams bad;
  bad.weights = g.data();
  bad.rows = 1;
  bad.cols = D;
  bad.stride = D;
  bad.states = {g.data()};
  bad.row_state_stride = 0;
  EXPECT_FALSE(optim::ValidateShard(cfg, bad).ok());
}

// Unweighted ids are grouped by bag, weighted ones by position (backward_workspace.h): the same
// ids with every weight 1 take the other path and must give the same bits, aggregated and fused,
// over several runs (one of them a sequence run), a hot row and 1 or 2 threads.
TEST(EmbeddingKernels, BagKeyedGroupingEqualsPositionKeyed) {
  const int64_t R = 5000;
  const int32_t D = 12;
  Batch a = MakeBatch(400, 9, R, 21), b = MakeBatch(300, 5, 40, 22);
  for (size_t i = 0; i < a.rows.size(); i += 3) a.rows[i] = 77;  // a hot row, in both runs
  b.rows[0] = 77;
  std::vector<int64_t> seq(250);
  for (size_t i = 0; i < seq.size(); ++i) seq[i] = static_cast<int64_t>((i * 37) % 60);
  const std::vector<float> ones(std::max(a.rows.size(), seq.size()), 1.0f);
  // Runs at io rows 1000 (a), 0 (b) and 400 (sequence ids, one row each).
  auto make_runs = [&](bool weighted) {
    const float* w = weighted ? ones.data() : nullptr;
    return std::vector<BagRun>{
        BagRun{a.offsets.data(), 400, a.rows.data(), w, 1000 * D},
        BagRun{b.offsets.data(), 300, b.rows.data(), w, 0},
        BagRun{nullptr, static_cast<int64_t>(seq.size()), seq.data(), w, 400 * D}};
  };
  std::vector<float> g(1400 * D);
  for (size_t i = 0; i < g.size(); ++i) g[i] = std::sin(0.07f * static_cast<float>(i)) * 3.0f;
  for (int threads : {1, 2}) {
    ThreadPool pool(threads);
    std::vector<int64_t> u_bag, u_pos;
    std::vector<float> a_bag, a_pos;
    const auto by_bag = make_runs(false), by_pos = make_runs(true);
    Aggregate(by_bag, g.data(), D, D, 0.5f, &u_bag, &a_bag, &pool);
    Aggregate(by_pos, g.data(), D, D, 0.5f, &u_pos, &a_pos, &pool);
    EXPECT_EQ(u_bag, u_pos);
    ASSERT_EQ(a_bag.size(), a_pos.size());
    EXPECT_EQ(0, std::memcmp(a_bag.data(), a_pos.data(), a_bag.size() * 4)) << threads;
    optim::OptimizerConfig cfg;
    cfg.type = optim::OptimizerType::kRowWiseAdagrad;
    std::vector<float> t_bag = MakeTable(R, D), t_pos = t_bag, s_bag(R, 0.0f), s_pos(R, 0.0f);
    for (int64_t step = 1; step <= 2; ++step) {
      for (bool weighted : {false, true}) {
        const auto& runs = weighted ? by_pos : by_bag;
        optim::ShardParams sp;
        sp.weights = weighted ? t_pos.data() : t_bag.data();
        sp.rows = R;
        sp.cols = D;
        sp.stride = D;
        sp.states = {weighted ? s_pos.data() : s_bag.data()};
        int64_t n = 0;
        for (const BagRun& r : runs) n += r.num_ids();
        const ExecContext ctx = Ctx(&pool);
        std::vector<uint8_t> ws(BackwardWorkspaceBytes(ctx, n, D, 1));
        int64_t num_unique = 0;
        ASSERT_TRUE(GroupRows(ctx, runs, ws.data(), ws.size(), &num_unique).ok());
        ASSERT_TRUE(FusedBackward(ctx, runs, g.data(), D, 0.5f, cfg, step, D, sp, ws.data()).ok());
      }
    }
    EXPECT_EQ(0, std::memcmp(t_bag.data(), t_pos.data(), t_bag.size() * 4)) << threads;
    EXPECT_EQ(0, std::memcmp(s_bag.data(), s_pos.data(), s_bag.size() * 4)) << threads;
  }
}

// Rows too wide to share a 64-bit key with a bag or position index take the stable-sort path:
// the same grouping and sums as small rows, weighted and unweighted.
TEST(EmbeddingKernels, RowsNear2To63GroupLikeSmallRows) {
  const int32_t D = 5;
  Batch small = MakeBatch(60, 6, 20, 31);
  Batch wide = small;
  const int64_t big = int64_t{1} << 62;
  for (int64_t& r : wide.rows) r += big;
  std::vector<float> g(60 * D);
  for (size_t i = 0; i < g.size(); ++i) g[i] = std::cos(0.11f * static_cast<float>(i));
  for (bool weighted : {false, true}) {
    std::vector<int64_t> u_small, u_wide;
    std::vector<float> a_small, a_wide;
    AggregatePooledGrads(small.View(weighted), g.data(), D, D, 0.5f, &u_small, &a_small, nullptr);
    AggregatePooledGrads(wide.View(weighted), g.data(), D, D, 0.5f, &u_wide, &a_wide, nullptr);
    ASSERT_EQ(u_small.size(), u_wide.size());
    for (size_t i = 0; i < u_small.size(); ++i) EXPECT_EQ(u_wide[i], u_small[i] + big);
    EXPECT_EQ(a_small, a_wide) << weighted;
  }
}

// Rows whose low and high radix digits are all equal (those digits are skipped) and whose middle
// digits vary (sorted, recounted per part after the first when the sort runs in parts on 2 and 4
// threads) group as the dense rows they are made from do on one thread (one part).
TEST(EmbeddingKernels, RowsSharingRadixDigitsGroupLikeDenseRows) {
  const int32_t D = 4;
  const int64_t R = 3000;  // 12 bits: the varying part spans two 11-bit digits
  Batch dense = MakeBatch(10000, 20, R, 41);
  ASSERT_GE(dense.rows.size(), 65536u);  // enough ids for the sort to run in parts
  Batch spread = dense;
  // Digit 0 of the row (bits 0-10) is 5 for all, digit 1 is 0, digits 2-3 hold r, digit 4 has
  // bit 45 set for all.
  auto spread_row = [](int64_t r) { return (r << 22) + 5 + (int64_t{1} << 45); };
  for (int64_t& r : spread.rows) r = spread_row(r);
  std::vector<float> g(10000 * D);
  for (size_t i = 0; i < g.size(); ++i) g[i] = std::cos(0.13f * static_cast<float>(i));
  for (bool weighted : {false, true}) {
    std::vector<int64_t> u_dense;
    std::vector<float> a_dense;
    AggregatePooledGrads(dense.View(weighted), g.data(), D, D, 0.5f, &u_dense, &a_dense, nullptr);
    for (int threads : {1, 2, 4}) {
      ThreadPool pool(threads);
      std::vector<int64_t> u_spread;
      std::vector<float> a_spread;
      AggregatePooledGrads(spread.View(weighted), g.data(), D, D, 0.5f, &u_spread, &a_spread,
                           &pool);
      ASSERT_EQ(u_dense.size(), u_spread.size());
      for (size_t i = 0; i < u_dense.size(); ++i)
        ASSERT_EQ(u_spread[i], spread_row(u_dense[i])) << threads << " " << i;
      ASSERT_EQ(a_dense.size(), a_spread.size());
      EXPECT_EQ(0, std::memcmp(a_dense.data(), a_spread.data(), a_dense.size() * 4))
          << threads << " " << weighted;
    }
  }
}

// A shard's ids arrive as several runs whose rows sit at different places of the io buffer: the
// result equals one contiguous run, bit for bit, forward and backward.
TEST(EmbeddingKernels, RunsSplitAcrossTheIoBufferEqualOneRun) {
  const int64_t R = 64;
  const int32_t D = 6;
  auto table = MakeTable(R, D);
  WeightsView w{table.data(), DType::kFloat32, R, D, D};
  Batch batch = MakeBatch(30, 7, R, 11);
  // Split the 30 bags into runs of 10, 5 and 15 bags placed at io offsets 200, 0 and 100 rows.
  const int64_t cut[] = {0, 10, 15, 30};
  const int64_t at[] = {200, 0, 100};
  std::vector<std::vector<int64_t>> offs(3);
  std::vector<BagRun> runs;
  for (int r = 0; r < 3; ++r) {
    for (int64_t b = cut[r]; b <= cut[r + 1]; ++b)
      offs[r].push_back(batch.offsets[b] - batch.offsets[cut[r]]);
    const int64_t first = batch.offsets[cut[r]];
    runs.push_back(BagRun{offs[r].data(), cut[r + 1] - cut[r], batch.rows.data() + first,
                          batch.weights.data() + first, at[r] * D});
  }
  std::vector<float> one(30 * D), split(300 * D, 0.0f);
  PooledLookup(w, batch.View(true), one.data(), D, nullptr);
  std::vector<LookupJob> jobs;
  for (const BagRun& r : runs) jobs.push_back(LookupJob{w, r, split.data(), D});
  ASSERT_TRUE(Lookup(Ctx(), jobs).ok());
  for (int r = 0; r < 3; ++r)
    for (int64_t b = cut[r]; b < cut[r + 1]; ++b)
      for (int32_t c = 0; c < D; ++c)
        ASSERT_EQ(split[(at[r] + b - cut[r]) * D + c], one[b * D + c]);
  // Backward: gradients laid out like the forward outputs.
  std::vector<float> g_one(30 * D), g_split(300 * D, 0.0f);
  for (size_t i = 0; i < g_one.size(); ++i) g_one[i] = std::cos(0.2f * static_cast<float>(i));
  for (int r = 0; r < 3; ++r)
    for (int64_t b = cut[r]; b < cut[r + 1]; ++b)
      for (int32_t c = 0; c < D; ++c) g_split[(at[r] + b - cut[r]) * D + c] = g_one[b * D + c];
  std::vector<int64_t> u1, u2;
  std::vector<float> a1, a2;
  AggregatePooledGrads(batch.View(true), g_one.data(), D, D, 0.5f, &u1, &a1, nullptr);
  Aggregate(runs, g_split.data(), D, D, 0.5f, &u2, &a2);
  EXPECT_EQ(u1, u2);
  EXPECT_EQ(a1, a2);
}

TEST(EmbeddingKernels, WorkspaceContractIsChecked) {
  Batch batch = MakeBatch(20, 5, 10, 12);
  BagRun run = batch.View(false);
  std::span<const BagRun> runs(&run, 1);
  const size_t need = BackwardWorkspaceBytes(Ctx(), run.num_ids(), 4, 0);
  std::vector<uint8_t> ws(need);
  int64_t num_unique = 0;
  Status s = GroupRows(Ctx(), runs, ws.data(), 16, &num_unique);
  EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.ToString();
  // Step 2 refuses a workspace grouped for other runs.
  ASSERT_TRUE(GroupRows(Ctx(), runs, ws.data(), ws.size(), &num_unique).ok());
  Batch other = MakeBatch(3, 2, 10, 13);
  BagRun orun = other.View(false);
  std::vector<int64_t> uniq(100);
  std::vector<float> grads(100 * 4), g(20 * 4, 1.0f);
  s = AggregateGrads(Ctx(), std::span<const BagRun>(&orun, 1), g.data(), 4, 4, 1.0f, ws.data(),
                     uniq.data(), grads.data());
  EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.ToString();
  // The fused step needs its tasks' gradient rows too: a grouping-only workspace (the size for
  // zero columns) is refused.
  std::vector<uint8_t> small(BackwardWorkspaceBytes(Ctx(), run.num_ids(), 0, 0));
  optim::OptimizerConfig cfg;
  std::vector<float> table(10 * 64, 0.0f);
  optim::ShardParams sp;
  sp.weights = table.data();
  sp.rows = 10;
  sp.cols = 64;
  sp.stride = 64;
  std::vector<float> g64(20 * 64, 1.0f);
  ASSERT_TRUE(GroupRows(Ctx(), runs, small.data(), small.size(), &num_unique).ok());
  s = FusedBackward(Ctx(), runs, g64.data(), 64, 1.0f, cfg, 1, 64, sp, small.data());
  EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.ToString();
}

TEST(EmbeddingKernels, HostKernelsRefuseACudaContext) {
  std::vector<float> table(4, 1.0f), out(4);
  std::vector<int64_t> rows = {0};
  LookupJob job{WeightsView{table.data(), DType::kFloat32, 1, 4, 4},
                BagRun{nullptr, 1, rows.data(), nullptr, 0}, out.data(), 4};
  EXPECT_EQ(Lookup(ExecContext::Cuda(0, nullptr), std::span<const LookupJob>(&job, 1)).code(),
            Code::kUnsupported);
  int64_t num_unique = 0;
  std::vector<uint8_t> ws(4096);
  EXPECT_EQ(GroupRows(ExecContext::Cuda(0, nullptr), std::span<const BagRun>(&job.run, 1),
                      ws.data(), ws.size(), &num_unique)
                .code(),
            Code::kUnsupported);
}

}  // namespace
}  // namespace shardrec::embedding::kernels
