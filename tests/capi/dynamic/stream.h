// A world-independent stream of training batches over a DynScenario's pools for the dynamic
// checkpoint and delta tests: global batches split over the ranks, per-sample gradients, and a
// probe batch whose bags each hold one id, so its output is every pool id's row.
#pragma once

#include <cstdint>
#include <vector>

#include "tests/capi/dynamic/test_util.h"

namespace shardrec::testing {

inline constexpr int64_t kGlobalBatch = 8;  // samples per step, split over the ranks

// Per step, kGlobalBatch samples of 3 features (f0 reads t0, f1 and f2 read t1), and per sample
// an output gradient.
struct Stream {
  std::vector<RefBatch> batches;          // per step, all samples
  std::vector<std::vector<float>> grads;  // per step, [kGlobalBatch, dim]
  RefBatch probe;                         // sample i: f0 = pool0[i], f1 = pool1[i], f2 empty
};

// `steps` steps of skewed ids from s.pools (so counts and recency differ), gradients in [-1, 1].
Stream MakeStream(const DynScenario& s, int64_t dim, int32_t steps);

// Rank r's part of a global batch: samples [r * n / world, (r + 1) * n / world).
RefBatch Slice(const RefBatch& b, int32_t world, int32_t r);

// Rank r's collection of `plan` on an in-process group of `world` ranks, with s's seed (gtest
// failures when creation fails, and *out null).
void MakeStreamCollection(const DynScenario& s, const shardrec_plan_t* plan, int32_t world,
                          int32_t r, CollPtr* out);

// Rank r's forward of its slice of `global` (output `dim` columns); when `global_out` is not
// null, its rows are written to their place in the global output [global.batch_size, dim].
void ForwardSlice(shardrec_embedding_t* c, const RefBatch& global, int32_t world, int32_t r,
                  int64_t dim, float* global_out);

// Rank r's backward of its samples of a step's `grads` ([kGlobalBatch, dim]) times `scale`.
void BackwardSlice(shardrec_embedding_t* c, const std::vector<float>& grads, int32_t world,
                   int32_t r, int64_t dim, float scale = 1.0f);

}  // namespace shardrec::testing
