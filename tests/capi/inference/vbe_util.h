// Helpers of the VBE serving tests: small models saved through the C API (pooled with features
// read by one or two tables, or sequence), random VBE batches, and the plain batches they stand
// for (expanded through the inverse indices, or padded to the largest batch size).
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "shardrec/shardrec.h"

namespace shardrec::testing::vbe {

constexpr int32_t kFeatures = 4;

// Saves a world-1 collection to `dir` with weights drawn from `seed`. Pooled: "user" 40 x 4 SUM
// read by u0, u1; "item" 60 x 8 MEAN read by i0, i1; "cross" 30 x 3 SUM read by u1, i0 (output
// 30 wide). Sequence: "s0" 40 x 4 read by u0, u1 and "s1" 60 x 4 read by i0, i1.
void SaveModel(const std::string& dir, bool sequence, uint32_t seed);

// Per feature of the pooled model: its first output column and its width.
inline constexpr int64_t kFirstCol[kFeatures] = {0, 4, 11, 22};
inline constexpr int64_t kWidth[kFeatures] = {4, 7, 11, 8};
inline constexpr int64_t kPooledDim = 30;
// Rows every table reading a feature has (ids below it are in range everywhere).
inline constexpr int64_t kRows[kFeatures] = {40, 30, 30, 60};

// A plain batch that owns its arrays.
struct Plain {
  int64_t B = 0;
  std::vector<int32_t> lengths;
  std::vector<int64_t> ids;
  std::vector<int32_t> ids32;
  std::vector<float> weights;
  shardrec_kjt_view_t View(bool int32_ids) const;
};

// A VBE batch that owns its arrays.
struct Vbe {
  int64_t B = 0;  // output samples with inverse indices, else the largest B_f
  std::vector<int64_t> batch_sizes;
  std::vector<int32_t> lengths;
  std::vector<int64_t> ids;
  std::vector<int32_t> ids32;
  std::vector<float> weights;
  std::vector<int64_t> inverse;  // empty: none
  shardrec_kjt_vbe_view_t View(bool int32_ids) const;
};

struct Options {
  int64_t samples = 6;      // B with inverse indices
  bool inverse = true;      // give inverse indices
  bool weighted = false;    // per-id weights (multiples of 1/8, some negative)
  double out_of_range = 0;  // share of ids outside [0, kRows[f]) (negative or too large)
  int32_t max_bag = 4;      // bag lengths in [0, max_bag]
  bool request = false;     // user features one bag, item features one per sample (identity)
};

Vbe RandomVbe(std::mt19937* rng, const Options& o);

// With inverse indices: the plain batch of B samples whose bag (f, b) is bag inverse[f * B + b]
// of feature f. Without: the plain batch of max B_f samples whose bag (f, b) is bag b of feature
// f for b < B_f and empty after.
Plain Expand(const Vbe& v);

// The C API's answers; fail the test on error.
std::vector<float> LookupPlain(shardrec_inference_t* inf, const Plain& p, bool int32_ids);
std::vector<float> LookupVbe(shardrec_inference_t* inf, const Vbe& v, bool int32_ids,
                             uint64_t* version = nullptr);

}  // namespace shardrec::testing::vbe
