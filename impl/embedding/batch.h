// The C++ view of one rank's local batch (a KJT) and the policy for out-of-range ids.
#pragma once

#include <cstddef>
#include <cstdint>

#include "impl/core/device.h"
#include "impl/core/dtype.h"

namespace shardrec::embedding {

// What happens to an id outside [0, rows) of a table that reads its feature. Values mirror
// SHARDREC_BOUNDS_*.
enum class BoundsPolicy : int32_t {
  kError = 0,  // reject the batch (nothing changes)
  kClamp = 1,  // use row 0 instead (FBGEMM's WARNING mode)
  kSkip = 2,   // drop the id from the bag
};

// Borrowed, feature-major KJT: lengths[f * batch_size + b] ids of feature f for sample b; the
// ids of all bags follow each other in `values` in that order. `weights` is null (unweighted)
// or holds one weight per id. The buffers live on `device` as the caller declared it; host
// collections read host memory whatever it says (tensor.h explains why), GPU collections use it.
struct Batch {
  int64_t batch_size = 0;
  int64_t num_features = 0;
  const int32_t* lengths = nullptr;
  size_t num_lengths = 0;
  const void* values = nullptr;
  DType values_dtype = DType::kInt64;
  size_t num_values = 0;
  const float* weights = nullptr;
  size_t num_weights = 0;
  Device device;
  // For a batch in device memory: the caller's stream its arrays were written on (nullptr: the
  // legacy default stream). A GPU collection orders its reads of them after the work queued
  // there; host collections ignore it.
  Stream stream = nullptr;
  // A VBE batch's padded form (vbe.h): per feature, how many of its first bags may hold ids (its
  // B_f; the later ones are empty), so the input distribution sends each unit only that many
  // length slots. Null: every bag may (a plain batch). Borrowed, host memory.
  const int64_t* feature_bags = nullptr;
};

}  // namespace shardrec::embedding
