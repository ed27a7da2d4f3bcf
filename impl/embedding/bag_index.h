// The one accessor for "the bag of feature f, sample b" in a feature-major batch, written once for
// host and device bodies. A plain batch gives every feature the same number of samples B, so its
// bag (f, b) is f * B + b; a batch with a batch size per feature (VBE, docs/variable-batch.md)
// gives feature f its own B_f, and its bags start at the running sum of the sizes before it.
// Arrays laid out like the lengths (per pair, per unit or per slot and sample: the MEAN divisors,
// the routed counts) use the same accessor with their own major index.
#pragma once

#include <cstdint>

#include "impl/core/host_device.h"

namespace shardrec::embedding {

struct BagIndex {
  // The samples of every major index of a plain batch (ignored when `begin` is set).
  int64_t batch_size = 0;
  // Per major index f: its first bag (F + 1 entries, the last the number of bags), or null for a
  // plain batch. Borrowed.
  const int64_t* begin = nullptr;

  // A plain batch of `batch_size` samples per major index.
  static SHARDREC_HD BagIndex Plain(int64_t batch_size) { return BagIndex{batch_size, nullptr}; }
  // Position of (f, b) in the feature-major array.
  SHARDREC_HD int64_t bag(int64_t f, int64_t b) const {
    return begin != nullptr ? begin[f] + b : f * batch_size + b;
  }
  // The samples of major index f (B_f).
  SHARDREC_HD int64_t samples(int64_t f) const {
    return begin != nullptr ? begin[f + 1] - begin[f] : batch_size;
  }
};

}  // namespace shardrec::embedding
