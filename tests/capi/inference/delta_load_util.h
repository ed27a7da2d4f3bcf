// Helpers of the tests of deltas taken after a checkpoint load (inference_delta_load_test.cc,
// inference_full_delta_test.cc): a one-table world-1 collection small enough to evict by hand,
// its training and evaluation forwards over single-id bags, and a delta as vectors.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "shardrec/dynamic.h"
#include "shardrec/inference.h"
#include "tests/capi/embedding/embedding_test_util.h"

namespace shardrec::testing {

inline constexpr int32_t kTinyDim = 4;

// The plan of dynamic table "t" (LRU, `capacity` slots, dim kTinyDim, SGD) read by feature "f"
// at world 1, and a collection of it (null, with a test failure, when either fails).
struct Tiny {
  PlanPtr plan;
  CollPtr coll;
};
Tiny MakeTiny(int64_t capacity);

// One training step: a bag per id of `ids` (one id each), forward, and a backward of gradient
// 0.25 everywhere, which moves every row the forward read.
void TrainIds(shardrec_embedding_t* c, const std::vector<int64_t>& ids);

// The rows of `ids` as an evaluation forward reads them (zeros for an id without a row),
// [ids.size(), kTinyDim]; training mode is restored.
std::vector<float> EvalRows(shardrec_embedding_t* c, const std::vector<int64_t>& ids);

// A batch of one single-id bag per id of `ids`, for a serving lookup of one feature.
RefBatch SingleIdBags(const std::vector<int64_t>& ids);

struct DeltaVectors {
  std::vector<int64_t> ids;
  std::vector<float> rows;
  std::vector<int64_t> tombstones;
};

// shardrec_embedding_dynamic_delta of table `table` (`dim` wide), sized then filled.
DeltaVectors TakeDelta(shardrec_embedding_t* c, const char* table, int64_t dim);

// shardrec_inference_apply_delta of `d` to `table`.
shardrec_status_t ApplyMerged(shardrec_inference_t* inf, const char* table, const DeltaVectors& d);

}  // namespace shardrec::testing
