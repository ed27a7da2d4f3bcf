// The per-feature work of the serving lookups, shared by the plain and the VBE lookup (lookup.h,
// lookup_vbe.h): the bags of one feature (a run of lengths and the values they cover) summed
// into pooled output rows of any stride, or decoded one output row per id (sequence).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "impl/core/status.h"
#include "impl/serving/lookup.h"
#include "impl/serving/model.h"
#include "impl/serving/tiered_rows.h"

namespace shardrec::serving {

// A request's ids, int64 or int32 (exactly one pointer set).
struct Ids {
  const int64_t* v64;
  const int32_t* v32;
  int64_t operator[](size_t i) const { return v64 != nullptr ? v64[i] : v32[i]; }
};

inline Ids IdsOf(const Request& r) {
  return Ids{r.values_int64 ? static_cast<const int64_t*>(r.values) : nullptr,
             r.values_int64 ? nullptr : static_cast<const int32_t*>(r.values)};
}

// The `count` bags of one feature: their lengths and the values [begin, end) they cover; bag b is
// "sample b" in error messages.
struct FeatureBags {
  int32_t feature = 0;
  const int32_t* lengths = nullptr;
  int64_t count = 0;
  size_t begin = 0, end = 0;
};

// Per-call scratch of the pooled path: one pair's resolved rows (skipped ids left out), their
// weights, its bags' offsets into them and their MEAN divisors.
struct BagScratch {
  std::vector<int64_t> rows;
  std::vector<float> weights;
  std::vector<int64_t> offsets;
  std::vector<float> divisors;
  // Per table served from disk (indexed by table), the request's rows gathered so far: a row
  // that several features of the request read is read and counted once.
  std::vector<TieredRows::Scratch> tiered;
  // The in-memory tables' rows are prefetched into the second-level cache only
  // (core::kernels::PooledArgs::prefetch_to_l2): Lookup sets it when they outgrow the
  // last-level cache (RowsComeFromMemory).
  bool rows_to_l2 = false;
};

// Whether the model's in-memory tables together outgrow this host's last-level cache (where its
// size is not known: 32 MiB), so that a lookup's rows mostly come from memory.
bool RowsComeFromMemory(const Model& m);

// Per-call decode buffers of the sequence path (one row of the widest table), so concurrent calls
// share nothing.
struct DecodeBuffers {
  explicit DecodeBuffers(const Model& m);
  std::vector<float> buf;
  std::vector<uint8_t> scratch;
};

// Sums the bags of `bags` in table `table` (of m.pairs' feature) into out[b * stride + offset +
// c]: ids resolved against the bounds policy (or the dynamic index), weighted by `weights` (one
// per value of the request, or null), MEAN divided by the bag's weight sum; fp32, id order, through
// the pooled kernel shared with the training forward (int8 and int4 rows in its folded form:
// code x (weight x scale) into the sum, the bias terms once per row; docs/serving.md has the
// bound). Writes the bags it has summed before an error (an id out of range with
// Bounds::kError).
Status PooledBags(const Model& m, int32_t table, const FeatureBags& bags, const Ids& ids,
                  const float* weights, BagScratch* scratch, float* out, int64_t stride,
                  int64_t offset);

// Sequence: value i of `bags` (begin <= i < end) writes output row out + i * m.output_dim, the
// row of its id in the feature's table (zeros for a feature no table reads, or a skipped id),
// times its weight.
Status SequenceBags(const Model& m, const FeatureBags& bags, const Ids& ids, const float* weights,
                    DecodeBuffers* buffers, float* out);

// The first id of `bags` outside table `table` (a fixed table) as the error Bounds::kError
// returns; Ok when all are in range or the table is dynamic. Writes nothing.
Status CheckIdsInRange(const Model& m, int32_t table, const FeatureBags& bags, const Ids& ids);

// The checks of a request's values and weights both lookups share: values not NULL when there
// are any, one finite weight per value or no weights.
Status CheckValuesAndWeights(const Request& r);

}  // namespace shardrec::serving
