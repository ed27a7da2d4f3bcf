// One dynamic shard's per-step decisions (shard.h); the rules are those of
// docs/dynamic-tables.md, "Determinism".
#include "impl/embedding/dynamic/shard.h"

#include <algorithm>

#include "impl/core/check.h"
#include "impl/embedding/dynamic/radix_sort.h"

namespace shardrec::embedding::dynamic {
namespace {

// a + b, at most UINT32_MAX (a <= UINT32_MAX; b may be any count a peer sent).
uint64_t AddCapped(uint64_t a, uint64_t b) {
  return std::min<uint64_t>(a + std::min<uint64_t>(b, UINT32_MAX), UINT32_MAX);
}

}  // namespace

using Eviction = sharding::DynamicConfig::Eviction;

void DynamicShard::Reset(const sharding::DynamicConfig& config, int64_t slots) {
  SR_CHECK(slots >= 1 && slots < INT32_MAX);
  config_ = config;
  slots_ = slots;
  used_ = 0;
  now_ = 0;
  index_.Reset(slots);
  if (config.admission_threshold > 1) sketch_.Reset(slots);
  base_ = 0;
  records_.assign(static_cast<size_t>(slots), SlotRecord{0, 0, 0});
  score_.assign(config.eviction == Eviction::kScore ? static_cast<size_t>(slots) : 0, 0.0);
  last_ = total_ = StepCounts{};
  ClearQueue();
  tracking_ = false;
  replaced_ = false;
  dirty_.clear();
  tombstones_.clear();
  StopMergeTracking();
}

size_t DynamicShard::MetadataBytesAtReset(const sharding::DynamicConfig& config, int64_t slots) {
  const auto n = static_cast<size_t>(slots);
  return SlotIndex::BytesFor(slots) +
         (config.admission_threshold > 1 ? AdmissionSketch::BytesFor(slots) : 0) +
         n * sizeof(SlotRecord) + (config.eviction == Eviction::kScore ? n * sizeof(double) : 0);
}

size_t DynamicShard::metadata_bytes() const {
  return index_.bytes() + sketch_.bytes() + static_cast<size_t>(slots_) * (sizeof(SlotRecord)) +
         score_.size() * sizeof(double) + dirty_.size() * sizeof(uint64_t) +
         tombstones_.capacity() * sizeof(int64_t) + merge_dirty_.size() * sizeof(uint64_t) +
         evicted_since_.capacity() * sizeof(int64_t);
}

void DynamicShard::Restore(int64_t forwards, std::span<const int64_t> ids,
                           std::span<const int64_t> last_seen, std::span<const uint32_t> counts,
                           const std::vector<uint16_t>& sketch) {
  // The rows held now may be absent from the checkpoint: they leave as evictions do, so a delta
  // replayed onto the table at the mark removes them too (those the checkpoint holds are dirty
  // rows, which the export keeps off the tombstones). Sorted and made distinct: repeated loads in
  // one period add at most the ids ever held, not a copy per load.
  std::vector<int64_t> held;
  if (tracking_) held = Ids();
  Replace(forwards, ids, last_seen, counts, sketch);
  if (!tracking_) return;
  tombstones_.insert(tombstones_.end(), held.begin(), held.end());
  std::sort(tombstones_.begin(), tombstones_.end());
  tombstones_.erase(std::unique(tombstones_.begin(), tombstones_.end()), tombstones_.end());
  replaced_ = true;
}

void DynamicShard::Replace(int64_t forwards, std::span<const int64_t> ids,
                           std::span<const int64_t> last_seen, std::span<const uint32_t> counts,
                           const std::vector<uint16_t>& sketch) {
  SR_CHECK(static_cast<int64_t>(ids.size()) <= slots_ && last_seen.size() == ids.size() &&
           counts.size() == ids.size());
  index_.Reset(slots_);
  ClearQueue();
  StopMergeTracking();
  // base_: the oldest last-seen forward, or as old as 32 bits relative to `forwards` reach. A
  // checkpoint's values outside [base_, forwards] (only a file not written by us has them, or
  // rows unseen for 4 billion forwards) are clamped into it.
  base_ = forwards;
  for (int64_t x : last_seen) base_ = std::min(base_, x);
  base_ = std::max(base_, forwards - int64_t{UINT32_MAX});
  constexpr size_t kAhead = 8;  // the index's buckets asked of the cache that many ids ahead
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i + kAhead < ids.size()) index_.Prefetch(ids[i + kAhead]);
    const int64_t seen = std::clamp(last_seen[i], base_, forwards);
    records_[i] = SlotRecord{ids[i], static_cast<uint32_t>(seen - base_), counts[i]};
    index_.Insert(ids[i], static_cast<int32_t>(i));
  }
  used_ = static_cast<int64_t>(ids.size());
  std::fill(score_.begin(), score_.end(), 0.0);
  now_ = forwards;
  if (tracking_) {
    dirty_.assign(static_cast<size_t>((slots_ + 63) / 64), 0);
    for (int64_t i = 0; i < used_; ++i) SetDirty(i);
  }
  if (config_.admission_threshold > 1) {
    sketch_.Reset(slots_);
    if (sketch.size() == sketch_.counters().size()) sketch_.Restore(sketch);
  }
  last_ = StepCounts{};
}

void DynamicShard::Mark() {
  tracking_ = true;
  replaced_ = false;
  dirty_.assign(static_cast<size_t>((slots_ + 63) / 64), 0);
  tombstones_.clear();
}

void DynamicShard::MarkMerged(bool states) {
  merge_baseline_ = states ? 2 : 1;
  merge_dirty_.assign(static_cast<size_t>((slots_ + 63) / 64), 0);
  evicted_since_.clear();
}

std::vector<int64_t> DynamicShard::ChangedSinceMerge() const {
  std::vector<int64_t> out = evicted_since_;
  for (size_t w = 0; w < merge_dirty_.size(); ++w)
    for (uint64_t bits = merge_dirty_[w]; bits != 0; bits &= bits - 1)
      out.push_back(records_[w * 64 + static_cast<size_t>(__builtin_ctzll(bits))].id);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::vector<int64_t> DynamicShard::Ids() const {
  std::vector<int64_t> out(static_cast<size_t>(used_));
  for (size_t i = 0; i < out.size(); ++i) out[i] = records_[i].id;
  return out;
}

std::vector<int64_t> DynamicShard::LastSeen() const {
  std::vector<int64_t> out(static_cast<size_t>(used_));
  for (size_t i = 0; i < out.size(); ++i) out[i] = base_ + records_[i].seen;
  return out;
}

std::vector<uint32_t> DynamicShard::Counts() const {
  std::vector<uint32_t> out(static_cast<size_t>(used_));
  for (size_t i = 0; i < out.size(); ++i) out[i] = records_[i].count;
  return out;
}

void DynamicShard::Rebase() {
  int64_t base = now_;
  for (int64_t s = 0; s < used_; ++s) base = std::min(base, base_ + records_[s].seen);
  base = std::max(base, now_ - int64_t{UINT32_MAX});
  for (int64_t s = 0; s < used_; ++s) {
    const int64_t seen = std::max(base_ + records_[s].seen, base);
    records_[s].seen = static_cast<uint32_t>(seen - base);
  }
  base_ = base;
  ClearQueue();
  // Rows unseen for 2^32 forwards were clamped: their last-seen forwards no longer follow from
  // the last merge (rare enough that the next merge may gather every row).
  StopMergeTracking();
}

void DynamicShard::Translate(std::span<const IdSpan> ids, std::span<const CountSpan> counts,
                             const InitRows& init) {
  SR_CHECK(counts.empty() || counts.size() == ids.size());
  ++now_;
  if (now_ - base_ > int64_t{UINT32_MAX}) Rebase();
  // The decay goes by the forward's number, which checkpoints and merges keep, so it falls on the
  // same forwards on every rank and after a load.
  if (config_.admission_threshold > 1 && config_.admission_decay_steps > 0 &&
      now_ % config_.admission_decay_steps == 0)
    sketch_.Halve();
  last_ = StepCounts{};
  TouchKnown(ids, counts);
  GroupUnknown();
  Place();
  if (!created_slots_.empty()) init(created_slots_, created_ids_);
  total_.Add(last_);
}

void DynamicShard::TouchKnown(std::span<const IdSpan> ids, std::span<const CountSpan> counts) {
  // Known ids (nearly all of them once the table is warm) are touched and rewritten as they come;
  // the order does not matter for them. Index lookups of random ids miss the cache, and so does
  // the slot's record after them: SlotIndex::FindAll's two-stage prefetch hides both (the id it
  // compares is in the record a hit then touches).
  sorted_.clear();
  extra_.clear();
  for (size_t k = 0; k < ids.size(); ++k) {
    const CountSpan c = counts.empty() ? CountSpan{} : counts[k];
    if (c.empty()) {
      TouchSpan(ids[k], [](size_t) { return uint64_t{1}; });
    } else {
      SR_CHECK(c.size() == ids[k].size());
      TouchSpan(ids[k], [c](size_t i) { return static_cast<uint64_t>(c[i]); });
    }
  }
}

template <typename Count>
void DynamicShard::TouchSpan(const IdSpan& span, Count&& count) {
  const uint32_t now = NowRel();
  index_.FindAll(span, IdBase(), kIdStride, [&](size_t i, int32_t s) {
    int64_t& x = span[i];
    const uint64_t occurrences = count(i);
    if (s == SlotIndex::kNone) {
      // GroupUnknown counts an id's entries, plus what a counted element adds beyond its one.
      sorted_.push_back({x, &x});
      if (occurrences > 1) extra_.emplace_back(x, occurrences - 1);
      return;
    }
    SetDirty(s);
    SlotRecord& m = records_[s];
    // LFU notes a row at its first touch in a forward, by the count that touch gives it: the
    // same for one occurrence at a time as for a counted element.
    if (m.seen != now) NoteForLfu(s, uint64_t{m.count} + 1);
    m.seen = now;
    m.count = static_cast<uint32_t>(AddCapped(m.count, occurrences));
    x = s;
  });
}

void DynamicShard::GroupUnknown() {
  // The ids without a row, distinct and ascending with their occurrences, decide in that order.
  SortByKey64(&sorted_, &sorted_scratch_, &sort_count_, [](const Occurrence& o) {
    return static_cast<uint64_t>(o.id) ^ (uint64_t{1} << 63);  // unsigned order = the ids'
  });
  group_begin_.clear();
  group_slot_.clear();
  pending_.clear();
  pending_count_.clear();
  pending_group_.clear();
  const int32_t threshold = config_.admission_threshold;
  std::sort(extra_.begin(), extra_.end());  // few: counted elements without a row
  size_t e = 0;
  for (size_t i = 0; i < sorted_.size();) {
    const int64_t id = sorted_[i].id;
    size_t j = i + 1;
    while (j < sorted_.size() && sorted_[j].id == id) ++j;
    uint64_t occurrences = std::min<uint64_t>(j - i, UINT32_MAX);
    for (; e < extra_.size() && extra_[e].first == id; ++e)
      occurrences = AddCapped(occurrences, extra_[e].second);
    const auto occ = static_cast<uint32_t>(occurrences);  // at most UINT32_MAX
    const size_t group = group_begin_.size();
    group_begin_.push_back(i);
    group_slot_.push_back(SlotIndex::kNone);
    i = j;
    if (threshold <= 1 || sketch_.Add(id, occ) >= static_cast<uint32_t>(threshold)) {
      pending_.push_back(id);
      pending_count_.push_back(occ);
      pending_group_.push_back(group);
    } else {
      ++last_.rejected_admission;
    }
  }
  group_begin_.push_back(sorted_.size());
}

void DynamicShard::Place() {
  const uint32_t now = NowRel();
  // Room: free slots first, then victims among the rows this forward did not see.
  const int64_t free = slots_ - used_;
  const int64_t need = static_cast<int64_t>(pending_.size()) - free;
  victims_.clear();
  if (need > 0 && config_.eviction != Eviction::kNone) SelectVictims(need);
  size_t v = 0;
  created_slots_.clear();
  created_ids_.clear();
  // A victim's index bucket is cold (its row was not seen for a while); its record was read by
  // the victim selection just before, so the bucket its id names is asked of the cache
  // kVictimAhead victims ahead, as is the bucket of the new id that many ahead.
  constexpr size_t kVictimAhead = 4;
  for (size_t k = 0; k < pending_.size(); ++k) {
    if (k + kVictimAhead < pending_.size()) index_.Prefetch(pending_[k + kVictimAhead]);
    int32_t slot;
    if (used_ < slots_) {
      slot = static_cast<int32_t>(used_++);
    } else if (v < victims_.size()) {
      if (v + kVictimAhead < victims_.size())
        index_.Prefetch(records_[static_cast<size_t>(victims_[v + kVictimAhead])].id);
      slot = victims_[v++];
      if (tracking_) tombstones_.push_back(records_[slot].id);
      if (merge_baseline_ > 0) evicted_since_.push_back(records_[slot].id);
      index_.Erase(records_[slot].id, IdBase(), kIdStride);
      ++last_.evicted;
    } else {
      ++last_.rejected_full;
      continue;
    }
    records_[slot] = SlotRecord{pending_[k], now, pending_count_[k]};
    NoteForLfu(slot, pending_count_[k]);
    if (!score_.empty()) {
      score_[slot] = 0.0;
      NoteForScore(slot);
    }
    index_.Insert(pending_[k], slot);
    SetDirty(slot);
    group_slot_[pending_group_[k]] = slot;
    created_slots_.push_back(slot);
    created_ids_.push_back(pending_[k]);
    ++last_.inserted;
  }
  const int64_t zero_row = slots_;
  for (size_t g = 0; g + 1 < group_begin_.size(); ++g) {
    const int64_t row = group_slot_[g] == SlotIndex::kNone ? zero_row : group_slot_[g];
    for (size_t i = group_begin_[g]; i < group_begin_[g + 1]; ++i) *sorted_[i].at = row;
  }
}

void DynamicShard::Lookup(std::span<const IdSpan> ids) const {
  const int64_t zero_row = slots_;
  for (const IdSpan& span : ids)
    index_.FindAll(span, IdBase(), kIdStride,
                   [&](size_t i, int32_t s) { span[i] = s == SlotIndex::kNone ? zero_row : s; });
}

int64_t DynamicShard::SetScores(std::span<const int64_t> ids, std::span<const double> scores) {
  SR_CHECK(ids.size() == scores.size());
  if (score_.empty()) return 0;
  int64_t set = 0;
  index_.FindAll(ids, IdBase(), kIdStride, [&](size_t i, int32_t s) {
    if (s == SlotIndex::kNone) return;
    ++set;
    // An unchanged score (-0 is 0) keeps the row's place: noting it would only grow the side list.
    const bool changed = score_[s] != scores[i];
    score_[s] = scores[i];
    if (!changed) return;
    NoteForScore(s);
    SetMergeDirty(s);
  });
  return set;
}

void DynamicShard::RestoreScores(std::span<const double> scores) {
  if (score_.empty()) return;
  SR_CHECK(static_cast<int64_t>(scores.size()) == used_);
  std::copy(scores.begin(), scores.end(), score_.begin());
  ClearQueue();
}

void DynamicShard::RestoreMerged(int64_t forwards, std::span<const int64_t> ids,
                                 std::span<const int64_t> last_seen,
                                 std::span<const uint32_t> counts,
                                 const std::vector<uint16_t>& sketch,
                                 std::span<const int64_t> gone) {
  const StepCounts last = last_;
  Replace(forwards, ids, last_seen, counts, sketch);
  last_ = last;
  total_.evicted += static_cast<int64_t>(gone.size());
  if (tracking_) tombstones_.insert(tombstones_.end(), gone.begin(), gone.end());
}

}  // namespace shardrec::embedding::dynamic
