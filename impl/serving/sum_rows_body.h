// Internal: the row summation written once, included by exactly one translation unit per
// instruction set. Internal linkage and plain data only, so no copy built for a wider
// instruction set can stand in for the baseline's.
#pragma once

#include <cstddef>
#include <cstdint>

namespace shardrec::serving {
namespace {

// Columns [c0, c0 + kTile): the sums stay in registers across the rows.
template <bool kWeighted, int kTile>
inline void SumTile(const float* const* x, const float* w, size_t n, int32_t c0, bool first,
                    float* out) {
  float acc[kTile];
  for (int k = 0; k < kTile; ++k) acc[k] = first ? 0.0f : out[c0 + k];
  for (size_t j = 0; j < n; ++j) {
    const float* row = x[j] + c0;
#pragma GCC unroll 32
    for (int k = 0; k < kTile; ++k) acc[k] += kWeighted ? w[j] * row[k] : row[k];
  }
  for (int k = 0; k < kTile; ++k) out[c0 + k] = acc[k];
}

template <bool kWeighted>
inline void SumRowsOf(const float* const* x, const float* w, size_t n, int32_t dim, bool first,
                      float* out) {
  int32_t c0 = 0;
  for (; c0 + 32 <= dim; c0 += 32) SumTile<kWeighted, 32>(x, w, n, c0, first, out);
  for (; c0 + 8 <= dim; c0 += 8) SumTile<kWeighted, 8>(x, w, n, c0, first, out);
  for (; c0 < dim; ++c0) SumTile<kWeighted, 1>(x, w, n, c0, first, out);
}

inline void SumRowsBody(const float* const* x, const float* w, size_t n, int32_t dim, bool first,
                        float* out) {
  if (w != nullptr) {
    SumRowsOf<true>(x, w, n, dim, first, out);
  } else {
    SumRowsOf<false>(x, w, n, dim, first, out);
  }
}

}  // namespace
}  // namespace shardrec::serving
