// The serving lookup of a VBE batch (shardrec_kjt_vbe_view_t: a batch size per feature, optional
// inverse indices): each distinct bag looked up once, then, with inverse indices, copied to every
// output sample that reads it. Pure, as the plain lookup (lookup.h).
#pragma once

#include <cstddef>
#include <cstdint>

#include "impl/core/status.h"
#include "impl/serving/lookup.h"
#include "impl/serving/model.h"

namespace shardrec::serving {

// A VBE batch in host memory (the C API's VBE view, its version and NULLs checked by the caller):
// `bags.lengths` holds sum_f B_f lengths, feature-major; `bags.batch_size` is the number of
// output samples with inverse indices, else the largest B_f.
struct VbeRequest {
  Request bags;
  const int64_t* batch_sizes = nullptr;  // F entries B_f, or null: `bags` is a plain request
  size_t num_batch_sizes = 0;
  const int64_t* inverse = nullptr;  // F x bags.batch_size, or null
  size_t num_inverse = 0;
};

// Floats the output of `r` takes: with inverse indices that of the expanded plain batch
// (batch_size x output_dim pooled; its ids x dim sequence), without sum_f B_f x width_f pooled
// or num_values x dim sequence. Checks what it reads (F, the B_f, the number of lengths and, for a
// sequence model with inverse indices, the lengths and the inverse indices); kInvalidArgument
// naming the feature and sample, also when the count could not be addressed.
Status VbeOutputSize(const Model& m, const VbeRequest& r, size_t* out);

// Validates `r` as the plain lookup validates a request (lengths, values, weights, ids under
// Bounds::kError) plus the view's own rules (F batch sizes >= 0 whose sum is the number of
// lengths; F x batch_size inverse indices in [0, B_f); without them batch_size = max B_f), then
// writes the output: each bag of each feature summed (or, sequence, each id decoded) once, with
// inverse indices copied to the output samples that read it, so that the output equals the plain
// lookup of the expanded batch bit for bit. Nothing is written to `out` on error.
Status LookupVbe(const Model& m, const VbeRequest& r, float* out, size_t out_len);

}  // namespace shardrec::serving
