// The VBE serving lookup: the view checked whole (sizes, lengths, weights, inverse indices, ids
// under the ERROR policy) before anything is written, then every bag of every feature looked up
// once into its feature-major place, which is the output without inverse indices and, with them,
// a scratch copied row by row to the samples that read each bag (a feature whose inverse indices
// are the identity, a request's candidate feature, is summed into its output rows directly).
#include "impl/serving/lookup_vbe.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "impl/core/check.h"
#include "impl/core/extent.h"
#include "impl/serving/bag_lookup.h"

namespace shardrec::serving {
namespace {

// The largest B_f or output batch a view may give (as the plain lookup's largest batch_size), so
// that sums and products of sizes stay far from overflowing.
constexpr int64_t kMaxBatch = int64_t{1} << 40;

// Where each feature's bags, values and pooled columns are, from a view whose sizes are checked.
struct Layout {
  std::vector<FeatureBags> bags;    // per feature: its lengths and values
  std::vector<int64_t> width;       // pooled: per feature, its tables' dims added up
  std::vector<int64_t> first_col;   // pooled: per feature, its first column of an output row
  std::vector<size_t> compact_off;  // pooled: per feature, where its B_f rows start feature-major
  size_t compact_size = 0;          // pooled: sum_f B_f x width_f
};

// The per-feature columns of a pooled model: the pairs of a feature are adjacent (Model::Finish
// lays them out feature-major), so its width_f columns are one run.
void Columns(const Model& m, Layout* l) {
  const size_t F = m.features.size();
  l->width.assign(F, 0);
  l->first_col.assign(F, -1);
  for (const Pair& p : m.pairs) {
    if (l->first_col[p.feature] < 0) l->first_col[p.feature] = p.out_offset;
    l->width[p.feature] += m.tables[p.table].dim;
  }
}

Status CheckSizes(const Model& m, const VbeRequest& r) {
  const size_t F = m.features.size();
  if (r.bags.num_features != F)
    return Status::InvalidArgument("batch has ", r.bags.num_features, " features, the model ", F);
  if (r.num_batch_sizes != F)
    return Status::InvalidArgument("batch has ", r.num_batch_sizes,
                                   " feature batch sizes, the model ", F, " features");
  uint64_t total = 0;
  int64_t largest = 0;
  for (size_t f = 0; f < F; ++f) {
    const int64_t bf = r.batch_sizes[f];
    if (bf < 0 || bf > kMaxBatch)
      return Status::InvalidArgument("feature '", m.features[f], "': batch size ", bf,
                                     " is outside [0, 2^40]");
    total += static_cast<uint64_t>(bf);
    largest = std::max(largest, bf);
  }
  if (r.bags.num_lengths != total)
    return Status::InvalidArgument("batch has ", r.bags.num_lengths,
                                   " lengths, the feature batch sizes add up to ", total);
  if (r.bags.num_lengths > 0 && r.bags.lengths == nullptr)
    return Status::InvalidArgument("batch lengths must not be NULL");
  const int64_t B = r.bags.batch_size;
  if (r.inverse == nullptr) {
    if (r.num_inverse != 0)
      return Status::InvalidArgument("batch has NULL inverse indices but num_inverse_indices ",
                                     r.num_inverse);
    if (B != largest)
      return Status::InvalidArgument("batch_size ", B, " must be the largest feature batch size (",
                                     largest, ") when no inverse indices are given");
    return Status::Ok();
  }
  if (B < 0 || B > kMaxBatch)
    return Status::InvalidArgument("batch_size ", B, " is outside [0, 2^40]");
  if (r.num_inverse != F * static_cast<uint64_t>(B))
    return Status::InvalidArgument("batch has ", r.num_inverse, " inverse indices, expected ", F,
                                   " x ", B);
  return Status::Ok();
}

// Bag lengths not negative; fills l->bags. Needs CheckSizes.
Status CheckLengths(const Model& m, const VbeRequest& r, Layout* l) {
  const size_t F = m.features.size();
  l->bags.resize(F);
  size_t k = 0;
  uint64_t pos = 0;
  for (size_t f = 0; f < F; ++f) {
    FeatureBags& fb = l->bags[f];
    fb.feature = static_cast<int32_t>(f);
    fb.lengths = r.bags.lengths + k;
    fb.count = r.batch_sizes[f];
    fb.begin = pos;
    for (int64_t b = 0; b < fb.count; ++b, ++k) {
      if (fb.lengths[b] < 0)
        return Status::InvalidArgument("batch: feature '", m.features[f], "' sample ", b,
                                       ": negative length ", fb.lengths[b]);
      pos += static_cast<uint64_t>(fb.lengths[b]);
    }
    fb.end = pos;
  }
  return Status::Ok();
}

// Every inverse index in [0, B_f). Needs CheckSizes.
Status CheckInverse(const Model& m, const VbeRequest& r) {
  if (r.inverse == nullptr) return Status::Ok();
  const auto B = static_cast<size_t>(r.bags.batch_size);
  for (size_t f = 0; f < m.features.size(); ++f) {
    const int64_t bf = r.batch_sizes[f];
    for (size_t b = 0; b < B; ++b) {
      const int64_t k = r.inverse[f * B + b];
      if (k < 0 || k >= bf)
        // Worded as the training forward words it (embedding/vbe.cc), so one parser reads both.
        return Status::InvalidArgument("batch: feature '", m.features[f], "' sample ", b,
                                       ": inverse index ", k, " is outside [0, ", bf,
                                       ") (the feature's batch size)");
    }
  }
  return Status::Ok();
}

// Ids of the expanded sequence batch: each output sample's bag counted once per reader. Needs
// CheckLengths and CheckInverse.
uint64_t ExpandedValues(const VbeRequest& r, const Layout& l) {
  const auto B = static_cast<size_t>(r.bags.batch_size);
  uint64_t n = 0;
  for (size_t f = 0; f < l.bags.size(); ++f)
    for (size_t b = 0; b < B; ++b)
      n += static_cast<uint64_t>(l.bags[f].lengths[r.inverse[f * B + b]]);
  return n;
}

// The output's floats, from a view that passed the checks above (the lengths and inverse indices
// only for a sequence model with inverse indices).
Status Size(const Model& m, const VbeRequest& r, const Layout& l, size_t* out) {
  size_t rows = 0, width = static_cast<size_t>(m.output_dim);
  if (m.sequence) {
    rows = r.inverse != nullptr ? ExpandedValues(r, l) : r.bags.num_values;
  } else if (r.inverse != nullptr) {
    rows = static_cast<size_t>(r.bags.batch_size);
  } else {
    // Feature-major rows of their own widths: count the floats as rows of one float.
    width = 1;
    for (size_t f = 0; f < m.features.size(); ++f)
      rows += static_cast<size_t>(r.batch_sizes[f]) * static_cast<size_t>(l.width[f]);
  }
  const auto n = core::BufferItems(rows, width, sizeof(float));
  if (!n)
    return Status::InvalidArgument("the batch's output (", rows, " rows of ", width,
                                   " floats) is more than any buffer holds");
  *out = *n;
  return Status::Ok();
}

Status CheckIds(const Model& m, const Layout& l, const Ids& ids) {
  if (m.bounds != Bounds::kError) return Status::Ok();
  if (m.sequence) {
    for (size_t f = 0; f < m.features.size(); ++f)
      if (m.feature_table[f] >= 0)
        SR_RETURN_IF_ERROR(CheckIdsInRange(m, m.feature_table[f], l.bags[f], ids));
    return Status::Ok();
  }
  for (const Pair& p : m.pairs)
    SR_RETURN_IF_ERROR(CheckIdsInRange(m, p.table, l.bags[p.feature], ids));
  return Status::Ok();
}

// Whether feature f's inverse indices are 0, 1, ..., B - 1 (a candidate feature of a request):
// its bags are then the output rows themselves and are summed in place, with no copy.
bool Identity(const VbeRequest& r, size_t f) {
  const auto B = static_cast<size_t>(r.bags.batch_size);
  if (r.batch_sizes[f] != r.bags.batch_size) return false;
  for (size_t b = 0; b < B; ++b)
    if (r.inverse[f * B + b] != static_cast<int64_t>(b)) return false;
  return true;
}

Status Pooled(const Model& m, const VbeRequest& r, Layout* l, const Ids& ids, float* out) {
  const size_t F = m.features.size();
  const auto D = static_cast<int64_t>(m.output_dim);
  // Without inverse indices every feature is written in place, feature-major; with them, the
  // features whose inverse indices are not the identity go through a feature-major scratch.
  std::vector<bool> direct(F, r.inverse == nullptr);
  l->compact_off.assign(F, 0);
  size_t n = 0;
  for (size_t f = 0; f < F; ++f) {
    if (r.inverse != nullptr) direct[f] = Identity(r, f);
    if (r.inverse != nullptr && direct[f]) continue;
    l->compact_off[f] = n;
    n += static_cast<size_t>(r.batch_sizes[f]) * static_cast<size_t>(l->width[f]);
  }
  std::vector<float> compact(r.inverse != nullptr ? n : 0);
  BagScratch scratch;
  for (const Pair& p : m.pairs) {
    const size_t f = static_cast<size_t>(p.feature);
    if (r.inverse != nullptr && direct[f]) {
      SR_RETURN_IF_ERROR(
          PooledBags(m, p.table, l->bags[f], ids, r.bags.weights, &scratch, out, D, p.out_offset));
      continue;
    }
    float* target = r.inverse != nullptr ? compact.data() : out;
    SR_RETURN_IF_ERROR(PooledBags(m, p.table, l->bags[f], ids, r.bags.weights, &scratch,
                                  target + l->compact_off[f], l->width[f],
                                  p.out_offset - l->first_col[f]));
  }
  if (r.inverse == nullptr) return Status::Ok();
  const auto B = static_cast<size_t>(r.bags.batch_size);
  for (size_t b = 0; b < B; ++b) {
    float* row = out + b * static_cast<size_t>(D);
    for (size_t f = 0; f < F; ++f) {
      if (direct[f]) continue;
      const auto w = static_cast<size_t>(l->width[f]);
      const auto k = static_cast<size_t>(r.inverse[f * B + b]);
      std::memcpy(row + l->first_col[f], compact.data() + l->compact_off[f] + k * w,
                  w * sizeof(float));
    }
  }
  return Status::Ok();
}

Status Sequence(const Model& m, const VbeRequest& r, const Layout& l, const Ids& ids, float* out) {
  const auto D = static_cast<size_t>(m.output_dim);
  std::vector<float> compact(r.inverse != nullptr ? r.bags.num_values * D : 0);
  float* target = r.inverse != nullptr ? compact.data() : out;
  DecodeBuffers buffers(m);
  for (const FeatureBags& fb : l.bags)
    SR_RETURN_IF_ERROR(SequenceBags(m, fb, ids, r.bags.weights, &buffers, target));
  if (r.inverse == nullptr) return Status::Ok();
  const auto B = static_cast<size_t>(r.bags.batch_size);
  size_t cursor = 0;
  std::vector<size_t> start;
  for (size_t f = 0; f < l.bags.size(); ++f) {
    const FeatureBags& fb = l.bags[f];
    start.resize(static_cast<size_t>(fb.count));
    size_t pos = fb.begin;
    for (int64_t k = 0; k < fb.count; ++k) {
      start[k] = pos;
      pos += static_cast<size_t>(fb.lengths[k]);
    }
    for (size_t b = 0; b < B; ++b) {
      const auto k = static_cast<size_t>(r.inverse[f * B + b]);
      const auto len = static_cast<size_t>(fb.lengths[k]);
      std::memcpy(out + cursor * D, compact.data() + start[k] * D, len * D * sizeof(float));
      cursor += len;
    }
  }
  return Status::Ok();
}

// A view without batch sizes is its plain batch.
Status CheckPlain(const VbeRequest& r) {
  if (r.num_batch_sizes != 0 || r.inverse != nullptr || r.num_inverse != 0)
    return Status::InvalidArgument("batch has NULL feature batch sizes (a plain batch) but ",
                                   r.num_batch_sizes, " feature batch sizes and ",
                                   r.inverse == nullptr ? "NULL" : "non-NULL", " inverse indices (",
                                   r.num_inverse, "); a plain batch takes neither");
  return Status::Ok();
}

}  // namespace

Status VbeOutputSize(const Model& m, const VbeRequest& r, size_t* out) {
  if (r.batch_sizes == nullptr) {
    SR_RETURN_IF_ERROR(CheckPlain(r));
    const size_t n = OutputSize(m, r.bags);
    if (n == kNoBuffer)
      return Status::InvalidArgument("the batch's output is more than any buffer holds");
    *out = n;
    return Status::Ok();
  }
  SR_RETURN_IF_ERROR(CheckSizes(m, r));
  Layout l;
  if (!m.sequence) Columns(m, &l);
  if (m.sequence && r.inverse != nullptr) {
    SR_RETURN_IF_ERROR(CheckLengths(m, r, &l));
    SR_RETURN_IF_ERROR(CheckInverse(m, r));
  }
  return Size(m, r, l, out);
}

Status LookupVbe(const Model& m, const VbeRequest& r, float* out, size_t out_len) {
  if (r.batch_sizes == nullptr) {
    SR_RETURN_IF_ERROR(CheckPlain(r));
    return Lookup(m, r.bags, out, out_len);
  }
  SR_RETURN_IF_ERROR(CheckSizes(m, r));
  Layout l;
  SR_RETURN_IF_ERROR(CheckLengths(m, r, &l));
  const uint64_t total = l.bags.empty() ? 0 : l.bags.back().end;
  if (total != r.bags.num_values)
    return Status::InvalidArgument("batch lengths sum to ", total, " but num_values is ",
                                   r.bags.num_values);
  SR_RETURN_IF_ERROR(CheckValuesAndWeights(r.bags));
  SR_RETURN_IF_ERROR(CheckInverse(m, r));
  if (!m.sequence) Columns(m, &l);
  size_t need = 0;
  SR_RETURN_IF_ERROR(Size(m, r, l, &need));
  if (out_len != need)
    return Status::InvalidArgument("out_len is ", out_len, ", the batch's output takes ", need,
                                   " floats");
  if (need > 0 && out == nullptr) return Status::InvalidArgument("out must not be NULL");
  const Ids ids = IdsOf(r.bags);
  SR_RETURN_IF_ERROR(CheckIds(m, l, ids));
  return m.sequence ? Sequence(m, r, l, ids, out) : Pooled(m, r, &l, ids, out);
}

}  // namespace shardrec::serving
