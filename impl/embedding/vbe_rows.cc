// The VBE expansion's row kernels (vbe_rows.h). SSE2 on x86-64 (every x86-64 CPU has it, so no
// per-level build is needed: both kernels wait on memory, not on arithmetic); plain loops
// elsewhere.
#include "impl/embedding/vbe_rows.h"

#include <algorithm>
#include <cstdint>

#if defined(__x86_64__)
#include <emmintrin.h>
#endif

namespace shardrec::embedding {

namespace {

#if defined(__x86_64__)
// Rows ahead whose partly written lines ExpandRows asks for.
constexpr int64_t kAhead = 8;

// Floats [i0, i1) of a row piece copied from src to dst with plain stores.
inline void CopyPlain(float* dst, const float* src, int64_t i0, int64_t i1) {
  int64_t i = i0;
  for (; i + 4 <= i1; i += 4) _mm_storeu_ps(dst + i, _mm_loadu_ps(src + i));
  for (; i < i1; ++i) dst[i] = src[i];
}

// The same with streaming stores (dst + i0 16-byte aligned, i1 - i0 a multiple of 4).
inline void CopyStreamed(float* dst, const float* src, int64_t i0, int64_t i1) {
  int64_t i = i0;
  for (; i + 16 <= i1; i += 16) {
    const __m128 v0 = _mm_loadu_ps(src + i);
    const __m128 v1 = _mm_loadu_ps(src + i + 4);
    const __m128 v2 = _mm_loadu_ps(src + i + 8);
    const __m128 v3 = _mm_loadu_ps(src + i + 12);
    _mm_stream_ps(dst + i, v0);
    _mm_stream_ps(dst + i + 4, v1);
    _mm_stream_ps(dst + i + 8, v2);
    _mm_stream_ps(dst + i + 12, v3);
  }
  for (; i < i1; i += 4) _mm_stream_ps(dst + i, _mm_loadu_ps(src + i));
}

// `rows` rows of 4 * N floats, `stride` apart from `src`, added into dst one row after the
// other; dst is loaded once and stored once.
template <int N>
inline void SumRun(float* dst, const float* src, int64_t stride, int64_t rows) {
  __m128 acc[N];
  for (int k = 0; k < N; ++k) acc[k] = _mm_loadu_ps(dst + 4 * k);
  for (int64_t r = 0; r < rows; ++r, src += stride)
    for (int k = 0; k < N; ++k) acc[k] = _mm_add_ps(acc[k], _mm_loadu_ps(src + 4 * k));
  for (int k = 0; k < N; ++k) _mm_storeu_ps(dst + 4 * k, acc[k]);
}
#endif

// The same for `cols` floats of any count: each column's additions in row order.
void SumRunColumns(float* dst, const float* src, int64_t stride, int64_t rows, int64_t cols) {
  int64_t c = 0;
#if defined(__x86_64__)
  // Eight registers of accumulators hold 32 floats (128 bytes, two cache lines) of the rows.
  for (; c + 32 <= cols; c += 32) SumRun<8>(dst + c, src + c, stride, rows);
  for (; c + 4 <= cols; c += 4) SumRun<1>(dst + c, src + c, stride, rows);
#endif
  for (; c < cols; ++c) {
    float acc = dst[c];
    const float* s = src + c;
    for (int64_t r = 0; r < rows; ++r, s += stride) acc += *s;
    dst[c] = acc;
  }
}

}  // namespace

void ExpandRows(std::span<const ExpandedFeature> features, const float* bags, float* out,
                int64_t row_stride, int64_t b0, int64_t b1, bool stream) {
  for (int64_t b = b0; b < b1; ++b) {
    float* row = out + b * row_stride;
#if defined(__x86_64__)
    // A span's first and last lines are written only in part, so they are read first: asked for
    // kAhead rows ahead, their reads overlap instead of waiting in turn.
    if (stream && b + kAhead < b1) {
      const float* ahead = row + kAhead * row_stride;
      for (const ExpandedFeature& f : features) {
        if (f.col != f.span_begin) continue;
        __builtin_prefetch(ahead + f.span_begin, 1, 3);
        __builtin_prefetch(ahead + f.span_end - 1, 1, 3);
        asm volatile("");  // kept: GCC 12 may drop a loop of prefetches alone (core/prefetch.h)
      }
    }
#endif
    for (const ExpandedFeature& f : features) {
      const int64_t width = f.width;
      const float* src = bags + f.bag_offset + f.inverse[b] * width;
      float* dst = row + f.col;
#if defined(__x86_64__)
      // The piece's floats inside the span's whole lines, [m0, m1), are streamed in one loop
      // with no decision per store; a piece that is not 16-byte aligned is copied with plain
      // stores.
      const auto at = reinterpret_cast<uintptr_t>(dst);
      if (!stream || (at & 15) != 0) {
        CopyPlain(dst, src, 0, width);
        continue;
      }
      const auto lo = (reinterpret_cast<uintptr_t>(row + f.span_begin) + 63) & ~uintptr_t{63};
      const auto hi = reinterpret_cast<uintptr_t>(row + f.span_end) & ~uintptr_t{63};
      const int64_t whole = width & ~int64_t{3};
      const int64_t m0 =
          std::min(whole, lo > at ? static_cast<int64_t>((lo - at) / sizeof(float)) : 0);
      const int64_t m1 = std::max(
          m0, std::min(whole, hi > at ? static_cast<int64_t>((hi - at) / sizeof(float)) : 0));
      CopyPlain(dst, src, 0, m0);
      CopyStreamed(dst, src, m0, m1);
      CopyPlain(dst, src, m1, width);
#else
      for (int64_t i = 0; i < width; ++i) dst[i] = src[i];
#endif
    }
  }
#if defined(__x86_64__)
  // Streaming stores are weakly ordered: they are made visible before anyone reads the rows.
  if (stream) _mm_sfence();
#endif
}

void ReduceRows(std::span<const ExpandedFeature> features, const float* grad, int64_t row_stride,
                int64_t b0, int64_t b1, float* bags) {
  for (const ExpandedFeature& f : features) {
    for (int64_t b = b0; b < b1;) {
      const int64_t j = f.inverse[b];
      int64_t e = b + 1;
      while (e < b1 && f.inverse[e] == j) ++e;
      SumRunColumns(bags + f.bag_offset + j * f.width, grad + b * row_stride + f.col, row_stride,
                    e - b, f.width);
      b = e;
    }
  }
}

void PrefetchRowsToL2(const float* rows, int64_t row_stride, int64_t cols, int64_t b0, int64_t b1) {
  for (int64_t b = b0; b < b1; ++b) {
    const char* p = reinterpret_cast<const char*>(rows + b * row_stride);
    const auto bytes = cols * static_cast<int64_t>(sizeof(float));
    for (int64_t off = 0; off < bytes; off += 64) {
      __builtin_prefetch(p + off, 0, 2);
      asm volatile("");  // kept: GCC 12 may drop a loop of prefetches alone (core/prefetch.h)
    }
  }
}

}  // namespace shardrec::embedding
