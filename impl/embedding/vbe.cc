// VBE batches (vbe.h): their checks, the padded plain batch they run as, and the re-layout of its
// output and gradient.
#include "impl/embedding/vbe.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "impl/core/finite.h"
#include "impl/embedding/input_dist.h"

namespace shardrec::embedding {

namespace {

// Columns of feature f in the plain pooled output: its pairs are contiguous there (layout.h:
// pairs are feature-major, then in table order, which is the column order).
struct FeatureColumns {
  int64_t offset = 0;
  int64_t width = 0;
};

FeatureColumns ColumnsOf(const Layout& l, int64_t f) {
  FeatureColumns c;
  const auto& pairs = l.feature_pairs[static_cast<size_t>(f)];
  if (pairs.empty()) return c;
  c.offset = l.pairs[pairs.front()].out_offset;
  for (int32_t p : pairs) c.width += l.plan->tables[l.pairs[p].table].dim;
  return c;
}

const std::string& FeatureName(const Layout& l, int64_t f) {
  return l.plan->features[static_cast<size_t>(f)].name;
}

// A plain view (no feature batch sizes) has no inverse indices either.
Status CheckPlainView(const VbeBatch& v) {
  if (v.inverse != nullptr || v.num_inverse != 0)
    return Status::InvalidArgument(
        "batch: inverse_indices given without feature_batch_sizes (a plain view has none)");
  return Status::Ok();
}

Status CheckFeatureCount(const Layout& l, const VbeBatch& v) {
  const int64_t nf = static_cast<int64_t>(l.plan->features.size());
  if (v.kjt.num_features != nf)
    return Status::InvalidArgument("batch: num_features is ",
                                   static_cast<uint64_t>(v.kjt.num_features), " but the plan has ",
                                   nf, " features");
  return Status::Ok();
}

// The checks of the sizes alone (no lengths, ids or weights read): F, each B_f, the number of
// lengths, kjt.batch_size and the inverse indices' count. *bags receives sum_f B_f, *padded max.
Status CheckSizes(const Layout& l, const VbeBatch& v, int64_t* bags, int64_t* padded) {
  const int64_t nf = static_cast<int64_t>(l.plan->features.size());
  if (v.feature_batch_sizes == nullptr)
    return Status::InvalidArgument(
        "batch: feature_batch_sizes is NULL (a VBE view needs one batch size per feature)");
  if (v.num_feature_batch_sizes != static_cast<size_t>(nf))
    return Status::InvalidArgument("batch: num_feature_batch_sizes is ", v.num_feature_batch_sizes,
                                   " but the plan has ", nf, " features");
  SR_RETURN_IF_ERROR(CheckFeatureCount(l, v));
  int64_t sum = 0;
  int64_t max = 0;
  for (int64_t f = 0; f < nf; ++f) {
    const int64_t bf = v.feature_batch_sizes[f];
    if (bf < 0)
      return Status::InvalidArgument("batch: feature '", FeatureName(l, f), "' (", f,
                                     "): batch size ", bf, " is negative");
    if (__builtin_add_overflow(sum, bf, &sum))
      return Status::InvalidArgument("batch: the feature batch sizes' sum overflows");
    max = std::max(max, bf);
  }
  int64_t padded_bags = 0;
  if (__builtin_mul_overflow(nf, max, &padded_bags))
    return Status::InvalidArgument("batch: num_features * the largest batch size overflows");
  if (v.kjt.num_lengths != static_cast<size_t>(sum))
    return Status::InvalidArgument("batch: num_lengths is ", v.kjt.num_lengths,
                                   ", expected the sum of the feature batch sizes, ", sum);
  if (v.inverse == nullptr) {
    if (v.num_inverse != 0)
      return Status::InvalidArgument("batch: inverse_indices is NULL but num_inverse_indices is ",
                                     v.num_inverse);
    if (v.kjt.batch_size != max)
      return Status::InvalidArgument(
          "batch: batch_size is ", v.kjt.batch_size,
          " but without inverse indices it must be the largest feature batch size, ", max);
  } else {
    if (v.kjt.batch_size < 0)
      return Status::InvalidArgument("batch: batch_size must be >= 0, got ", v.kjt.batch_size);
    int64_t n = 0;
    if (__builtin_mul_overflow(nf, v.kjt.batch_size, &n))
      return Status::InvalidArgument("batch: num_features * batch_size overflows");
    if (v.num_inverse != static_cast<size_t>(n))
      return Status::InvalidArgument("batch: num_inverse_indices is ", v.num_inverse,
                                     ", expected num_features * batch_size = ", n);
  }
  *bags = sum;
  *padded = max;
  return Status::Ok();
}

// Feature f's first inverse index outside [0, B_f), named with its sample (the refusal's
// message; only a view known to hold one is searched).
Status InverseOutside(const Layout& l, const VbeBatch& v, int64_t f) {
  const int64_t bf = v.feature_batch_sizes[f];
  const int64_t B = v.kjt.batch_size;
  const int64_t* inv = v.inverse + BagIndex::Plain(B).bag(f, 0);
  for (int64_t b = 0; b < B; ++b)
    if (inv[b] < 0 || inv[b] >= bf)
      return Status::InvalidArgument("batch: feature '", FeatureName(l, f), "' sample ", b,
                                     ": inverse index ", inv[b], " is outside [0, ", bf,
                                     ") (the feature's batch size)");
  return Status::Ok();
}

// What one pass over a feature's inverse indices found.
struct InverseScan {
  bool in_range = true;  // every index in [0, B_f)
  // The indices run from 0 to B_f - 1 in steps of 0 or 1 (a request's candidates reading its
  // bag; with B_f = B the identity): every bag is read, and none out of order.
  bool ascending_cover = false;
};

// The `n` inverse indices `src` of a feature of `bf` bags. The first loop, the only one over
// indices that ascend in steps of 0 or 1, has no compare, so that the compiler vectorizes it
// (x86-64's baseline, SSE2, has no 64-bit vector compare); their range is then that of the first
// and the last. Other indices are checked by a second loop, over indices still in cache. Whatever
// the view holds, nothing branches on it per index (the first index outside is found afterwards, by
// InverseOutside).
InverseScan ScanInverse(const int64_t* src, int64_t n, int64_t bf) {
  InverseScan s;
  if (n == 0) {
    s.ascending_cover = bf == 0;
    return s;
  }
  // Unsigned: a negative index is outside too, and a step between hostile indices cannot
  // overflow. A step of 0 or 1 is one whose bits above the lowest are zero.
  const auto ubf = static_cast<uint64_t>(bf);
  uint64_t jumps = 0;
  for (int64_t b = 1; b < n; ++b)
    jumps |= (static_cast<uint64_t>(src[b]) - static_cast<uint64_t>(src[b - 1])) & ~uint64_t{1};
  if (jumps == 0) {
    // Ascending from the first index without wrapping (n is far below 2^64): all lie between it
    // and the last.
    s.in_range = static_cast<uint64_t>(src[0]) < ubf && static_cast<uint64_t>(src[n - 1]) < ubf;
    s.ascending_cover = s.in_range && src[0] == 0 && src[n - 1] == bf - 1;
    return s;
  }
  uint64_t largest = 0;
  for (int64_t b = 0; b < n; ++b) largest = std::max(largest, static_cast<uint64_t>(src[b]));
  s.in_range = largest < ubf;
  return s;
}

// Every inverse index in [0, B_f): the first one outside names its feature and sample.
Status CheckInverse(const Layout& l, const VbeBatch& v) {
  if (v.inverse == nullptr) return Status::Ok();
  const int64_t nf = static_cast<int64_t>(l.plan->features.size());
  const int64_t B = v.kjt.batch_size;
  const BagIndex at = BagIndex::Plain(B);
  for (int64_t f = 0; f < nf; ++f)
    if (!ScanInverse(v.inverse + at.bag(f, 0), B, v.feature_batch_sizes[f]).in_range)
      return InverseOutside(l, v, f);
  return Status::Ok();
}

// The output length of a view whose sizes (and, for a sequence collection, inverse indices) are
// checked; `bags` is sum_f B_f.
Status CheckedOutputLen(const Layout& l, const VbeBatch& v, int64_t bags, size_t* out) {
  const auto D = static_cast<size_t>(l.output_dim);
  if (!l.sequence) {
    if (v.inverse != nullptr) {
      *out = static_cast<size_t>(v.kjt.batch_size) * D;
      return Status::Ok();
    }
    size_t n = 0;
    const int64_t nf = static_cast<int64_t>(l.plan->features.size());
    for (int64_t f = 0; f < nf; ++f)
      n += static_cast<size_t>(v.feature_batch_sizes[f]) *
           static_cast<size_t>(ColumnsOf(l, f).width);
    *out = n;
    return Status::Ok();
  }
  if (v.inverse == nullptr) {
    *out = v.kjt.num_values * D;
    return Status::Ok();
  }
  // A sequence output has a row per id of the expanded batch: the lengths of the bags read.
  if (bags > 0 && v.kjt.lengths == nullptr)
    return Status::InvalidArgument("batch: lengths is NULL but ", bags, " lengths are expected");
  std::vector<int64_t> begin(v.num_feature_batch_sizes + 1, 0);
  for (size_t f = 0; f < v.num_feature_batch_sizes; ++f)
    begin[f + 1] = begin[f] + v.feature_batch_sizes[f];
  const BagIndex bag{0, begin.data()};
  const BagIndex inv = BagIndex::Plain(v.kjt.batch_size);
  size_t ids = 0;
  for (size_t f = 0; f < v.num_feature_batch_sizes; ++f)
    for (int64_t b = 0; b < v.kjt.batch_size; ++b) {
      const int32_t len = v.kjt.lengths[bag.bag(f, v.inverse[inv.bag(f, b)])];
      if (len < 0)
        return Status::InvalidArgument("batch: feature '", FeatureName(l, f), "' sample ",
                                       v.inverse[inv.bag(f, b)], ": negative length ", len);
      ids += static_cast<size_t>(len);
    }
  *out = ids * D;
  return Status::Ok();
}

}  // namespace

Status VbeOutputLen(const Layout& l, const VbeBatch& v, size_t* out) {
  // A view is plain, or refused, by the same tests and with the same messages as in Prepare.
  if (v.feature_batch_sizes == nullptr && v.num_feature_batch_sizes == 0) {
    SR_RETURN_IF_ERROR(CheckPlainView(v));
    // A plain view: the plain output, of a batch the forward would not refuse for its shape.
    SR_RETURN_IF_ERROR(CheckFeatureCount(l, v));
    if (v.kjt.batch_size < 0)
      return Status::InvalidArgument("batch: batch_size is ", v.kjt.batch_size, ", negative");
    *out = static_cast<size_t>(l.sequence ? static_cast<int64_t>(v.kjt.num_values)
                                          : v.kjt.batch_size) *
           static_cast<size_t>(l.output_dim);
    return Status::Ok();
  }
  int64_t bags = 0;
  int64_t padded = 0;
  SR_RETURN_IF_ERROR(CheckSizes(l, v, &bags, &padded));
  if (l.sequence) SR_RETURN_IF_ERROR(CheckInverse(l, v));
  return CheckedOutputLen(l, v, bags, out);
}

Status VbeStep::Prepare(const Layout& l, const VbeBatch& v, const RouteOptions& route,
                        Batch* padded) {
  vbe_ = false;
  if (v.feature_batch_sizes == nullptr && v.num_feature_batch_sizes == 0) {
    SR_RETURN_IF_ERROR(CheckPlainView(v));
    *padded = v.kjt;
    return Status::Ok();
  }
  int64_t bags = 0;
  int64_t P = 0;
  SR_RETURN_IF_ERROR(CheckSizes(l, v, &bags, &P));
  if (bags > 0 && v.kjt.lengths == nullptr)
    return Status::InvalidArgument("batch: lengths is NULL but ", bags, " lengths are expected");
  const int64_t nf = static_cast<int64_t>(v.num_feature_batch_sizes);
  features_ = nf;
  padded_samples_ = P;
  has_inverse_ = v.inverse != nullptr;
  out_samples_ = has_inverse_ ? v.kjt.batch_size : P;
  bag_begin_.assign(static_cast<size_t>(nf) + 1, 0);
  for (int64_t f = 0; f < nf; ++f) bag_begin_[f + 1] = bag_begin_[f] + v.feature_batch_sizes[f];
  if (has_inverse_)
    SR_RETURN_IF_ERROR(TakeInverse(l, v));
  else
    inverse_.clear();
  // Feature f's B_f bags, then P - B_f empty ones: the values keep their order.
  padded_lengths_.assign(static_cast<size_t>(nf * P), 0);
  const BagIndex from{0, bag_begin_.data()};
  const BagIndex to = BagIndex::Plain(P);
  for (int64_t f = 0; f < nf; ++f)
    if (from.samples(f) > 0)
      std::memcpy(padded_lengths_.data() + to.bag(f, 0), v.kjt.lengths + from.bag(f, 0),
                  static_cast<size_t>(from.samples(f)) * sizeof(int32_t));
  *padded = v.kjt;
  padded->batch_size = P;
  feature_bags_.assign(v.feature_batch_sizes, v.feature_batch_sizes + nf);
  padded->feature_bags = feature_bags_.data();
  padded->lengths = padded_lengths_.data();
  padded->num_lengths = padded_lengths_.size();
  if (has_inverse_ && unread_) DropUnreadBags(l, v, route, padded);
  const auto D = static_cast<size_t>(l.output_dim);
  padded_len_ = (l.sequence ? padded->num_values : static_cast<size_t>(P)) * D;
  value_begin_.clear();
  if (l.sequence && has_inverse_) {
    // Id offsets of the padded bags; a negative length is the padded batch's own check to name.
    value_begin_.assign(padded_lengths_.size() + 1, 0);
    for (size_t k = 0; k < padded_lengths_.size(); ++k)
      value_begin_[k + 1] = value_begin_[k] + std::max<int32_t>(padded_lengths_[k], 0);
  }
  SR_RETURN_IF_ERROR(CheckedOutputLen(l, v, bags, &output_len_));
  PlacePairs(l);
  vbe_ = true;
  return Status::Ok();
}

// One pass over each feature's inverse indices of the view: checked, and whether they cover the
// feature's bags in ascending order (ScanInverse); then copied (from cache) where a later step
// reads them. Only a feature they do not cover that way is walked again, to mark which of its
// bags some sample reads: the common shapes (the items' identity, a request's candidates reading
// its user bag) cost the one pass over the view, and a batch in which every bag is read has
// nothing to drop (DropUnreadBags is not called).
Status VbeStep::TakeInverse(const Layout& l, const VbeBatch& v) {
  const int64_t B = v.kjt.batch_size;
  const BagIndex at = BagIndex::Plain(B);
  inverse_.resize(v.num_inverse);
  covered_.assign(static_cast<size_t>(features_), 0);
  read_.resize(static_cast<size_t>(bag_begin_.back()));
  unread_ = false;
  for (int64_t f = 0; f < features_; ++f) {
    const auto fi = static_cast<size_t>(f);
    const int64_t bf = bag_begin_[fi + 1] - bag_begin_[fi];
    const int64_t* src = v.inverse + at.bag(f, 0);
    const InverseScan scan = ScanInverse(src, B, bf);
    if (!scan.in_range) return InverseOutside(l, v, f);
    covered_[fi] = scan.ascending_cover ? 1 : 0;
    // A pooled collection combines an identity feature's rows in place: nothing reads its copy.
    if (B > 0 && (l.sequence || !scan.ascending_cover || bf != B))
      std::memcpy(inverse_.data() + at.bag(f, 0), src, static_cast<size_t>(B) * sizeof(int64_t));
    if (scan.ascending_cover) continue;
    const int64_t* inv = inverse_.data() + at.bag(f, 0);
    uint8_t* read = read_.data() + bag_begin_[fi];
    std::fill(read, read + bf, 0);
    for (int64_t b = 0; b < B; ++b) read[inv[b]] = 1;
    unread_ = unread_ || std::find(read, read + bf, uint8_t{0}) != read + bf;
  }
  return Status::Ok();
}

// A bag that no output sample reads is not in the expanded batch, so its ids must be neither
// looked up nor trained: a zero gradient still moves a row under Adam, LAMB or weight decay, and
// a dynamic table would insert the ids. Such bags become empty in the padded batch, their ids and
// weights left out of a copy of the values (made only when one of them holds ids). Only a sound
// view is thinned (lengths non-negative and summing to num_values; under the ERROR bounds policy
// every id inside its fixed tables, and with the non-finite check every weight finite): a
// malformed one runs whole, for the padded batch's checks to name what is wrong at its position
// in the caller's values (a position in the copy would not be). Ids a CLAMP or SKIP policy
// accepts, and weights the check does not look at, do not stop the thinning: the unread bags'
// ids are left out whatever they are.
void VbeStep::DropUnreadBags(const Layout& l, const VbeBatch& v, const RouteOptions& route,
                             Batch* padded) {
  const Batch& k = v.kjt;
  const auto nb = static_cast<size_t>(bag_begin_.back());
  // TakeInverse marked the bags of the features it did not find covered; the others are all read.
  for (int64_t f = 0; f < features_; ++f) {
    const auto fi = static_cast<size_t>(f);
    if (covered_[fi] != 0)
      std::fill(read_.begin() + bag_begin_[fi], read_.begin() + bag_begin_[fi + 1], 1);
  }
  const size_t width = k.values_dtype == DType::kInt64   ? sizeof(int64_t)
                       : k.values_dtype == DType::kInt32 ? sizeof(int32_t)
                                                         : 0;
  // Every field check of CheckBatchFields that the copy would hide (it sets the copy's counts
  // from what it copies): a weights count without weights included.
  if (width == 0 || (k.num_values > 0 && k.values == nullptr) ||
      (k.weights == nullptr && k.num_weights != 0) ||
      (k.weights != nullptr && k.num_weights != k.num_values))
    return;
  size_t sum = 0, dropped = 0;
  for (size_t j = 0; j < nb; ++j) {
    if (k.lengths[j] < 0) return;
    sum += static_cast<size_t>(k.lengths[j]);
    if (read_[j] == 0) dropped += static_cast<size_t>(k.lengths[j]);
  }
  if (dropped == 0 || sum != k.num_values) return;
  const auto* bytes = static_cast<const uint8_t*>(k.values);
  const bool ids_checked = route.bounds == BoundsPolicy::kError;
  const bool weights_checked = route.check_non_finite && k.weights != nullptr;
  size_t pos = 0;
  for (int64_t f = 0; (ids_checked || weights_checked) && f < features_; ++f)
    for (int64_t j = bag_begin_[static_cast<size_t>(f)]; j < bag_begin_[static_cast<size_t>(f) + 1];
         ++j) {
      const auto len = static_cast<size_t>(k.lengths[j]);
      for (size_t i = pos; i < pos + len; ++i) {
        const int64_t x = width == sizeof(int64_t) ? static_cast<const int64_t*>(k.values)[i]
                                                   : static_cast<const int32_t*>(k.values)[i];
        for (int32_t p : l.feature_pairs[static_cast<size_t>(f)]) {
          const auto& cfg = l.plan->tables[l.pairs[p].table];
          if (ids_checked && !cfg.dynamic.enabled && (x < 0 || x >= cfg.rows)) return;
        }
        if (weights_checked && !std::isfinite(k.weights[i])) return;
      }
      pos += len;
    }
  kept_values_.resize((k.num_values - dropped) * width);
  kept_weights_.resize(k.weights != nullptr ? k.num_values - dropped : 0);
  size_t at = 0;
  pos = 0;
  for (size_t j = 0; j < nb; ++j) {
    const auto len = static_cast<size_t>(k.lengths[j]);
    if (read_[j] != 0 && len > 0) {
      std::memcpy(kept_values_.data() + at * width, bytes + pos * width, len * width);
      if (k.weights != nullptr)
        std::memcpy(kept_weights_.data() + at, k.weights + pos, len * sizeof(float));
      at += len;
    }
    pos += len;
  }
  const BagIndex to = BagIndex::Plain(padded_samples_);
  for (int64_t f = 0; f < features_; ++f)
    for (int64_t b = 0;
         b < bag_begin_[static_cast<size_t>(f) + 1] - bag_begin_[static_cast<size_t>(f)]; ++b)
      if (read_[static_cast<size_t>(bag_begin_[static_cast<size_t>(f)] + b)] == 0)
        padded_lengths_[static_cast<size_t>(to.bag(f, b))] = 0;
  padded->values = kept_values_.empty() ? nullptr : kept_values_.data();
  padded->num_values = at;
  padded->weights = k.weights == nullptr ? nullptr : kept_weights_.data();
  padded->num_weights = k.weights == nullptr ? 0 : at;
}

void VbeStep::PlacePairs(const Layout& l) {
  places_.pairs.clear();
  places_.spans.clear();
  expanded_.clear();
  aux_len_ = 0;
  if (l.sequence) return;
  const int64_t D = l.output_dim;
  output_dim_ = D;
  col_offset_.assign(static_cast<size_t>(features_), 0);
  col_width_.assign(static_cast<size_t>(features_), 0);
  aux_begin_.assign(static_cast<size_t>(features_), -1);
  places_.pairs.assign(l.pairs.size(), PairRows::Place{});
  const BagIndex inv = BagIndex::Plain(out_samples_);
  int64_t caller = 0;  // feature-major: where the next feature starts in the caller's output
  int64_t aux = 0;
  for (int64_t f = 0; f < features_; ++f) {
    const FeatureColumns c = ColumnsOf(l, f);
    const auto fi = static_cast<size_t>(f);
    col_offset_[fi] = c.offset;
    col_width_[fi] = c.width;
    const int64_t bf = bag_begin_[fi + 1] - bag_begin_[fi];
    // A feature read in sample order (the candidates' features) is combined in place: its
    // inverse indices cover its B_f = B bags in ascending order, so they are the identity.
    const bool identity = has_inverse_ && bf == out_samples_ && covered_[fi] != 0;
    PairRows::Place at;
    at.rows = bf;
    if (!has_inverse_) {
      at.offset = caller;
      at.stride = c.width;
      caller += bf * c.width;
    } else if (identity) {
      at.offset = c.offset;
      at.stride = D;
    } else {
      at.aux = true;
      at.offset = aux;
      at.stride = c.width;
      aux_begin_[fi] = aux;
      aux += bf * c.width;
    }
    const int64_t base = at.offset;
    for (int32_t p : l.feature_pairs[fi]) {
      at.offset = base + (l.pairs[p].out_offset - c.offset);
      at.cols = l.plan->tables[l.pairs[p].table].dim;
      places_.pairs[static_cast<size_t>(p)] = at;
    }
  }
  aux_len_ = static_cast<size_t>(aux);
  // The scratch features, and the runs of adjacent columns they cover together (ExpandRows
  // streams the cache lines inside a run).
  for (int64_t f = 0; f < features_; ++f) {
    const auto fi = static_cast<size_t>(f);
    if (aux_begin_[fi] < 0 || col_width_[fi] == 0) continue;
    ExpandedFeature e;
    e.bag_offset = aux_begin_[fi];
    e.num_bags = bag_begin_[fi + 1] - bag_begin_[fi];
    e.width = col_width_[fi];
    e.col = col_offset_[fi];
    e.inverse = inverse_.data() + inv.bag(f, 0);
    expanded_.push_back(e);
  }
  for (size_t i = 0; i < expanded_.size();) {
    size_t j = i + 1;
    while (j < expanded_.size() &&
           expanded_[j - 1].col + expanded_[j - 1].width == expanded_[j].col)
      ++j;
    for (size_t k = i; k < j; ++k) {
      expanded_[k].span_begin = expanded_[i].col;
      expanded_[k].span_end = expanded_[j - 1].col + expanded_[j - 1].width;
    }
    i = j;
  }
  for (const PairRows::Place& at : places_.pairs) {
    if (at.rows == 0 || at.cols == 0) continue;
    if (!places_.spans.empty()) {
      PairRows::Place& last = places_.spans.back();
      if (last.aux == at.aux && last.stride == at.stride && last.rows == at.rows &&
          last.offset + last.cols == at.offset) {
        last.cols += at.cols;
        continue;
      }
    }
    places_.spans.push_back(at);
  }
}

void VbeStep::Expand(const ExecContext& ctx, const Layout& /*l*/, const float* aux,
                     float* out) const {
  if (!has_inverse_ || expanded_.empty()) return;
  // Sample-major, so each output row's expanded columns are written in one pass, in column order.
  // An expansion larger than a core's caches would be written back to memory anyway: its whole
  // lines are streamed, not read first (RESULTS.md, branch vbe7: below 4 MiB the caller's read
  // of rows still in cache paid for the lines read first; above it, streaming was cheaper, the
  // caller's read included).
  int64_t floats = 0;
  for (const ExpandedFeature& f : expanded_) floats += f.width;
  const bool stream = out_samples_ * floats * static_cast<int64_t>(sizeof(float)) >= kStreamBytes;
  ctx.ParallelFor(0, out_samples_, 256, [&](int64_t b0, int64_t b1) {
    ExpandRows(expanded_, aux, out, output_dim_, b0, b1, stream);
  });
}

void VbeStep::Reduce(const ExecContext& ctx, const float* grad, float* aux,
                     bool* in_place_finite) const {
  if (!has_inverse_ || expanded_.empty()) {
    if (in_place_finite != nullptr) *in_place_finite = InPlaceFinite(grad);
    return;
  }
  const auto n = static_cast<int64_t>(expanded_.size());
  // Each feature's bags are its own: features in parallel, each one's samples in ascending order.
  // A thread walks the rows once, in tiles, for all its features: a tile's rows are read once, in
  // memory order, and a run of samples that read one bag (a request's candidates) is summed in
  // registers (ReduceRows). The thread with the first features also checks the columns read in
  // place (InPlaceFinite) while the tile's rows are at hand.
  const int64_t grain = std::max<int64_t>(1, n / std::max(1, ctx.num_threads()));
  ctx.ParallelFor(0, n, grain, [&](int64_t f0, int64_t f1) {
    const std::span<const ExpandedFeature> mine(expanded_.data() + f0,
                                                static_cast<size_t>(f1 - f0));
    for (const ExpandedFeature& f : mine) {
      std::fill(aux + f.bag_offset, aux + f.bag_offset + f.num_bags * f.width, 0.0f);
    }
    const bool checks = in_place_finite != nullptr && f0 == 0;
    bool finite = true;
    // What this thread reads of a row: its features' columns, or the whole row with the checks.
    const int64_t c0 = checks ? 0 : mine.front().col;
    const int64_t c1 = checks ? output_dim_ : mine.back().col + mine.back().width;
    for (int64_t t0 = 0; t0 < out_samples_; t0 += kReduceTile) {
      const int64_t t1 = std::min(out_samples_, t0 + kReduceTile);
      PrefetchRowsToL2(grad + c0, output_dim_, c1 - c0, t1,
                       std::min(out_samples_, t1 + kReduceTile));
      ReduceRows(mine, grad, output_dim_, t0, t1, aux);
      if (!checks) continue;
      for (int64_t b = t0; b < t1; ++b)
        for (const PairRows::Place& at : places_.spans) {
          if (at.aux || b >= at.rows) continue;
          const auto cols = static_cast<size_t>(at.cols);
          finite &= FirstNonFinite(grad + at.offset + b * at.stride, cols) == cols;
        }
    }
    if (checks) *in_place_finite = finite;
  });
}

bool VbeStep::InPlaceFinite(const float* grad) const {
  for (const PairRows::Place& at : places_.spans) {
    if (at.aux) continue;
    const auto cols = static_cast<size_t>(at.cols);
    for (int64_t r = 0; r < at.rows; ++r)
      if (FirstNonFinite(grad + at.offset + r * at.stride, cols) != cols) return false;
  }
  return true;
}

void VbeStep::AuxBag(size_t i, int64_t* feature, int64_t* bag) const {
  *feature = -1;
  *bag = -1;
  for (int64_t f = 0; f < features_; ++f) {
    const auto fi = static_cast<size_t>(f);
    if (aux_begin_[fi] < 0 || col_width_[fi] == 0) continue;
    const auto at = static_cast<int64_t>(i) - aux_begin_[fi];
    if (at < 0 || at >= (bag_begin_[fi + 1] - bag_begin_[fi]) * col_width_[fi]) continue;
    *feature = f;
    *bag = at / col_width_[fi];
    return;
  }
}

void VbeStep::Scatter(const Layout& l, const float* padded, float* out) const {
  // Sequence collections only (a pooled one's rows are placed by the combine, PlacePairs).
  const auto D = static_cast<size_t>(l.output_dim);
  const BagIndex inv = BagIndex::Plain(out_samples_);
  const BagIndex pad = BagIndex::Plain(padded_samples_);
  if (!has_inverse_) {
    if (output_len_ > 0) std::memcpy(out, padded, output_len_ * sizeof(float));
    return;
  }
  // The expanded batch's ids, feature-major then sample by sample: each the rows of its bag.
  float* dst = out;
  for (int64_t f = 0; f < features_; ++f)
    for (int64_t b = 0; b < out_samples_; ++b) {
      const int64_t k = pad.bag(f, inverse_[inv.bag(f, b)]);
      const auto n = static_cast<size_t>(value_begin_[k + 1] - value_begin_[k]) * D;
      if (n > 0)
        std::memcpy(dst, padded + static_cast<size_t>(value_begin_[k]) * D, n * sizeof(float));
      dst += n;
    }
}

void VbeStep::Gather(const Layout& l, const float* grad, float* padded) const {
  // Sequence collections only (a pooled one's gradient is read in place, or Reduce).
  const auto D = static_cast<size_t>(l.output_dim);
  const BagIndex inv = BagIndex::Plain(out_samples_);
  const BagIndex pad = BagIndex::Plain(padded_samples_);
  if (!has_inverse_) {
    if (padded_len_ > 0) std::memcpy(padded, grad, padded_len_ * sizeof(float));
    return;
  }
  std::fill(padded, padded + padded_len_, 0.0f);
  // Each id row of the expanded batch is added to the row of the id it copied, in the expanded
  // batch's order (feature-major, then ascending sample).
  const float* src = grad;
  for (int64_t f = 0; f < features_; ++f)
    for (int64_t b = 0; b < out_samples_; ++b) {
      const int64_t k = pad.bag(f, inverse_[inv.bag(f, b)]);
      float* dst = padded + static_cast<size_t>(value_begin_[k]) * D;
      const auto n = static_cast<size_t>(value_begin_[k + 1] - value_begin_[k]) * D;
      for (size_t i = 0; i < n; ++i) dst[i] += src[i];
      src += n;
    }
}

}  // namespace shardrec::embedding
