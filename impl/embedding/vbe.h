// A batch with a batch size per feature (VBE, docs/variable-batch.md) on its way through the
// pipeline. The view is checked here (every rejection names the feature and sample), then runs
// as the plain batch of P = max_f B_f samples in which feature f's bags are its B_f bags followed
// by P - B_f empty ones: the values keep their order, an empty bag routes no id, is looked up
// nowhere and returns no row (pooled runs keep only non-empty bags), so what the per-feature
// sizes save on the wire and in the lookups is saved; the padded batch names each feature's B_f
// (Batch::feature_bags), so the id message carries B_f length slots per unit of the feature, not
// P.
// A pooled collection never writes the padded output: the combine puts each feature's B_f rows
// where they belong (PairRows): straight into the caller's output (feature-major without inverse
// indices; in the plain layout for a feature whose inverse indices are the identity), else into a
// feature-major scratch from which Expand copies them through the inverse indices, each output
// element written once (so bit for bit the expanded batch's rows: a bag's sum is computed once,
// in the order the plain path computes it, and copied). The backward reads the caller's gradient
// where it lies, and sums the rows of the samples that read a scratch feature's bag into that
// bag (Reduce: in ascending sample order starting from zero). A sequence collection still runs
// the P-sample output and gradient through Scatter and Gather.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "impl/core/exec.h"
#include "impl/core/status.h"
#include "impl/embedding/bag_index.h"
#include "impl/embedding/batch.h"
#include "impl/embedding/input_dist.h"
#include "impl/embedding/layout.h"
#include "impl/embedding/pair_rows.h"
#include "impl/embedding/vbe_rows.h"

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
  VbeStep() = default;
  // Moved, never copied: expanded_ points into inverse_, whose buffer a move keeps (the
  // collection swaps its steps, collection.cc).
  VbeStep(VbeStep&&) = default;
  VbeStep& operator=(VbeStep&&) = default;
  VbeStep(const VbeStep&) = delete;
  VbeStep& operator=(const VbeStep&) = delete;

  // Checks `batch` against the collection (F, the lengths count, each B_f, each inverse index,
  // kjt.batch_size, then the plain batch's own checks run on the padded batch) and, when it is
  // sound, keeps its shape and sets `*padded` to the plain batch the pipeline runs (its lengths
  // owned here, its values and weights the view's). A plain view (no batch sizes) passes through.
  // `route`: the collection's bounds and non-finite policies, which say whether an id outside
  // its table or a non-finite weight is an error the padded batch's checks must name.
  Status Prepare(const Layout& l, const VbeBatch& batch, const RouteOptions& route, Batch* padded);
  // Whether the last Prepare was a VBE batch (else the plain output and gradient are the caller's).
  bool vbe() const { return vbe_; }
  void Clear() { vbe_ = false; }
  bool has_inverse() const { return has_inverse_; }
  // Floats of the caller's output / the padded batch's output (sequence collections).
  size_t output_len() const { return output_len_; }
  size_t padded_len() const { return padded_len_; }
  // Sequence collections: the padded batch's output `padded` re-laid out into the caller's `out`,
  // and the caller's gradient `grad` (output layout) reduced into the padded batch's gradient.
  void Scatter(const Layout& l, const float* padded, float* out) const;
  void Gather(const Layout& l, const float* grad, float* padded) const;

  // Pooled collections: where the combine writes and the backward reads each pair's B_f rows
  // (null for a sequence collection); its `aux` is the caller's to set to a scratch of aux_len()
  // floats for the call that uses it.
  PairRows* places() { return places_.pairs.empty() ? nullptr : &places_; }
  size_t aux_len() const { return aux_len_; }
  // With inverse indices: the scratch features' rows in `aux` copied to their columns of every
  // output sample of `out` (the other columns are left alone), each element written once
  // (ExpandRows; streamed when the expansion is at least kStreamBytes).
  void Expand(const ExecContext& ctx, const Layout& l, const float* aux, float* out) const;
  // With inverse indices: each scratch feature's bags in `aux` = the sum of the caller's gradient
  // rows `grad` of the samples that read them, in ascending sample order starting from zero, each
  // gradient element read once (ReduceRows, in tiles of kReduceTile rows). With
  // `in_place_finite`, also sets it to InPlaceFinite(grad), checked in the same walk of the rows.
  void Reduce(const ExecContext& ctx, const float* grad, float* aux,
              bool* in_place_finite = nullptr) const;
  // Whether every element of the caller's gradient `grad` that the pipeline reads in place (the
  // places outside the scratch) is finite.
  bool InPlaceFinite(const float* grad) const;
  // The feature and bag of element `i` of the scratch (for an error message).
  void AuxBag(size_t i, int64_t* feature, int64_t* bag) const;

 private:
  // Expansions of at least this many bytes stream their whole cache lines (Expand).
  static constexpr int64_t kStreamBytes = int64_t{4} << 20;
  // Rows per tile of Reduce's walk: a tile's rows are read once for all of a thread's features.
  static constexpr int64_t kReduceTile = 16;

  bool vbe_ = false;
  bool has_inverse_ = false;
  int64_t features_ = 0;
  int64_t padded_samples_ = 0;  // P
  int64_t out_samples_ = 0;     // B with inverse indices
  size_t output_len_ = 0;
  size_t padded_len_ = 0;
  std::vector<int64_t> bag_begin_;     // F + 1: the VBE view's BagIndex
  std::vector<int64_t> feature_bags_;  // F: B_f, for the padded batch (Batch::feature_bags)
  std::vector<int32_t> padded_lengths_;
  // The view's inverse indices, F x B; a pooled collection's identity features' are not copied
  // (their rows are combined in place, nothing reads them: TakeInverse).
  std::vector<int64_t> inverse_;
  std::vector<int64_t> value_begin_;  // sequence with inverse: F * P + 1 id offsets
  // Pooled: the pairs' places, and per feature its columns in the plain output and where its
  // B_f rows start in the scratch (-1: not in the scratch).
  PairRows places_;
  size_t aux_len_ = 0;
  int64_t output_dim_ = 0;
  std::vector<int64_t> col_offset_;
  std::vector<int64_t> col_width_;
  std::vector<int64_t> aux_begin_;
  std::vector<ExpandedFeature> expanded_;  // the scratch features (Expand, Reduce)

  // Per feature: its inverse indices cover its bags in ascending order (with B_f = B: the
  // identity), so every bag is read (TakeInverse).
  std::vector<uint8_t> covered_;
  // Bags no output sample reads are not in the expanded batch (vbe.cc).
  std::vector<uint8_t> read_;  // per VBE bag: some sample reads it (features not covered only)
  bool unread_ = false;        // some bag is read by no sample
  std::vector<uint8_t> kept_values_;
  std::vector<float> kept_weights_;

  Status TakeInverse(const Layout& l, const VbeBatch& v);
  void PlacePairs(const Layout& l);
  void DropUnreadBags(const Layout& l, const VbeBatch& v, const RouteOptions& route, Batch* padded);
};

}  // namespace shardrec::embedding
