// CPU forward kernels: pooled (sum) and sequence lookups, parallel over bags / ids, with software
// prefetch of the rows a few ids ahead. Each bag is summed in id order, so results do not depend
// on the thread count.
#include <cstring>
#include <functional>
#include <type_traits>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define SHARDREC_HAVE_F16C_PATH 1
#else
#define SHARDREC_HAVE_F16C_PATH 0
#endif

#include "impl/core/check.h"
#include "impl/core/thread_pool.h"
#include "impl/embedding/kernels/kernels.h"
#include "impl/embedding/kernels/row_load.h"

namespace shardrec::embedding::kernels {

namespace {

using detail::BFloat16;
using detail::Half;
using detail::LoadAsFloat;

// How many ids ahead the rows are prefetched: enough to cover DRAM latency with several
// outstanding rows, small enough that the lines are still in L1/L2 when used.
constexpr int64_t kPrefetchDistance = 12;

#if SHARDREC_HAVE_F16C_PATH
// fp16 rows through the F16C converter (the portable bit-twiddling conversion is ~15x slower).
// Multiply then add, never fused, so results equal the portable path bit for bit.
__attribute__((target("avx,f16c"))) void AccumulateHalfF16C(float* o, const uint16_t* r,
                                                            int32_t cols, float s, bool weighted) {
  int32_t c = 0;
  const __m256 vs = _mm256_set1_ps(s);
  for (; c + 8 <= cols; c += 8) {
    __m256 v = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(r + c)));
    if (weighted) v = _mm256_mul_ps(vs, v);
    _mm256_storeu_ps(o + c, _mm256_add_ps(_mm256_loadu_ps(o + c), v));
  }
  for (; c < cols; ++c) o[c] += weighted ? s * HalfToFloat(r[c]) : HalfToFloat(r[c]);
}

bool HasF16C() {
  static const bool has = __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx");
  return has;
}
#endif

template <typename T, bool kWeighted>
void PooledRange(const WeightsView& w, const Bags& bags, float* out, int64_t out_stride,
                 int64_t b_begin, int64_t b_end, int64_t distance) {
  const T* base = static_cast<const T*>(w.data);
  const int64_t stride = w.stride;
  const int32_t cols = w.cols;
  const int64_t row_bytes = static_cast<int64_t>(cols) * sizeof(T);
  const int64_t* __restrict rows = bags.rows;
  // Without prefetch the guard below is never true.
  const int64_t id_end = distance > 0 ? bags.offsets[b_end] : 0;
#if SHARDREC_HAVE_F16C_PATH
  const bool use_f16c = HasF16C();
#endif
  for (int64_t b = b_begin; b < b_end; ++b) {
    float* __restrict o = out + b * out_stride;
    std::memset(o, 0, sizeof(float) * cols);
    const int64_t i_end = bags.offsets[b + 1];
    for (int64_t i = bags.offsets[b]; i < i_end; ++i) {
      if (i + distance < id_end) detail::PrefetchRow(base + rows[i + distance] * stride, row_bytes);
      const T* __restrict r = base + rows[i] * stride;
#if SHARDREC_HAVE_F16C_PATH
      if constexpr (std::is_same_v<T, Half>) {
        if (use_f16c) {
          AccumulateHalfF16C(o, reinterpret_cast<const uint16_t*>(r), cols,
                             kWeighted ? bags.weights[i] : 1.0f, kWeighted);
          continue;
        }
      }
#endif
      if constexpr (kWeighted) {
        const float s = bags.weights[i];
        for (int32_t c = 0; c < cols; ++c) o[c] += s * LoadAsFloat<T>(r[c]);
      } else {
        for (int32_t c = 0; c < cols; ++c) o[c] += LoadAsFloat<T>(r[c]);
      }
    }
  }
}

template <typename T>
void PooledTyped(const WeightsView& w, const Bags& bags, float* out, int64_t out_stride, int64_t b,
                 int64_t e, int64_t distance) {
  if (bags.weights != nullptr) {
    PooledRange<T, true>(w, bags, out, out_stride, b, e, distance);
  } else {
    PooledRange<T, false>(w, bags, out, out_stride, b, e, distance);
  }
}

template <typename T>
void SequenceRange(const WeightsView& w, const int64_t* rows, const float* weights, float* out,
                   int64_t out_stride, int64_t begin, int64_t end) {
  const T* base = static_cast<const T*>(w.data);
  const int32_t cols = w.cols;
  const int64_t row_bytes = static_cast<int64_t>(cols) * sizeof(T);
  for (int64_t i = begin; i < end; ++i) {
    if (i + kPrefetchDistance < end)
      detail::PrefetchRow(base + rows[i + kPrefetchDistance] * w.stride, row_bytes);
    const T* __restrict r = base + rows[i] * w.stride;
    float* __restrict o = out + i * out_stride;
    if (weights != nullptr) {
      const float s = weights[i];
      for (int32_t c = 0; c < cols; ++c) o[c] = s * LoadAsFloat<T>(r[c]);
    } else {
      for (int32_t c = 0; c < cols; ++c) o[c] = LoadAsFloat<T>(r[c]);
    }
  }
}

void Run(ThreadPool* pool, int64_t n, int64_t grain,
         const std::function<void(int64_t, int64_t)>& fn) {
  if (pool == nullptr) {
    fn(0, n);
  } else {
    pool->ParallelFor(0, n, grain, fn);
  }
}

// Aim for chunks of a few thousand ids so scheduling is cheap against the row traffic.
int64_t BagGrain(const Bags& bags) {
  int64_t ids = bags.offsets[bags.num_bags] - bags.offsets[0];
  int64_t avg = bags.num_bags > 0 ? ids / bags.num_bags + 1 : 1;
  int64_t g = 2048 / avg;
  return g < 1 ? 1 : g;
}

}  // namespace

void PooledLookup(const WeightsView& w, const Bags& bags, float* out, int64_t out_stride,
                  ThreadPool* pool) {
  PooledLookup(w, bags, out, out_stride, pool, LookupOptions{});
}

void PooledLookup(const WeightsView& w, const Bags& bags, float* out, int64_t out_stride,
                  ThreadPool* pool, const LookupOptions& options) {
  if (bags.num_bags <= 0 || w.cols <= 0) return;
  const int64_t d = options.prefetch_distance > 0 ? options.prefetch_distance : 0;
  SR_CHECK(w.dtype == DType::kFloat32 || w.dtype == DType::kFloat16 || w.dtype == DType::kBFloat16);
  Run(pool, bags.num_bags, BagGrain(bags), [&](int64_t b, int64_t e) {
    switch (w.dtype) {
      case DType::kFloat16:
        PooledTyped<Half>(w, bags, out, out_stride, b, e, d);
        break;
      case DType::kBFloat16:
        PooledTyped<BFloat16>(w, bags, out, out_stride, b, e, d);
        break;
      default:
        PooledTyped<float>(w, bags, out, out_stride, b, e, d);
        break;
    }
  });
}

void SequenceLookup(const WeightsView& w, const int64_t* rows, const float* weights, int64_t n,
                    float* out, int64_t out_stride, ThreadPool* pool) {
  if (n <= 0 || w.cols <= 0) return;
  SR_CHECK(w.dtype == DType::kFloat32 || w.dtype == DType::kFloat16 || w.dtype == DType::kBFloat16);
  Run(pool, n, 256, [&](int64_t b, int64_t e) {
    switch (w.dtype) {
      case DType::kFloat16:
        SequenceRange<Half>(w, rows, weights, out, out_stride, b, e);
        break;
      case DType::kBFloat16:
        SequenceRange<BFloat16>(w, rows, weights, out, out_stride, b, e);
        break;
      default:
        SequenceRange<float>(w, rows, weights, out, out_stride, b, e);
        break;
    }
  });
}

}  // namespace shardrec::embedding::kernels
