// What the libFuzzer targets share: a check that aborts with the library's last error (so the
// fuzzer records the input as a crash), a reader of the fuzz input that yields zeros past its
// end, so a short input means defaults rather than an early return, the batch rules their
// oracles check, the configs of one-table-per-feature plans and one training step of a
// one-sample batch. (Scratch files: fuzz_files.h.)
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "shardrec/shardrec.h"

#define FUZZ_CHECK(cond)                                                                \
  do {                                                                                  \
    if (!(cond)) {                                                                      \
      std::fprintf(stderr, "%s:%d: check failed: %s (%s)\n", __FILE__, __LINE__, #cond, \
                   shardrec_last_error());                                              \
      std::abort();                                                                     \
    }                                                                                   \
  } while (0)

namespace shardrec::fuzz {

struct ByteReader {
  const uint8_t* p;
  size_t n;
  uint8_t Byte() {
    if (n == 0) return 0;
    --n;
    return *p++;
  }
};

// The rules of the bags of a batch (shardrec/tensor.h), written out again for the targets'
// oracles: whether `v`'s lengths, values and weights break one when feature f has bags[f] bags,
// feature-major, and reads a table of rows[f] rows (ids are checked only when `rows` is not null:
// a serving handle may clamp or skip them instead), under the default non-finite policy (a NaN or
// infinite per-id weight is refused). The arrays are those the view's counts say (the callers
// check NULL arrays with counts first).
inline bool BagsBreakRules(const shardrec_kjt_view_t& v, const int64_t* bags, int features,
                           const int64_t* rows) {
  unsigned __int128 slots = 0;  // the count of a hostile view may not fit 64 bits
  for (int f = 0; f < features; ++f) slots += static_cast<uint64_t>(bags[f]);
  if (slots != v.num_lengths) return true;
  int64_t sum = 0;
  for (size_t i = 0; i < v.num_lengths; ++i) {
    if (v.lengths[i] < 0) return true;
    sum += v.lengths[i];
  }
  if (static_cast<size_t>(sum) != v.num_values) return true;
  if (v.weights != nullptr) {
    if (v.num_weights != v.num_values) return true;
    for (size_t i = 0; i < v.num_weights; ++i)
      if (!std::isfinite(v.weights[i])) return true;
  }
  if (rows == nullptr) return false;
  size_t bag = 0, at = 0;
  for (int f = 0; f < features; ++f)
    for (int64_t s = 0; s < bags[f]; ++s, ++bag)
      for (int32_t k = 0; k < v.lengths[bag]; ++k, ++at) {
        const int64_t id = v.values_dtype == SHARDREC_DTYPE_INT32
                               ? static_cast<const int32_t*>(v.values)[at]
                               : static_cast<const int64_t*>(v.values)[at];
        if (id < 0 || id >= rows[f]) return true;
      }
  return false;
}

// The rules of a plain batch: those of its bags, `batch_size` bags per feature, for a plan of
// `features` features, and a target that gives a batch of more than `max_batch` samples no
// lengths.
inline bool KjtBreaksRules(const shardrec_kjt_view_t& v, int features, int64_t max_batch,
                           const int64_t* rows) {
  if (v.batch_size < 0 || v.batch_size > max_batch) return true;
  if (v.num_features != static_cast<size_t>(features)) return true;
  const std::vector<int64_t> bags(static_cast<size_t>(features), v.batch_size);
  return BagsBreakRules(v, bags.data(), features, rows);
}

// The configs of a one-rank plan in which feature i is read by table i alone, both named
// names[i] (the feature feature_names[i] where given); every other field is the library's
// default, for the caller to set through table(i) before Plan. Not copyable: each table points
// at its feature index here.
class OneTablePerFeature {
 public:
  OneTablePerFeature(const char* const* names, int n, const char* const* feature_names = nullptr)
      : features_(static_cast<size_t>(n)),
        feature_of_(static_cast<size_t>(n)),
        tables_(static_cast<size_t>(n)) {
    for (size_t i = 0; i < tables_.size(); ++i) {
      shardrec_feature_config_init(&features_[i], SHARDREC_FEATURE_CONFIG_VERSION);
      features_[i].name = feature_names != nullptr ? feature_names[i] : names[i];
      feature_of_[i] = static_cast<int32_t>(i);
      shardrec_table_config_init(&tables_[i], SHARDREC_TABLE_CONFIG_VERSION);
      tables_[i].name = names[i];
      tables_[i].features = &feature_of_[i];
      tables_[i].num_features = 1;
    }
  }
  OneTablePerFeature(const OneTablePerFeature&) = delete;
  OneTablePerFeature& operator=(const OneTablePerFeature&) = delete;

  shardrec_table_config_t& table(int i) { return tables_[static_cast<size_t>(i)]; }

  // The plan at world 1; tables without an optimizer of their own take `optimizer`, or the
  // topology's default when it is negative. The caller owns it.
  shardrec_plan_t* Plan(int32_t optimizer = -1) const {
    shardrec_topology_t topo;
    shardrec_topology_init(&topo, SHARDREC_TOPOLOGY_VERSION);
    topo.world_size = 1;
    if (optimizer >= 0) topo.optimizer = optimizer;
    shardrec_plan_t* plan = nullptr;
    FUZZ_CHECK(shardrec_plan_create(&plan, tables_.data(), tables_.size(), features_.data(),
                                    features_.size(), &topo, nullptr, 0) == SHARDREC_OK);
    return plan;
  }

 private:
  std::vector<shardrec_feature_config_t> features_;
  std::vector<int32_t> feature_of_;
  std::vector<shardrec_table_config_t> tables_;
};

// One training step of a batch of one sample whose feature f has lengths[f] of the int64 `ids`,
// in feature order, against a gradient of `grad` everywhere: how the file targets put rows,
// counts and optimizer state into a collection before they save or export it.
inline void TrainOneSample(shardrec_embedding_t* coll, const int32_t* lengths, int features,
                           const int64_t* ids, size_t num_ids, float grad = 0.125f) {
  shardrec_kjt_view_t v = SHARDREC_KJT_VIEW_INIT;
  v.batch_size = 1;
  v.num_features = static_cast<size_t>(features);
  v.lengths = lengths;
  v.num_lengths = static_cast<size_t>(features);
  v.values = ids;
  v.values_dtype = SHARDREC_DTYPE_INT64;
  v.num_values = num_ids;
  int64_t dim = 0;
  FUZZ_CHECK(shardrec_embedding_output_dim(coll, &dim) == SHARDREC_OK);
  std::vector<float> out(static_cast<size_t>(dim));
  FUZZ_CHECK(shardrec_embedding_forward(coll, &v, out.data(), out.size(), nullptr) == SHARDREC_OK);
  for (float& g : out) g = grad;
  FUZZ_CHECK(shardrec_embedding_backward(coll, out.data(), out.size(), nullptr) == SHARDREC_OK);
}

}  // namespace shardrec::fuzz
