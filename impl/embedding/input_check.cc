// Input distribution's validation (input_dist.h): a batch's fields, its lengths and its weights,
// checked before any id is routed, the words every rejection of a batch uses (the device route
// says the same), and a forward's output buffer against its batch.
#include <cstring>
#include <optional>

#include "impl/core/extent.h"
#include "impl/core/finite.h"
#include "impl/embedding/input_dist.h"

namespace shardrec::embedding {

namespace {

Status CheckStructure(const sharding::Plan& plan, const Batch& b) {
  SR_RETURN_IF_ERROR(CheckBatchFields(plan, b));
  const size_t expect = b.num_lengths;
  size_t sum = 0;
  for (size_t i = 0; i < expect; ++i) {
    const int32_t len = b.lengths[i];
    if (len < 0) return NegativeLengthError(plan, b.batch_size, i, len);
    sum += static_cast<size_t>(len);  // at most 2^31 * expect: cannot wrap a 64-bit size_t
  }
  if (sum != b.num_values) return LengthSumError(sum, b.num_values);
  return Status::Ok();
}

// A NaN or infinite per-id weight names its feature, sample and position.
Status CheckWeightsFinite(const sharding::Plan& plan, const Batch& b) {
  if (b.weights == nullptr) return Status::Ok();
  const size_t i = FirstNonFinite(b.weights, b.num_values);
  if (i == b.num_values) return Status::Ok();
  // Only on error: walk the lengths to the bag that holds position i.
  size_t pos = 0;
  for (size_t k = 0; k < b.num_lengths; ++k) {
    pos += static_cast<size_t>(b.lengths[k]);
    if (i < pos) return NonFiniteWeightError(plan, b.batch_size, k, i, b.weights[i]);
  }
  return Status::InvalidArgument("batch: weight ", b.weights[i], " at value position ", i,
                                 " is not finite");
}

}  // namespace

Status CheckBatchFields(const sharding::Plan& plan, const Batch& b) {
  const int64_t nf = static_cast<int64_t>(plan.features.size());
  if (b.batch_size < 0)
    return Status::InvalidArgument("batch: batch_size must be >= 0, got ", b.batch_size);
  if (b.num_features != nf)
    // The C API's count is a size_t: one beyond int64 (SIZE_MAX) is named as the caller gave it.
    return Status::InvalidArgument("batch: num_features is ", static_cast<uint64_t>(b.num_features),
                                   " but the plan has ", nf, " features");
  // Every size computed from caller input is checked for overflow before it is trusted.
  int64_t expect_signed = 0;
  if (__builtin_mul_overflow(nf, b.batch_size, &expect_signed))
    return Status::InvalidArgument("batch: num_features * batch_size (", nf, " * ", b.batch_size,
                                   ") overflows");
  const size_t expect = static_cast<size_t>(expect_signed);
  if (b.num_lengths != expect)
    return Status::InvalidArgument("batch: num_lengths is ", b.num_lengths, ", expected ",
                                   "num_features * batch_size = ", expect);
  if (expect > 0 && b.lengths == nullptr)
    return Status::InvalidArgument("batch: lengths is NULL but ", expect, " lengths are expected");
  if (b.values_dtype != DType::kInt64 && b.values_dtype != DType::kInt32)
    return Status::InvalidArgument("batch: values dtype must be int32 or int64, got ",
                                   DTypeName(b.values_dtype));
  if (b.num_values > 0 && b.values == nullptr)
    return Status::InvalidArgument("batch: values is NULL but num_values is ", b.num_values);
  if (b.weights == nullptr && b.num_weights != 0)
    return Status::InvalidArgument("batch: weights is NULL but num_weights is ", b.num_weights);
  if (b.weights != nullptr && b.num_weights != b.num_values)
    return Status::InvalidArgument("batch: num_weights is ", b.num_weights, " but num_values is ",
                                   b.num_values, " (weights are per id)");
  return Status::Ok();
}

Status NegativeLengthError(const sharding::Plan& plan, int64_t batch_size, size_t k, int32_t len) {
  const size_t f = k / static_cast<size_t>(batch_size);
  return Status::InvalidArgument("batch: feature '", plan.features[f].name, "' sample ",
                                 k % static_cast<size_t>(batch_size), ": negative length ", len);
}

Status LengthSumError(size_t sum, size_t num_values) {
  return Status::InvalidArgument("batch: lengths sum to ", sum, " but num_values is ", num_values);
}

Status NonFiniteWeightError(const sharding::Plan& plan, int64_t batch_size, size_t k, size_t i,
                            float w) {
  const size_t B = static_cast<size_t>(batch_size);
  return Status::InvalidArgument("batch: feature '", plan.features[k / B].name, "' sample ", k % B,
                                 " (value position ", i, "): weight ", w, " is not finite");
}

Status IdOutOfRangeError(const sharding::Plan& plan, int32_t feature, int32_t table, int64_t sample,
                         size_t i, int64_t id) {
  const auto& cfg = plan.tables[table];
  return Status::InvalidArgument("batch: feature '", plan.features[feature].name, "' sample ",
                                 sample, " (value position ", i, "): id ", id,
                                 " is out of range [0, ", cfg.rows, ") of table '", cfg.name, "'");
}
Status CheckOutputBuffer(const Layout& layout, const OutputBuffer& buffer, int64_t batch_size,
                         int64_t num_values) {
  const size_t rows = static_cast<size_t>(layout.sequence ? num_values : batch_size);
  const std::optional<size_t> fits =
      core::BufferItems(rows, static_cast<size_t>(layout.output_dim), sizeof(float));
  if (!fits)
    return Status::InvalidArgument("this batch's output (", rows, " rows of ", layout.output_dim,
                                   " floats) is more than any buffer holds");
  const size_t need = *fits;
  if (buffer.out_len != need)
    return Status::InvalidArgument(
        "out_len is ", buffer.out_len, " but this batch needs ", need,
        layout.sequence ? " (num_values x dim)" : " (batch_size x output_dim)");
  if (need > 0 && buffer.out == nullptr) return Status::InvalidArgument("out must not be NULL");
  if (buffer.device_out != nullptr && !buffer.device_allowed)
    return Status::Internal("a device output for a collection that does not write one");
  return Status::Ok();
}

Status CheckBatch(const Layout& layout, const Batch& batch, bool check_non_finite,
                  const OutputBuffer* output, Status* output_verdict) {
  SR_RETURN_IF_ERROR(CheckStructure(*layout.plan, batch));
  if (check_non_finite) SR_RETURN_IF_ERROR(CheckWeightsFinite(*layout.plan, batch));
  if (output != nullptr)
    *output_verdict = CheckOutputBuffer(layout, *output, batch.batch_size,
                                        static_cast<int64_t>(batch.num_values));
  return Status::Ok();
}

}  // namespace shardrec::embedding
