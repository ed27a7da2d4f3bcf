// Weight storage of the local shards: fp32 tables live in the parameter arena next to the
// optimizer states, fp16/bf16 tables in a 16-bit arena per dtype; math is always fp32.
#include "impl/core/half.h"
#include "impl/embedding/collection.h"

namespace shardrec::embedding {

void* EmbeddingCollection::ShardWeights(const LocalShard& ls) {
  switch (ls.dtype) {
    case DType::kFloat16:
      return weights_fp16_.data() + ls.weight_offset;
    case DType::kBFloat16:
      return weights_bf16_.data() + ls.weight_offset;
    default:
      return weights_data() + ls.weight_offset;
  }
}

kernels::WeightsView EmbeddingCollection::View(const LocalShard& ls) {
  return kernels::WeightsView{ShardWeights(ls), ls.dtype, ls.rows, ls.cols, ls.cols};
}

void EmbeddingCollection::ReadRow(const LocalShard& ls, int64_t row, float* out) {
  const size_t at = static_cast<size_t>(row) * static_cast<size_t>(ls.cols);
  const int32_t n = ls.cols;
  if (ls.dtype == DType::kFloat16) {
    const uint16_t* src = static_cast<const uint16_t*>(ShardWeights(ls)) + at;
    for (int32_t c = 0; c < n; ++c) out[c] = HalfToFloat(src[c]);
  } else if (ls.dtype == DType::kBFloat16) {
    const uint16_t* src = static_cast<const uint16_t*>(ShardWeights(ls)) + at;
    for (int32_t c = 0; c < n; ++c) out[c] = BFloat16ToFloat(src[c]);
  } else {
    const float* src = static_cast<const float*>(ShardWeights(ls)) + at;
    for (int32_t c = 0; c < n; ++c) out[c] = src[c];
  }
}

void EmbeddingCollection::WriteRow(const LocalShard& ls, int64_t row, const float* in) {
  const size_t at = static_cast<size_t>(row) * static_cast<size_t>(ls.cols);
  const int32_t n = ls.cols;
  if (ls.dtype == DType::kFloat16) {
    uint16_t* dst = static_cast<uint16_t*>(ShardWeights(ls)) + at;
    for (int32_t c = 0; c < n; ++c) dst[c] = FloatToHalf(in[c]);
  } else if (ls.dtype == DType::kBFloat16) {
    uint16_t* dst = static_cast<uint16_t*>(ShardWeights(ls)) + at;
    for (int32_t c = 0; c < n; ++c) dst[c] = FloatToBFloat16(in[c]);
  } else {
    float* dst = static_cast<float*>(ShardWeights(ls)) + at;
    for (int32_t c = 0; c < n; ++c) dst[c] = in[c];
  }
}

std::vector<ParamBuffer> EmbeddingCollection::LocalParameterBuffers() {
  std::vector<ParamBuffer> out = {
      {"weights", weights_data(), layout_.weights_size, DType::kFloat32},
      {"optimizer_states", states_data(), layout_.states_size, DType::kFloat32}};
  if (layout_.weights_fp16_size > 0)
    out.push_back(
        {"weights_fp16", weights_fp16_.data(), layout_.weights_fp16_size, DType::kFloat16});
  if (layout_.weights_bf16_size > 0)
    out.push_back(
        {"weights_bf16", weights_bf16_.data(), layout_.weights_bf16_size, DType::kBFloat16});
  out.push_back({"step", &step_, 1, DType::kInt64});
  return out;
}

}  // namespace shardrec::embedding
