// Host forward kernels: every job of a rank (all shards, all runs) in one parallel region over
// the bags. Each bag is summed in registers by the widest instruction set the host has
// (isa/bag_sum.h) and stored once; results do not depend on the thread count or the level.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "impl/core/check.h"
#include "impl/core/cpu_features.h"
#include "impl/core/row_format.h"
#include "impl/embedding/kernels/isa/bag_sum.h"
#include "impl/embedding/kernels/kernels.h"

namespace shardrec::embedding::kernels {

namespace {

CpuLevel DetectLevel() {
  CpuLevel best = CpuLevel::kBaseline;
#if SHARDREC_HAVE_X86_LEVELS
  const CpuFeatures& f = HostCpu();
  if (f.avx2 && f.f16c) best = CpuLevel::kAvx2;
  if (f.avx512f && f.avx512bw && f.avx512vl) best = CpuLevel::kAvx512;
#endif
  // SHARDREC_CPU_LEVEL=baseline|avx2|avx512 caps the level (debugging, benchmarks).
  if (const char* env = std::getenv("SHARDREC_CPU_LEVEL")) {
    CpuLevel cap = best;
    if (std::strcmp(env, "baseline") == 0) cap = CpuLevel::kBaseline;
    if (std::strcmp(env, "avx2") == 0) cap = CpuLevel::kAvx2;
    if (std::strcmp(env, "avx512") == 0) cap = CpuLevel::kAvx512;
    best = std::min(best, cap);
  }
  return best;
}

isa::BagSumFn FunctionFor(CpuLevel level) {
#if SHARDREC_HAVE_X86_LEVELS
  if (level == CpuLevel::kAvx512) return &isa::BagSumAvx512;
  if (level == CpuLevel::kAvx2) return &isa::BagSumAvx2;
#endif
  (void)level;
  return &isa::BagSumBaseline;
}

}  // namespace

CpuLevel HostCpuLevel() {
  static const CpuLevel level = DetectLevel();
  return level;
}

const char* CpuLevelName(CpuLevel level) {
  switch (level) {
    case CpuLevel::kBaseline:
      return "baseline";
    case CpuLevel::kAvx2:
      return "avx2";
    case CpuLevel::kAvx512:
      return "avx512";
    default:
      return "auto";
  }
}

Status Lookup(const ExecContext& ctx, std::span<const LookupJob> jobs,
              const LookupOptions& options) {
  if (!ctx.is_host())
    return Status::Unsupported("Lookup: the host kernel got a ", ctx.device().ToString(),
                               " context");
  CpuLevel level = options.level == CpuLevel::kAuto ? HostCpuLevel() : options.level;
  if (level > HostCpuLevel())
    return Status::Unsupported(
        "Lookup: CPU level ", CpuLevelName(level),
        " is not available on this host (best: ", CpuLevelName(HostCpuLevel()), ")");
  const isa::BagSumFn sum = FunctionFor(level);
  int64_t total_bags = 0, total_ids = 0;
  for (const LookupJob& job : jobs) {
    const DType dt = job.weights.dtype;
    if (!IsWeightDType(dt))
      return Status::InvalidArgument("Lookup: weights of dtype ", DTypeName(dt));
    if (job.out16 != nullptr && job.encode == nullptr)
      return Status::InvalidArgument("Lookup: an encoded output without an encoder");
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
  int32_t encoded_cols = 0;  // the widest row a thread sums before encoding it
  for (const LookupJob& job : jobs)
    if (job.out16 != nullptr) encoded_cols = std::max(encoded_cols, job.weights.cols);
  ctx.ParallelFor(0, total_bags, grain, [&](int64_t g0, int64_t g1) {
    thread_local std::vector<float> row;
    if (row.size() < static_cast<size_t>(encoded_cols)) row.resize(encoded_cols);
    size_t j =
        static_cast<size_t>(std::upper_bound(prefix, prefix + num_jobs + 1, g0) - prefix) - 1;
    while (g0 < g1 && j < num_jobs) {
      const int64_t end = std::min(g1, prefix[j + 1]);
      const LookupJob& job = jobs[j];
      if (end > g0 && job.weights.cols > 0) {
        isa::BagSumArgs a;
        a.weights = job.weights.data;
        a.type = FloatFormatOf(job.weights.dtype);
        a.stride = job.weights.stride;
        // FP8 rows: the stride is in bytes (the scale, then the codes).
        if (IsFp8DType(job.weights.dtype)) a.row_bytes = job.weights.stride;
        a.cols = job.weights.cols;
        a.offsets = job.run.offsets;
        a.rows = job.run.rows;
        a.id_weights = job.run.weights;
        a.out = job.out;
        a.io_offset = job.run.io_offset;
        a.out_stride = job.out_stride;
        a.bag_begin = g0 - prefix[j];
        a.bag_end = end - prefix[j];
        a.prefetch_distance = distance;
        a.out16 = job.out16;
        a.encode = job.encode;
        a.row = row.data();
        sum(a);
      }
      g0 = end;
      ++j;
    }
  });
  return Status::Ok();
}

}  // namespace shardrec::embedding::kernels
