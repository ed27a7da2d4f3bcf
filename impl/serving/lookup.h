// The serving lookup: one request (a KJT in host memory) against one model version, with the
// training forward's output layout. Pure: it reads the model and writes only the caller's output.
#pragma once

#include <cstddef>
#include <cstdint>

#include "impl/core/status.h"
#include "impl/serving/model.h"

namespace shardrec::serving {

// A keyed jagged batch in host memory (the C API's KJT view, checked for NULLs by the caller).
struct Request {
  int64_t batch_size = 0;
  size_t num_features = 0;
  const int32_t* lengths = nullptr;
  size_t num_lengths = 0;
  const void* values = nullptr;
  bool values_int64 = true;
  size_t num_values = 0;
  const float* weights = nullptr;  // one per value, or null
  size_t num_weights = 0;
};

// Floats the output of `r` takes: batch_size x output_dim pooled, num_values x dim sequence;
// kNoBuffer when that many floats could not be addressed (the product would wrap around).
inline constexpr size_t kNoBuffer = SIZE_MAX;
size_t OutputSize(const Model& m, const Request& r);

// Validates `r` (shape, lengths, out_len; kInvalidArgument with the feature, sample, position
// and id) and writes its output. Ids outside a fixed table follow m.bounds; ids without a row in
// a dynamic table read zeros and count in a MEAN bag's divisor, as in training. Sums run in fp32 in
// id order (weight x value, no fused multiply-add), the order of the training forward's host
// kernels; quantized rows are dequantized as q * scale + bias on the fly. On error the output
// is unspecified.
Status Lookup(const Model& m, const Request& r, float* out, size_t out_len);

}  // namespace shardrec::serving
