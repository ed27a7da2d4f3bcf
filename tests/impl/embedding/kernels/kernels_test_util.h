// Shared helpers of the host kernel tests (kernels_test.cc, kernels_isa_test.cc): batches of
// bags with duplicate ids and empty bags, deterministic tables, and one-call wrappers of the
// lookup, the gradient aggregation and the fused backward.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "impl/core/thread_pool.h"
#include "impl/embedding/kernels/kernels.h"

namespace shardrec::embedding::kernels::test_util {

struct Batch {
  std::vector<int64_t> offsets{0};
  std::vector<int64_t> rows;
  std::vector<float> weights;
  BagRun View(bool weighted) const {
    return BagRun{offsets.data(), static_cast<int64_t>(offsets.size()) - 1, rows.data(),
                  weighted ? weights.data() : nullptr, 0};
  }
};

inline ExecContext Ctx(ThreadPool* pool = nullptr) { return ExecContext::Host(pool); }

inline void PooledLookup(const WeightsView& w, const BagRun& run, float* out, int64_t out_stride,
                         ThreadPool* pool) {
  LookupJob job{w, run, out, out_stride};
  ASSERT_TRUE(Lookup(Ctx(pool), std::span<const LookupJob>(&job, 1)).ok());
}

inline void SequenceLookup(const WeightsView& w, const int64_t* rows, const float* weights,
                           int64_t n, float* out, int64_t out_stride, ThreadPool* pool) {
  PooledLookup(w, BagRun{nullptr, n, rows, weights, 0}, out, out_stride, pool);
}

// GroupRows + AggregateGrads with a workspace of exactly the queried size.
inline void Aggregate(std::span<const BagRun> runs, const float* grads, int64_t stride,
                      int32_t cols, float scale, std::vector<int64_t>* uniq,
                      std::vector<float>* out, ThreadPool* pool = nullptr) {
  int64_t n = 0;
  for (const BagRun& r : runs) n += r.num_ids();
  std::vector<uint8_t> ws(BackwardWorkspaceBytes(Ctx(pool), n, cols, 0));
  int64_t num_unique = -1;
  ASSERT_TRUE(GroupRows(Ctx(pool), runs, ws.data(), ws.size(), &num_unique).ok());
  uniq->assign(static_cast<size_t>(num_unique), -1);
  out->assign(static_cast<size_t>(num_unique) * cols, 0.0f);
  ASSERT_TRUE(AggregateGrads(Ctx(pool), runs, grads, stride, cols, scale, ws.data(), uniq->data(),
                             out->data())
                  .ok());
}

inline void AggregatePooledGrads(const BagRun& run, const float* grads, int64_t stride,
                                 int32_t cols, float scale, std::vector<int64_t>* uniq,
                                 std::vector<float>* out, ThreadPool* pool) {
  Aggregate(std::span<const BagRun>(&run, 1), grads, stride, cols, scale, uniq, out, pool);
}

inline void Fused(const BagRun& run, const float* grads, int64_t stride, float scale,
                  const optim::OptimizerConfig& cfg, int64_t step, int32_t full_dim,
                  optim::ShardParams& shard, ThreadPool* pool, CpuLevel level = CpuLevel::kAuto) {
  const ExecContext ctx = Ctx(pool);
  const int ns = optim::NumRowStats(cfg.type);
  std::vector<uint8_t> ws(BackwardWorkspaceBytes(ctx, run.num_ids(), shard.cols, ns));
  int64_t num_unique = 0;
  std::span<const BagRun> runs(&run, 1);
  ASSERT_TRUE(GroupRows(ctx, runs, ws.data(), ws.size(), &num_unique).ok());
  ASSERT_TRUE(
      FusedBackward(ctx, runs, grads, stride, scale, cfg, step, full_dim, shard, ws.data(), level)
          .ok());
}

// Bag lengths 0..max_len (some empty), ids from a small range so duplicates are common, both
// within a bag and across bags.
inline Batch MakeBatch(int64_t bags, int max_len, int64_t num_rows, uint32_t seed) {
  std::mt19937 rng(seed);
  Batch b;
  for (int64_t i = 0; i < bags; ++i) {
    int len = static_cast<int>(rng() % (max_len + 1));
    if (i % 7 == 3) len = 0;
    for (int k = 0; k < len; ++k) {
      b.rows.push_back(static_cast<int64_t>(rng() % num_rows));
      b.weights.push_back(0.25f + static_cast<float>(rng() % 100) / 50.0f);
    }
    b.offsets.push_back(static_cast<int64_t>(b.rows.size()));
  }
  return b;
}

inline std::vector<float> MakeTable(int64_t rows, int64_t stride) {
  std::vector<float> t(rows * stride);
  for (size_t i = 0; i < t.size(); ++i) t[i] = std::sin(0.37f * static_cast<float>(i)) * 0.5f;
  return t;
}

}  // namespace shardrec::embedding::kernels::test_util
