// Helpers of the inference C API tests: a training run on one side (world, 1D or 2D, sharding
// type) that saves checkpoints and records the training forward's output on a fresh batch, a
// lookup through an inference handle, and the per-element error bound of each storage type.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "shardrec/inference.h"
#include "tests/capi/checkpoint/checkpoint_test_util.h"

namespace shardrec::testing {

struct InferenceDeleter {
  void operator()(shardrec_inference_t* p) const { shardrec_inference_destroy(p); }
};
using InferencePtr = std::unique_ptr<shardrec_inference_t, InferenceDeleter>;

// One training run, saved twice: `trained` after two steps, then `dyadic` after every weight was
// replaced by a multiple of 1/64 (and the batch's weights by multiples of 1/8), where every sum
// is exact in any order, so even row-split bags must match the training forward bit for bit.
struct Trained {
  Scenario s;
  std::string trained_dir, dyadic_dir;
  std::vector<RefBatch> batches;                // per rank: the trained checkpoint's batch
  std::vector<RefBatch> dyadic_batches;         // per rank: the dyadic checkpoint's batch
  std::vector<std::vector<float>> trained_out;  // per rank: the training forward on batches
  std::vector<std::vector<float>> dyadic_out;   // per rank: on dyadic_batches
  std::vector<std::vector<float>> weights;      // per table: trained full weights (fp32)
};

// Trains `side` with StandardScenario tables of `pooling`, per-id weights when `weighted`, bags
// of up to `max_bag` ids.
Trained TrainAndSave(const Side& side, int32_t pooling, bool weighted, int32_t max_bag = 4);

// Opens `path` with every table in `storage`; fails the test on error.
InferencePtr Open(const std::string& path, int32_t storage, int32_t bounds = SHARDREC_BOUNDS_ERROR);

// The handle's output for `b` (fails the test on error); `version` receives version_out.
std::vector<float> Lookup(shardrec_inference_t* inf, const RefBatch& b, int32_t num_features,
                          uint64_t* version = nullptr);

// Per output element, the bound on |lookup - exact| for `storage` and the exact value (in
// double, from the fp32 weights), for batch `b` of scenario `s`.
void ExactAndBound(const Scenario& s, const std::vector<std::vector<float>>& weights,
                   const RefBatch& b, int32_t storage, std::vector<double>* exact,
                   std::vector<double>* bound);

// FP8 rows as shardrec/inference.h documents them, written here from the OCP definitions (not
// the library's codec): the row's scale (the smallest power of two with which its largest
// magnitude fits: at most 464 for E4M3, below 61440 for E5M2, whose tie there rounds past its
// largest finite value), and each value of x / scale rounded to the nearest finite code (ties to
// the even code) and decoded back, x scale. An all-zero row has scale 1. Finite rows only.
float Fp8Scale(int32_t storage, const float* x, int32_t dim);
void Fp8RoundTrip(int32_t storage, const float* x, int32_t dim, float* out);

}  // namespace shardrec::testing
