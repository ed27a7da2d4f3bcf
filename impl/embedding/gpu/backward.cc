// The device step's backward phase (backward.h): its per-shard state and the gradient pack's
// jobs.
#include "impl/embedding/gpu/backward.h"

#include <algorithm>

namespace shardrec::embedding {

Status DeviceBackward::Init(size_t n) {
  // One unique-row count per local shard: the backward queues every shard's grouping before its
  // one wait, and each writes its own word.
  SR_RETURN_IF_ERROR(count.Reserve(sizeof(int64_t) * std::max<size_t>(n, 1)));
  num_unique.assign(n, 0);
  uniq_rows.clear();
  uniq_grads.clear();
  stats.clear();
  for (size_t i = 0; i < n; ++i) {
    uniq_rows.push_back(std::make_unique<core::DeviceBuffer>());
    uniq_grads.push_back(std::make_unique<core::DeviceBuffer>());
    stats.push_back(std::make_unique<core::DeviceBuffer>());
  }
  return Status::Ok();
}

void DeviceBackward::BuildPackJobs(const Layout& l, const RoutedBatch& rb, const int64_t* d_targets,
                                   const float* d_div, float* send, float* self) {
  const int64_t B = rb.batch_size;
  pack_jobs_.clear();
  pack_first_.assign(1, 0);
  int64_t k = 0;
  float* others = send;
  float* own = self;
  for (int32_t d = 0; d < l.world; ++d) {
    float*& dst = d == l.rank ? own : others;
    for (int32_t u : l.units_to_rank[d]) {
      const int64_t count = rb.ret_count[u];
      if (count == 0) continue;
      const Unit& unit = l.units[u];
      const Pair& pair = l.pairs[unit.pair];
      kernels::simt_body::PackJob j;
      j.targets = d_targets + k;
      j.dst = dst;
      j.div = pair.mean ? d_div + static_cast<int64_t>(unit.pair) * B : nullptr;
      j.count = count;
      j.col = pair.out_offset + unit.col_offset;
      j.cols = unit.cols;
      pack_jobs_.push_back(j);
      pack_first_.push_back(pack_first_.back() + count);
      k += count;
      dst += count * unit.cols;
    }
  }
}

}  // namespace shardrec::embedding
