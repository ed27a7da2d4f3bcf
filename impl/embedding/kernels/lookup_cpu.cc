// Host forward kernels: every job of a rank (all shards, all runs) in one parallel region over
// the bags, with software prefetch of the rows a few ids ahead. Each bag is summed in id order,
// so results do not depend on the thread count.
#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define SHARDREC_HAVE_F16C_PATH 1
#else
#define SHARDREC_HAVE_F16C_PATH 0
#endif

#include "impl/core/check.h"
#include "impl/core/cpu_features.h"
#include "impl/embedding/kernels/kernels.h"
#include "impl/embedding/kernels/row_load.h"

namespace shardrec::embedding::kernels {

namespace {

using detail::BFloat16;
using detail::Half;
using detail::LoadAsFloat;

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

bool HasF16C() { return HostCpu().f16c; }
#endif

// Bags [b_begin, b_end) of one pooled run.
template <typename T, bool kWeighted>
void PooledRange(const LookupJob& job, int64_t b_begin, int64_t b_end, int64_t distance) {
  const WeightsView& w = job.weights;
  const BagRun& run = job.run;
  const T* base = static_cast<const T*>(w.data);
  const int64_t stride = w.stride;
  const int32_t cols = w.cols;
  const int64_t row_bytes = static_cast<int64_t>(cols) * sizeof(T);
  const int64_t* __restrict rows = run.rows;
  // Without prefetch the guard below is never true.
  const int64_t id_end = distance > 0 ? run.offsets[b_end] : 0;
#if SHARDREC_HAVE_F16C_PATH
  const bool use_f16c = HasF16C();
#endif
  for (int64_t b = b_begin; b < b_end; ++b) {
    float* __restrict o = job.out + run.io_offset + b * job.out_stride;
    std::memset(o, 0, sizeof(float) * cols);
    const int64_t i_end = run.offsets[b + 1];
    for (int64_t i = run.offsets[b]; i < i_end; ++i) {
      if (i + distance < id_end) detail::PrefetchRow(base + rows[i + distance] * stride, row_bytes);
      const T* __restrict r = base + rows[i] * stride;
#if SHARDREC_HAVE_F16C_PATH
      if constexpr (std::is_same_v<T, Half>) {
        if (use_f16c) {
          AccumulateHalfF16C(o, reinterpret_cast<const uint16_t*>(r), cols,
                             kWeighted ? run.weights[i] : 1.0f, kWeighted);
          continue;
        }
      }
#endif
      if constexpr (kWeighted) {
        const float s = run.weights[i];
        for (int32_t c = 0; c < cols; ++c) o[c] += s * LoadAsFloat<T>(r[c]);
      } else {
        for (int32_t c = 0; c < cols; ++c) o[c] += LoadAsFloat<T>(r[c]);
      }
    }
  }
}

// Ids [begin, end) of one sequence run (each id its own output row).
template <typename T>
void SequenceRange(const LookupJob& job, int64_t begin, int64_t end, int64_t distance) {
  const WeightsView& w = job.weights;
  const BagRun& run = job.run;
  const T* base = static_cast<const T*>(w.data);
  const int32_t cols = w.cols;
  const int64_t row_bytes = static_cast<int64_t>(cols) * sizeof(T);
  for (int64_t i = begin; i < end; ++i) {
    if (distance > 0 && i + distance < end)
      detail::PrefetchRow(base + run.rows[i + distance] * w.stride, row_bytes);
    const T* __restrict r = base + run.rows[i] * w.stride;
    float* __restrict o = job.out + run.io_offset + i * job.out_stride;
    if (run.weights != nullptr) {
      const float s = run.weights[i];
      for (int32_t c = 0; c < cols; ++c) o[c] = s * LoadAsFloat<T>(r[c]);
    } else {
      for (int32_t c = 0; c < cols; ++c) o[c] = LoadAsFloat<T>(r[c]);
    }
  }
}

template <typename T>
void RunRange(const LookupJob& job, int64_t b, int64_t e, int64_t distance) {
  if (job.run.offsets == nullptr) {
    SequenceRange<T>(job, b, e, distance);
  } else if (job.run.weights != nullptr) {
    PooledRange<T, true>(job, b, e, distance);
  } else {
    PooledRange<T, false>(job, b, e, distance);
  }
}

void JobRange(const LookupJob& job, int64_t b, int64_t e, int64_t distance) {
  if (job.weights.cols <= 0) return;
  switch (job.weights.dtype) {
    case DType::kFloat16:
      RunRange<Half>(job, b, e, distance);
      break;
    case DType::kBFloat16:
      RunRange<BFloat16>(job, b, e, distance);
      break;
    default:
      RunRange<float>(job, b, e, distance);
      break;
  }
}

}  // namespace

Status Lookup(const ExecContext& ctx, std::span<const LookupJob> jobs,
              const LookupOptions& options) {
  if (!ctx.is_host())
    return Status::Unsupported("Lookup: the host kernel got a ", ctx.device().ToString(),
                               " context");
  int64_t total_bags = 0, total_ids = 0;
  for (const LookupJob& job : jobs) {
    const DType dt = job.weights.dtype;
    if (dt != DType::kFloat32 && dt != DType::kFloat16 && dt != DType::kBFloat16)
      return Status::InvalidArgument("Lookup: weights of dtype ", DTypeName(dt));
    total_bags += job.run.num_bags;
    total_ids += job.run.num_ids();
  }
  if (total_bags == 0) return Status::Ok();
  const int64_t distance = std::max<int32_t>(options.prefetch_distance, 0);
  // Global bag index -> job by a prefix over the jobs; the table is per thread and only grows.
  thread_local std::vector<int64_t> first;
  first.assign(1, 0);
  for (const LookupJob& job : jobs) first.push_back(first.back() + job.run.num_bags);
  // Chunks of a few thousand ids keep scheduling cheap against the row traffic.
  const int64_t grain = std::max<int64_t>(1, 2048 / (total_ids / total_bags + 1));
  const int64_t* prefix = first.data();
  const size_t num_jobs = jobs.size();
  ctx.ParallelFor(0, total_bags, grain, [&](int64_t g0, int64_t g1) {
    size_t j =
        static_cast<size_t>(std::upper_bound(prefix, prefix + num_jobs + 1, g0) - prefix) - 1;
    while (g0 < g1 && j < num_jobs) {
      const int64_t end = std::min(g1, prefix[j + 1]);
      if (end > g0) JobRange(jobs[j], g0 - prefix[j], end - prefix[j], distance);
      g0 = end;
      ++j;
    }
  });
  return Status::Ok();
}

}  // namespace shardrec::embedding::kernels
