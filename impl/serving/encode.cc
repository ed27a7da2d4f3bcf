// fp32 rows to serving storage. Quantization rounds each code to nearest, so a value reads back
// within scale / 2 of itself (plus the fp32 rounding of q * scale + bias). FP8 rows are fp8.h's
// (a power-of-two scale, codes rounded to nearest even): within max(2^-4 |x|, 2^-10 scale) for
// E4M3, max(2^-3 |x|, 2^-17 scale) for E5M2.
#include "impl/serving/encode.h"

#include <cmath>
#include <cstring>

#include "impl/core/fp8.h"
#include "impl/core/half.h"

namespace shardrec::serving {

void QuantizeRow(const float* x, int32_t dim, int bits, uint8_t* dst) {
  float lo = x[0], hi = x[0];
  for (int32_t c = 1; c < dim; ++c) {
    lo = std::fmin(lo, x[c]);
    hi = std::fmax(hi, x[c]);
  }
  const float levels = static_cast<float>((1 << bits) - 1);
  const float scale = (hi - lo) / levels;
  std::memcpy(dst, &scale, 4);
  std::memcpy(dst + 4, &lo, 4);
  uint8_t* q = dst + kQuantHeaderBytes;
  if (bits == 4) std::memset(q, 0, (static_cast<size_t>(dim) + 1) / 2);
  for (int32_t c = 0; c < dim; ++c) {
    float code = scale > 0.0f ? std::nearbyint((x[c] - lo) / scale) : 0.0f;
    code = std::fmin(std::fmax(code, 0.0f), levels);
    const auto v = static_cast<uint8_t>(code);
    if (bits == 8) {
      q[c] = v;
    } else {
      q[c / 2] |= static_cast<uint8_t>((c % 2 == 0) ? v : (v << 4));
    }
  }
}

Status EncodeRows(const float* src, int64_t rows, int32_t dim, Storage s, uint8_t* dst,
                  const std::string& what, NonFinite non_finite) {
  const uint64_t rb = RowBytes(s, dim);
  const bool quantized = IsEncodedStorage(s);
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = src + r * dim;
    uint8_t* d = dst + static_cast<uint64_t>(r) * rb;
    if (quantized || non_finite == NonFinite::kRefuse) {
      for (int32_t c = 0; c < dim; ++c)
        if (!std::isfinite(x[c]))
          return Status::InvalidArgument(what, " row ", r, " column ", c, " holds ", x[c],
                                         ", a non-finite value, which ", StorageName(s),
                                         quantized ? " cannot store" : " does not take in a delta");
    }
    switch (s) {
      case Storage::kFp32:
        std::memcpy(d, x, rb);
        break;
      case Storage::kFp16:
      case Storage::kBf16:
        for (int32_t c = 0; c < dim; ++c) {
          const uint16_t h = s == Storage::kFp16 ? FloatToHalf(x[c]) : FloatToBFloat16(x[c]);
          // An exponent of all ones with a zero fraction is infinity: a finite value beyond the
          // storage's range would be served as one.
          const bool inf =
              s == Storage::kFp16 ? (h & 0x7fffu) == 0x7c00u : (h & 0x7fffu) == 0x7f80u;
          if (inf && std::isfinite(x[c]))
            return Status::InvalidArgument(what, " row ", r, " column ", c, " holds ", x[c],
                                           ", beyond ", StorageName(s),
                                           "'s range (it would read as infinity); serve the "
                                           "table as fp32",
                                           s == Storage::kFp16 ? " or bf16" : "");
          std::memcpy(d + 2 * c, &h, 2);
        }
        break;
      case Storage::kInt8:
      case Storage::kInt4: {
        // The row's scale is (max - min) / levels: a span beyond fp32's range (finite values of
        // both signs near its limits) would make it infinite and read every value back as NaN.
        float lo = x[0], hi = x[0];
        for (int32_t c = 1; c < dim; ++c) {
          lo = std::fmin(lo, x[c]);
          hi = std::fmax(hi, x[c]);
        }
        if (!std::isfinite(hi - lo))
          return Status::InvalidArgument(what, " row ", r, " spans ", lo, " to ", hi,
                                         ", wider than fp32 can hold, which ", StorageName(s),
                                         " cannot scale; serve the table as fp32");
        QuantizeRow(x, dim, s == Storage::kInt8 ? 8 : 4, d);
        break;
      }
      case Storage::kFp8E4M3:
      case Storage::kFp8E5M2:
        // Finite values only (checked above), so the scale is that of the largest magnitude.
        EncodeFp8Row(s == Storage::kFp8E4M3 ? Fp8Kind::kE4M3 : Fp8Kind::kE5M2, x, dim, d);
        break;
      case Storage::kAsTrained:
        return Status::Internal("EncodeRows with an unresolved storage");
    }
  }
  return Status::Ok();
}

}  // namespace shardrec::serving
