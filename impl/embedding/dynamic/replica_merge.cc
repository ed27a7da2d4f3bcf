// Gathering and rebuilding dynamic shards for a replica sync (replica_merge.h). Each replica's
// contribution is one byte buffer: per local dynamic shard, a header {rows, forwards, admission
// counters, scores}, then ids, last-seen forwards and counts (int64), the admission counters
// (uint16, padded to 8 bytes), the scores (double; SCORE tables only) and each tensor's rows,
// packed and padded to 8 bytes: every live row, or after a merge only those of the ids some
// replica changed since.
#include "impl/embedding/dynamic/replica_merge.h"

#include <algorithm>
#include <cstring>

#include "impl/core/check.h"
#include "impl/core/rng.h"

namespace shardrec::embedding::dynamic {
namespace {

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

// The metadata of the rows at `slots`, folded into one value that does not depend on their
// order: a replica whose unchanged rows were not what the last merge wrote (a sync that
// failed on some replicas only) differs from the others here, at least in a last-seen forward.
uint64_t CleanDigest(const DynamicShard& shard, std::span<const int32_t> slots) {
  uint64_t sum = Mix64(slots.size());
  const std::span<const double> scores = shard.scores();
  for (const int32_t s : slots) {
    uint64_t h = Mix64(static_cast<uint64_t>(shard.id(s)) ^ 0x9e3779b97f4a7c15ull);
    h = Mix64(h ^ static_cast<uint64_t>(shard.last_seen(s)));
    h = Mix64(h ^ shard.count(s));
    if (!scores.empty()) {
      uint64_t bits;
      std::memcpy(&bits, &scores[static_cast<size_t>(s)], sizeof(bits));
      h = Mix64(h ^ bits);
    }
    sum += h;
  }
  return sum;
}

}  // namespace

template <typename Slots>
void ReplicaMerge::Pack(const std::vector<const DynamicShard*>& shards, Slots&& rows_of,
                        std::vector<uint8_t>* out) const {
  std::vector<uint8_t>& mine = *out;
  mine.clear();
  for (size_t i = 0; i < locals_.size(); ++i) {
    const Local& l = locals_[i];
    const DynamicShard& shard = *shards[i];
    const std::vector<int32_t> slots = rows_of(i);
    const size_t n = slots.size();
    const std::vector<uint16_t>& sketch = shard.sketch();
    const std::span<const double> all_scores = shard.scores();
    const int64_t header[4] = {static_cast<int64_t>(n), shard.forwards(),
                               static_cast<int64_t>(sketch.size()),
                               all_scores.empty() ? 0 : static_cast<int64_t>(n)};
    Append(&mine, header, sizeof(header));
    std::vector<int64_t> column(n);
    for (size_t k = 0; k < n; ++k) column[k] = shard.id(slots[k]);
    Append(&mine, column.data(), n * sizeof(int64_t));
    for (size_t k = 0; k < n; ++k) column[k] = shard.last_seen(slots[k]);
    Append(&mine, column.data(), n * sizeof(int64_t));
    for (size_t k = 0; k < n; ++k) column[k] = shard.count(slots[k]);
    Append(&mine, column.data(), n * sizeof(int64_t));
    Append(&mine, sketch.data(), sketch.size() * sizeof(uint16_t));
    if (!all_scores.empty()) {
      std::vector<double> scores(n);
      for (size_t k = 0; k < n; ++k) scores[k] = all_scores[static_cast<size_t>(slots[k])];
      Append(&mine, scores.data(), n * sizeof(double));
    }
    for (size_t t = 0; t < l.tensors.size(); ++t) {
      const size_t row_bytes = l.tensors[t].cols * DTypeSize(l.tensors[t].dtype);
      const size_t at = mine.size();
      mine.resize(at + Pad8(n * row_bytes), 0);
      for (size_t k = 0; k < n; ++k)
        std::memcpy(mine.data() + at + k * row_bytes,
                    l.data[t] + static_cast<size_t>(slots[k]) * l.stride[t], row_bytes);
    }
  }
}

Status ReplicaMerge::GatherChanged(const std::vector<int64_t>& mine,
                                   const std::vector<size_t>& lengths,
                                   comm::Communicator& replica) {
  size_t total = 0;
  for (size_t c : lengths) total += c;
  std::vector<int64_t> all(total);
  ++collectives_;
  SR_RETURN_IF_ERROR(
      replica.AllGatherV(mine.data(), mine.size(), all.data(), lengths, DType::kInt64));
  size_t at = 0;
  for (size_t r = 0; r < lengths.size(); ++r) {
    for (Local& l : locals_) {
      const auto n = static_cast<size_t>(all[at++]);
      l.changed.insert(l.changed.end(), all.begin() + static_cast<std::ptrdiff_t>(at),
                       all.begin() + static_cast<std::ptrdiff_t>(at + n));
      at += n;
    }
  }
  for (Local& l : locals_) {
    std::sort(l.changed.begin(), l.changed.end());
    l.changed.erase(std::unique(l.changed.begin(), l.changed.end()), l.changed.end());
  }
  return Status::Ok();
}

size_t ReplicaMerge::FullBytes(const std::vector<const DynamicShard*>& shards) const {
  size_t bytes = 0;
  for (size_t i = 0; i < locals_.size(); ++i) {
    const auto n = static_cast<size_t>(shards[i]->size());
    bytes += 4 * sizeof(int64_t) + 3 * Pad8(n * sizeof(int64_t)) +
             Pad8(shards[i]->sketch().size() * sizeof(uint16_t)) +
             (shards[i]->scores().empty() ? 0 : Pad8(n * sizeof(double)));
    for (const auto& t : locals_[i].tensors) bytes += Pad8(n * t.cols * DTypeSize(t.dtype));
  }
  return bytes;
}

void ReplicaMerge::FindClean(const DynamicShard& shard, Local* l) const {
  // The slots of the changed ids this replica holds are not clean; the others are, in slot
  // order, which after a merge is the ids' order (a slot whose id changed since is not clean).
  std::vector<int64_t> slots = l->changed;
  const int64_t none = shard.slots();
  const IdSpan spans[1] = {slots};
  shard.Lookup(spans);
  std::vector<char> changed(static_cast<size_t>(shard.size()), 0);
  for (const int64_t s : slots)
    if (s != none) changed[static_cast<size_t>(s)] = 1;
  l->clean_slots.clear();
  for (int64_t s = 0; s < shard.size(); ++s)
    if (!changed[static_cast<size_t>(s)]) l->clean_slots.push_back(static_cast<int32_t>(s));
  // A shard written by a merge holds its ids ascending; sorted here all the same, so the merge's
  // order never rests on that.
  if (!std::is_sorted(l->clean_slots.begin(), l->clean_slots.end(),
                      [&](int32_t a, int32_t b) { return shard.id(a) < shard.id(b); }))
    std::sort(l->clean_slots.begin(), l->clean_slots.end(),
              [&](int32_t a, int32_t b) { return shard.id(a) < shard.id(b); });
}

Status ReplicaMerge::GatherPayload(const std::vector<uint8_t>& mine,
                                   const std::vector<size_t>& sizes, comm::Communicator& replica) {
  sizes_ = sizes;
  size_t total = 0;
  for (size_t s : sizes_) total += s;
  gathered_.resize(total);
  sent_bytes_ += mine.size();
  ++collectives_;
  return replica.AllGatherV(mine.data(), mine.size(), gathered_.data(), sizes_, DType::kUInt8);
}

Status ReplicaMerge::Gather(const Layout& layout, const std::vector<ShardTensor>& tensors,
                            const DynamicTables& tables, const std::vector<bool>& leave_alone,
                            comm::Communicator& replica, bool weights_only) {
  locals_.clear();
  evicted_ = 0;
  sent_bytes_ = 0;
  collectives_ = 0;
  incremental_ = false;
  self_ = replica.Rank();
  replicas_ = replica.Size();
  weights_only_ = weights_only;
  // The fingerprint of what this replica will send, so replicas of other plans stop here.
  uint64_t fp = Mix64(weights_only ? 1 : 2);
  std::vector<const DynamicShard*> shards;
  // Whether every local shard was written by the last merge and tracked since (with the
  // optimizer states, unless they stay each replica's own).
  bool tracked = true;
  size_t ti = 0;  // ShardTensors lists each local shard's weights, then its states
  for (size_t li = 0; li < layout.local.size(); ++li) {
    const LocalShard& ls = layout.local[li];
    const size_t ntensors = 1 + layout.tables[ls.table].state_specs.size();
    const size_t first = ti;
    ti += ntensors;
    const DynamicShard* shard = tables.Shard(static_cast<int32_t>(li));
    if (shard == nullptr || leave_alone[static_cast<size_t>(ls.table)]) continue;
    Local l;
    l.local = static_cast<int32_t>(li);
    for (size_t k = first; k < first + ntensors; ++k) {
      const ShardTensor& t = tensors[k];
      SR_CHECK(t.table == ls.table && t.shard == ls.shard && t.device.is_host());
      const size_t es = DTypeSize(t.dtype);
      l.tensors.push_back(
          {t.dtype, static_cast<size_t>(t.cols), weights_only && t.kind != ParamKind::kWeights});
      l.data.push_back(static_cast<uint8_t*>(t.data));
      l.stride.push_back(static_cast<size_t>(t.row_stride) * es);
      fp = Mix64(fp ^ Mix64(static_cast<uint64_t>(t.dtype) << 32 ^ static_cast<uint64_t>(t.cols)));
    }
    fp = Mix64(fp ^
               Mix64(static_cast<uint64_t>(ls.table) ^ Mix64(static_cast<uint64_t>(ls.row_offset)) ^
                     Mix64(static_cast<uint64_t>(ls.col_offset) << 20) ^
                     Mix64(static_cast<uint64_t>(shard->slots())) ^
                     Mix64(shard->sketch().size() + 7)));
    tracked = tracked && shard->merge_baseline() >= (weights_only ? 1 : 2);
    shards.push_back(shard);
    locals_.push_back(std::move(l));
  }
  // Per shard, the ids this replica changed since the last merge: its count, then the ids.
  std::vector<int64_t> changed;
  for (const DynamicShard* shard : shards) {
    if (!tracked) break;
    const std::vector<int64_t> ids = shard->ChangedSinceMerge();
    changed.push_back(static_cast<int64_t>(ids.size()));
    changed.insert(changed.end(), ids.begin(), ids.end());
  }
  const int size = replica.Size();
  int64_t live = 0;
  for (const DynamicShard* shard : shards) live += shard->size();
  constexpr size_t kHead = 5;
  const int64_t head[kHead] = {static_cast<int64_t>(fp >> 1), tracked ? 1 : 0,
                               static_cast<int64_t>(changed.size()),
                               static_cast<int64_t>(FullBytes(shards)), live};
  std::vector<int64_t> heads(kHead * static_cast<size_t>(size));
  const std::vector<size_t> per_rank(static_cast<size_t>(size), kHead);
  sent_bytes_ += sizeof(head);
  ++collectives_;
  Status st = replica.AllGatherV(head, kHead, heads.data(), per_rank, DType::kInt64);
  if (!st.ok()) {
    locals_.clear();
    return st.WithContext("gathering the dynamic shards of the replica sync");
  }
  bool all_tracked = true;
  int64_t all_changed = 0, all_live = 0;
  std::vector<size_t> changed_lengths, full_sizes;
  for (int r = 0; r < size; ++r) {
    const int64_t* h = &heads[kHead * static_cast<size_t>(r)];
    if (h[0] != head[0]) {
      locals_.clear();
      return Status::InvalidArgument(
          "replica sync: replica ", r, " of this replica group holds other dynamic shards (tables,",
          " capacities, dtypes or optimizers differ: the same plan on every replica?); nothing was",
          " synced");
    }
    all_tracked = all_tracked && h[1] == 1;
    changed_lengths.push_back(static_cast<size_t>(h[2]));
    full_sizes.push_back(static_cast<size_t>(h[3]));
    all_changed += h[2];
    all_live += h[4];
  }
  // When the replicas changed about half their rows or more, gathering the changed ones saves
  // little and costs two more collectives: every row is gathered then.
  if (all_tracked && 2 * all_changed < all_live) {
    st = GatherIncremental(shards, changed, changed_lengths, replica);
    if (!st.ok() || incremental_) {
      if (!st.ok()) locals_.clear();
      return st.ok() ? st : st.WithContext("gathering the dynamic shards of the replica sync");
    }
    for (Local& l : locals_) {
      l.changed.clear();
      l.clean_slots.clear();
    }
  }
  Pack(
      shards,
      [&](size_t i) {
        std::vector<int32_t> all(static_cast<size_t>(shards[i]->size()));
        for (size_t s = 0; s < all.size(); ++s) all[s] = static_cast<int32_t>(s);
        return all;
      },
      &mine_);
  SR_CHECK(mine_.size() == static_cast<size_t>(head[3]));
  st = GatherPayload(mine_, full_sizes, replica);
  if (!st.ok()) {
    locals_.clear();
    return st.WithContext("gathering the dynamic shards of the replica sync");
  }
  return Status::Ok();
}

Status ReplicaMerge::GatherIncremental(const std::vector<const DynamicShard*>& shards,
                                       const std::vector<int64_t>& changed,
                                       const std::vector<size_t>& changed_lengths,
                                       comm::Communicator& replica) {
  sent_bytes_ += changed.size() * sizeof(int64_t);
  SR_RETURN_IF_ERROR(GatherChanged(changed, changed_lengths, replica));
  uint64_t digest = Mix64(0x3b);
  for (size_t i = 0; i < locals_.size(); ++i) {
    FindClean(*shards[i], &locals_[i]);
    digest = Mix64(digest ^ CleanDigest(*shards[i], locals_[i].clean_slots));
  }
  // The rows of the changed ids this replica holds.
  Pack(
      shards,
      [&](size_t i) {
        std::vector<int64_t> slots = locals_[i].changed;
        const IdSpan spans[1] = {slots};
        shards[i]->Lookup(spans);
        std::vector<int32_t> held;
        for (const int64_t s : slots)
          if (s != shards[i]->slots()) held.push_back(static_cast<int32_t>(s));
        return held;
      },
      &mine_);
  const int size = replica.Size();
  int64_t head[2];
  std::memcpy(&head[0], &digest, sizeof(digest));
  head[1] = static_cast<int64_t>(mine_.size());
  std::vector<int64_t> heads(2 * static_cast<size_t>(size));
  const std::vector<size_t> twos(static_cast<size_t>(size), 2);
  sent_bytes_ += sizeof(head);
  ++collectives_;
  SR_RETURN_IF_ERROR(replica.AllGatherV(head, 2, heads.data(), twos, DType::kInt64));
  std::vector<size_t> sizes;
  for (int r = 0; r < size; ++r) {
    if (heads[2 * static_cast<size_t>(r)] != head[0]) return Status::Ok();  // gather every row
    sizes.push_back(static_cast<size_t>(heads[2 * static_cast<size_t>(r) + 1]));
  }
  incremental_ = true;
  return GatherPayload(mine_, sizes, replica);
}

void ReplicaMerge::Commit(const Layout& layout, DynamicTables& tables) {
  std::vector<Cursor> cursors;
  size_t at = 0;
  for (size_t size : sizes_) {
    cursors.push_back({gathered_.data() + at});
    at += size;
  }
  std::vector<ReplicaRows> rows(cursors.size());
  MergedShard& merged = merged_;
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
    const LocalShard& ls = layout.local[static_cast<size_t>(l.local)];
    DynamicShard* shard = tables.Shard(l.local);
    SR_CHECK(shard != nullptr);
    CleanRows clean;
    if (incremental_) {
      clean.replicas = replicas_;
      const std::span<const double> scores = shard->scores();
      for (const int32_t s : l.clean_slots) {
        clean.ids.push_back(shard->id(s));
        clean.last_seen.push_back(shard->last_seen(s));
        clean.counts.push_back(shard->count(s));
        if (!scores.empty()) clean.scores.push_back(scores[static_cast<size_t>(s)]);
      }
      clean.slots = l.clean_slots;
      clean.tensors.assign(l.data.begin(), l.data.end());
      clean.strides = l.stride;
    }
    MergeReplicas(layout.plan->tables[static_cast<size_t>(ls.table)].dynamic, shard->slots(),
                  l.tensors, rows, incremental_ ? &clean : nullptr, self_, &merged);
    // After a merge the slots past its rows hold zeros and training writes only below size():
    // an incremental merge need clear no slot beyond the rows held before it.
    const auto held_before = static_cast<size_t>(shard->size());
    shard->RestoreMerged(merged.forwards, merged.ids, merged.last_seen, merged.counts,
                         merged.sketch, merged.gone);
    // RestoreMerged leaves every score 0; a SCORE table takes the merged ones.
    if (!merged.scores.empty()) shard->RestoreScores(merged.scores);
    evicted_ += merged.evicted;
    WriteMerged(merged, incremental_ ? &clean : nullptr, l.tensors, l.data, l.stride,
                static_cast<size_t>(ls.rows),
                incremental_ ? held_before : static_cast<size_t>(ls.rows));
    // Every replica now holds this shard alike: from here on its changes are tracked, so the
    // next merge gathers only theirs.
    shard->MarkMerged(!weights_only_);
  }
  locals_.clear();
  gathered_.clear();
  sizes_.clear();
}

}  // namespace shardrec::embedding::dynamic
