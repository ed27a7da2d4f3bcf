// Gathering and rebuilding dynamic shards for a replica sync (dynamic_merge.h). Each replica's
// contribution is one byte buffer: per local dynamic shard, a header {rows, forwards, admission
// counters, scores}, then ids, last-seen forwards and counts (int64), the admission counters
// (uint16, padded to 8 bytes), the scores (double; SCORE tables only) and each tensor's live
// rows, packed and padded to 8 bytes.
#include "impl/replica/dynamic_merge.h"

#include <algorithm>
#include <cstring>

#include "impl/core/check.h"
#include "impl/core/rng.h"
#include "impl/replica/sync_scope.h"

namespace shardrec::replica {
namespace {

using embedding::dynamic::DynamicShard;
using embedding::dynamic::MergedShard;
using embedding::dynamic::ReplicaRows;

size_t Pad8(size_t n) { return (n + 7) / 8 * 8; }

void Append(std::vector<uint8_t>* out, const void* p, size_t bytes) {
  const size_t at = out->size();
  out->resize(at + Pad8(bytes), 0);
  if (bytes > 0) std::memcpy(out->data() + at, p, bytes);
}

// A reader of one replica's contribution (the same layout, checked by the fingerprint).
struct Cursor {
  const uint8_t* p;
  template <typename T>
  std::span<const T> Take(size_t n) {
    const auto* at = reinterpret_cast<const T*>(p);
    p += Pad8(n * sizeof(T));
    return {at, n};
  }
};

}  // namespace

Status DynamicMerge::Gather(embedding::EmbeddingCollection& coll, comm::Communicator& replica,
                            bool weights_only) {
  const embedding::Layout& layout = coll.layout();
  const std::vector<embedding::ShardTensor> tensors = coll.ShardTensors();
  locals_.clear();
  evicted_ = 0;
  self_ = replica.Rank();
  // The fingerprint of what this replica will send, so replicas of other plans stop here.
  uint64_t fp = Mix64(weights_only ? 1 : 2);
  std::vector<uint8_t> mine;
  size_t ti = 0;  // ShardTensors lists each local shard's weights, then its states
  for (size_t li = 0; li < layout.local.size(); ++li) {
    const embedding::LocalShard& ls = layout.local[li];
    const size_t ntensors = 1 + layout.tables[ls.table].state_specs.size();
    const size_t first = ti;
    ti += ntensors;
    const DynamicShard* shard = coll.dynamic_tables().Shard(static_cast<int32_t>(li));
    if (shard == nullptr || SyncLeavesAlone(coll, ls.table, replica.Size())) continue;
    Local l;
    l.local = static_cast<int32_t>(li);
    for (size_t k = first; k < first + ntensors; ++k) {
      const embedding::ShardTensor& t = tensors[k];
      SR_CHECK(t.table == ls.table && t.shard == ls.shard && t.device.is_host());
      const size_t es = DTypeSize(t.dtype);
      l.tensors.push_back({t.dtype, static_cast<size_t>(t.cols),
                           weights_only && t.kind != embedding::ParamKind::kWeights});
      l.data.push_back(static_cast<uint8_t*>(t.data));
      l.stride.push_back(static_cast<size_t>(t.row_stride) * es);
      fp = Mix64(fp ^ Mix64(static_cast<uint64_t>(t.dtype) << 32 ^ static_cast<uint64_t>(t.cols)));
    }
    const int64_t n = shard->size();
    const std::vector<uint16_t>& sketch = shard->sketch();
    fp = Mix64(fp ^
               Mix64(static_cast<uint64_t>(ls.table) ^ Mix64(static_cast<uint64_t>(ls.row_offset)) ^
                     Mix64(static_cast<uint64_t>(ls.col_offset) << 20) ^
                     Mix64(static_cast<uint64_t>(shard->slots())) ^ Mix64(sketch.size() + 7)));
    const std::span<const double> scores = shard->scores();
    const int64_t header[4] = {n, shard->forwards(), static_cast<int64_t>(sketch.size()),
                               static_cast<int64_t>(scores.size())};
    Append(&mine, header, sizeof(header));
    const std::vector<int64_t> ids = shard->Ids();
    Append(&mine, ids.data(), n * sizeof(int64_t));
    const std::vector<int64_t> last_seen = shard->LastSeen();
    Append(&mine, last_seen.data(), n * sizeof(int64_t));
    const std::vector<uint32_t> counts32 = shard->Counts();
    std::vector<int64_t> counts(counts32.begin(), counts32.end());
    Append(&mine, counts.data(), n * sizeof(int64_t));
    Append(&mine, sketch.data(), sketch.size() * sizeof(uint16_t));
    Append(&mine, scores.data(), scores.size_bytes());
    for (size_t k = 0; k < l.tensors.size(); ++k) {
      const size_t row_bytes = l.tensors[k].cols * DTypeSize(l.tensors[k].dtype);
      const size_t at = mine.size();
      mine.resize(at + Pad8(static_cast<size_t>(n) * row_bytes), 0);
      for (int64_t i = 0; i < n; ++i)
        std::memcpy(mine.data() + at + static_cast<size_t>(i) * row_bytes,
                    l.data[k] + static_cast<size_t>(i) * l.stride[k], row_bytes);
    }
    locals_.push_back(std::move(l));
  }
  const int size = replica.Size();
  const int64_t head[2] = {static_cast<int64_t>(fp >> 1), static_cast<int64_t>(mine.size())};
  std::vector<int64_t> heads(static_cast<size_t>(2 * size));
  const std::vector<size_t> twos(static_cast<size_t>(size), 2);
  SR_RETURN_IF_ERROR(replica.AllGatherV(head, 2, heads.data(), twos, DType::kInt64)
                         .WithContext("gathering the dynamic shards of the replica sync"));
  sizes_.assign(static_cast<size_t>(size), 0);
  size_t total = 0;
  for (int r = 0; r < size; ++r) {
    if (heads[2 * r] != head[0]) {
      locals_.clear();
      return Status::InvalidArgument(
          "replica sync: replica ", r, " of this replica group holds other dynamic shards (tables,",
          " capacities, dtypes or optimizers differ: the same plan on every replica?); nothing was",
          " synced");
    }
    sizes_[static_cast<size_t>(r)] = static_cast<size_t>(heads[2 * r + 1]);
    total += sizes_[static_cast<size_t>(r)];
  }
  gathered_.resize(total);
  const Status st =
      replica.AllGatherV(mine.data(), mine.size(), gathered_.data(), sizes_, DType::kUInt8);
  if (!st.ok()) {
    locals_.clear();
    return st.WithContext("gathering the dynamic shards of the replica sync");
  }
  return Status::Ok();
}

void DynamicMerge::Commit(embedding::EmbeddingCollection& coll) {
  const embedding::Layout& layout = coll.layout();
  std::vector<Cursor> cursors;
  size_t at = 0;
  for (size_t size : sizes_) {
    cursors.push_back({gathered_.data() + at});
    at += size;
  }
  std::vector<ReplicaRows> rows(cursors.size());
  MergedShard merged;
  for (const Local& l : locals_) {
    for (size_t r = 0; r < cursors.size(); ++r) {
      Cursor& c = cursors[r];
      const std::span<const int64_t> header = c.Take<int64_t>(4);
      const auto n = static_cast<size_t>(header[0]);
      ReplicaRows& rr = rows[r];
      rr.forwards = header[1];
      rr.ids = c.Take<int64_t>(n);
      rr.last_seen = c.Take<int64_t>(n);
      rr.counts = c.Take<int64_t>(n);
      rr.sketch = c.Take<uint16_t>(static_cast<size_t>(header[2]));
      rr.scores = c.Take<double>(static_cast<size_t>(header[3]));
      rr.tensors.clear();
      for (const auto& t : l.tensors)
        rr.tensors.push_back(c.Take<uint8_t>(n * t.cols * DTypeSize(t.dtype)).data());
    }
    const embedding::LocalShard& ls = layout.local[static_cast<size_t>(l.local)];
    DynamicShard* shard = coll.mutable_dynamic_tables().Shard(l.local);
    SR_CHECK(shard != nullptr);
    embedding::dynamic::MergeReplicas(coll.plan().tables[static_cast<size_t>(ls.table)].dynamic,
                                      shard->slots(), l.tensors, rows, self_, &merged);
    shard->RestoreMerged(merged.forwards, merged.ids, merged.last_seen, merged.counts,
                         merged.sketch, merged.gone);
    // RestoreMerged leaves every score 0; a SCORE table takes the merged ones.
    if (!merged.scores.empty()) shard->RestoreScores(merged.scores);
    evicted_ += merged.evicted;
    const size_t n = merged.ids.size();
    for (size_t k = 0; k < l.tensors.size(); ++k) {
      const size_t row_bytes = l.tensors[k].cols * DTypeSize(l.tensors[k].dtype);
      for (size_t i = 0; i < n; ++i)
        std::memcpy(l.data[k] + i * l.stride[k], merged.tensors[k].data() + i * row_bytes,
                    row_bytes);
      // The free slots and the zero row (ls.rows = slots + 1) hold nothing: cleared, so the
      // replicas agree on every byte.
      for (size_t i = n; i < static_cast<size_t>(ls.rows); ++i)
        std::memset(l.data[k] + i * l.stride[k], 0, row_bytes);
    }
  }
  locals_.clear();
  gathered_.clear();
  sizes_.clear();
}

}  // namespace shardrec::replica
