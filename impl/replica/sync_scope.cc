// Which tables a replica sync touches (sync_scope.h).
#include "impl/replica/sync_scope.h"

#include <algorithm>
#include <utility>

namespace shardrec::replica {

bool SyncLeavesAlone(const embedding::TableStorage& storage, int32_t table, int replicas) {
  const embedding::TableLayout& t = storage.layout().tables[static_cast<size_t>(table)];
  return t.dynamic && t.data_parallel && replicas > 1 &&
         storage.data_parallel_size() == storage.plan().world_size * replicas;
}

std::vector<bool> TablesLeftAlone(const embedding::TableStorage& storage, int replicas) {
  std::vector<bool> out(storage.layout().tables.size());
  for (size_t t = 0; t < out.size(); ++t)
    out[t] = SyncLeavesAlone(storage, static_cast<int32_t>(t), replicas);
  return out;
}

void CutDynamic(embedding::TableStorage& storage, int replicas, std::vector<SyncBuffer>* buffers,
                std::vector<embedding::ParamBuffer>* on_device) {
  if (replicas <= 1) return;
  std::vector<std::pair<const uint8_t*, const uint8_t*>> cuts;  // byte ranges, sorted
  for (const embedding::ShardTensor& t : storage.ShardTensors()) {
    if (!t.device.is_host() || !storage.layout().tables[static_cast<size_t>(t.table)].dynamic)
      continue;
    const auto* p = static_cast<const uint8_t*>(t.data);
    cuts.emplace_back(p, p + static_cast<size_t>(t.rows) * static_cast<size_t>(t.row_stride) *
                                 DTypeSize(t.dtype));
  }
  if (cuts.empty()) return;
  std::sort(cuts.begin(), cuts.end());
  std::vector<SyncBuffer> kept;
  std::vector<embedding::ParamBuffer> kept_on_device;
  for (size_t i = 0; i < buffers->size(); ++i) {
    const SyncBuffer& b = (*buffers)[i];
    const size_t es = DTypeSize(b.dtype);
    auto* at = static_cast<uint8_t*>(b.data);
    uint8_t* const end = at + b.count * es;
    auto keep = [&](uint8_t* from, uint8_t* to) {
      if (to <= from) return;
      SyncBuffer piece = b;
      piece.data = from;
      piece.count = static_cast<size_t>(to - from) / es;
      kept.push_back(piece);
      kept_on_device.push_back((*on_device)[i]);
    };
    for (const auto& [c0, c1] : cuts) {
      if (c1 <= at || c0 >= end) continue;
      keep(at, const_cast<uint8_t*>(std::max<const uint8_t*>(c0, at)));
      at = std::min(const_cast<uint8_t*>(c1), end);
    }
    keep(at, end);
  }
  *buffers = std::move(kept);
  *on_device = std::move(kept_on_device);
}

}  // namespace shardrec::replica
