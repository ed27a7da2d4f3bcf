// A batch with a batch size per feature (VBE, docs/variable-batch.md) on its way through the
// pipeline. The view is checked here (every rejection names the feature and sample), then runs
// as the plain batch of P = max_f B_f samples in which feature f's bags are its B_f bags followed
// by P - B_f empty ones: the values keep their order, an empty bag routes no id, is looked up
// nowhere and returns no row (pooled runs keep only non-empty bags), so what the per-feature
// sizes save on the wire and in the lookups is saved; each padded bag costs its int32 length in
// the id message. The combine's output of the P samples is then re-laid out for the caller:
// expanded through the inverse indices (rows copied, so bit for bit the expanded batch's), or
// packed feature-major. The backward reverses that: the gradient rows of the output samples that
// read a bag are summed into it, in ascending sample order starting from zero, and the normal
// gradient path takes the P-sample gradient.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "impl/core/status.h"
#include "impl/embedding/bag_index.h"
#include "impl/embedding/batch.h"
#include "impl/embedding/layout.h"

namespace shardrec::embedding {

// Borrowed VBE view (the C struct shardrec_kjt_vbe_view_t, its version already checked).
struct VbeBatch {
  Batch kjt;  // kjt.lengths: sum_f B_f bags, feature-major; kjt.batch_size as the C view says
  const int64_t* feature_batch_sizes = nullptr;  // F entries, or null: the plain batch `kjt`
  size_t num_feature_batch_sizes = 0;
  const int64_t* inverse = nullptr;  // F * kjt.batch_size entries, or null
  size_t num_inverse = 0;
};

// The floats of the output of `batch` in its VBE layout (the C call's out_len), from its sizes;
// a sequence collection's expanded output also reads the lengths and inverse indices. EINVAL for
// sizes that do not fit the collection.
Status VbeOutputLen(const Layout& l, const VbeBatch& batch, size_t* out);

// One VBE batch's shape and what its backward needs (the inverse indices are copied: the view is
// borrowed for the forward only). Reused from step to step.
class VbeStep {
 public:
  // Checks `batch` against the collection (F, the lengths count, each B_f, each inverse index,
  // kjt.batch_size, then the plain batch's own checks run on the padded batch) and, when it is
  // sound, keeps its shape and sets `*padded` to the plain batch the pipeline runs (its lengths
  // owned here, its values and weights the view's). A plain view (no batch sizes) passes through.
  Status Prepare(const Layout& l, const VbeBatch& batch, Batch* padded);
  // Whether the last Prepare was a VBE batch (else the plain output and gradient are the caller's).
  bool vbe() const { return vbe_; }
  void Clear() { vbe_ = false; }
  // Floats of the caller's output / the padded batch's output.
  size_t output_len() const { return output_len_; }
  size_t padded_len() const { return padded_len_; }
  // The padded batch's output `padded` re-laid out into the caller's `out`.
  void Scatter(const Layout& l, const float* padded, float* out) const;
  // The caller's gradient `grad` (output layout) reduced into the padded batch's gradient.
  void Gather(const Layout& l, const float* grad, float* padded) const;

 private:
  bool vbe_ = false;
  bool has_inverse_ = false;
  int64_t features_ = 0;
  int64_t padded_samples_ = 0;  // P
  int64_t out_samples_ = 0;     // B with inverse indices
  size_t output_len_ = 0;
  size_t padded_len_ = 0;
  std::vector<int64_t> bag_begin_;  // F + 1: the VBE view's BagIndex
  std::vector<int32_t> padded_lengths_;
  std::vector<int64_t> inverse_;
  std::vector<int64_t> value_begin_;  // sequence with inverse: F * P + 1 id offsets
};

}  // namespace shardrec::embedding
