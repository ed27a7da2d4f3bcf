// Serving lookups: the request checked, then per (feature, table) pair the bags summed
// (bag_lookup.h) into the training forward's output layout.
#include "impl/serving/lookup.h"

#include <vector>

#include "impl/core/check.h"
#include "impl/core/extent.h"
#include "impl/serving/bag_lookup.h"

namespace shardrec::serving {
namespace {

Status CheckRequest(const Model& m, const Request& r, size_t out_len, const float* out) {
  if (r.num_features != m.features.size())
    return Status::InvalidArgument("batch has ", r.num_features, " features, the model ",
                                   m.features.size());
  if (r.batch_size < 0)
    return Status::InvalidArgument("batch_size ", r.batch_size, " must not be negative");
  const auto B = static_cast<uint64_t>(r.batch_size);
  if (B > (uint64_t{1} << 40) || r.num_lengths != B * r.num_features)
    return Status::InvalidArgument("batch has ", r.num_lengths, " lengths, expected ",
                                   r.num_features, " x ", B);
  if (r.num_lengths > 0 && r.lengths == nullptr)
    return Status::InvalidArgument("batch lengths must not be NULL");
  uint64_t total = 0;
  for (size_t k = 0; k < r.num_lengths; ++k) {
    if (r.lengths[k] < 0)
      return Status::InvalidArgument("feature ", m.features[k / B], " sample ", k % B, ": length ",
                                     r.lengths[k], " is negative");
    total += static_cast<uint64_t>(r.lengths[k]);
  }
  if (total != r.num_values)
    return Status::InvalidArgument("batch lengths sum to ", total, " but num_values is ",
                                   r.num_values);
  SR_RETURN_IF_ERROR(CheckValuesAndWeights(r));
  const size_t need = OutputSize(m, r);
  if (need == kNoBuffer)
    return Status::InvalidArgument(
        "the batch's output (", m.sequence ? r.num_values : static_cast<size_t>(r.batch_size),
        " rows of ", m.output_dim, " floats) is more than any buffer holds");
  if (out_len != need)
    return Status::InvalidArgument("out_len is ", out_len, ", the batch's output takes ", need,
                                   " floats");
  if (need > 0 && out == nullptr) return Status::InvalidArgument("out must not be NULL");
  return Status::Ok();
}

}  // namespace

size_t OutputSize(const Model& m, const Request& r) {
  const size_t rows = m.sequence ? r.num_values : static_cast<size_t>(r.batch_size);
  return core::BufferItems(rows, static_cast<size_t>(m.output_dim), sizeof(float))
      .value_or(kNoBuffer);
}

Status Lookup(const Model& m, const Request& r, float* out, size_t out_len) {
  SR_RETURN_IF_ERROR(CheckRequest(m, r, out_len, out));
  const auto B = static_cast<size_t>(r.batch_size);
  std::vector<FeatureBags> bags(m.features.size());
  size_t pos = 0;
  for (size_t f = 0; f < m.features.size(); ++f) {
    FeatureBags& fb = bags[f];
    fb.feature = static_cast<int32_t>(f);
    fb.lengths = r.lengths + f * B;
    fb.count = r.batch_size;
    fb.begin = pos;
    for (size_t b = 0; b < B; ++b) pos += static_cast<size_t>(fb.lengths[b]);
    fb.end = pos;
  }
  const Ids ids = IdsOf(r);
  if (m.sequence) {
    DecodeBuffers buffers(m);
    for (const FeatureBags& fb : bags)
      SR_RETURN_IF_ERROR(SequenceBags(m, fb, ids, r.weights, &buffers, out));
    return Status::Ok();
  }
  BagScratch scratch;
  scratch.rows_to_l2 = RowsComeFromMemory(m);
  for (const Pair& p : m.pairs)
    SR_RETURN_IF_ERROR(PooledBags(m, p.table, bags[p.feature], ids, r.weights, &scratch, out,
                                  m.output_dim, p.out_offset));
  return Status::Ok();
}

}  // namespace shardrec::serving
