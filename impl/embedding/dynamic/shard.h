// The rows of one dynamic shard (docs/dynamic-tables.md): which id holds which slot, when each
// was last seen and how often, the admission counts of ids without a row, and the per-step
// decisions (touch, admit, insert, evict) that turn a training batch's ids into slots.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <utility>
#include <vector>

#include "impl/embedding/dynamic/admission_sketch.h"
#include "impl/embedding/dynamic/huge_page_allocator.h"
#include "impl/embedding/dynamic/slot_index.h"
#include "impl/sharding/types.h"

namespace shardrec::embedding::dynamic {

// What one training forward (or every one since creation) did to a shard's rows.
struct StepCounts {
  int64_t inserted = 0;            // rows created
  int64_t evicted = 0;             // rows that left to make room
  int64_t rejected_admission = 0;  // distinct ids below the admission threshold
  int64_t rejected_full = 0;       // distinct admitted ids that found no slot

  void Add(const StepCounts& o) {
    inserted += o.inserted;
    evicted += o.evicted;
    rejected_admission += o.rejected_admission;
    rejected_full += o.rejected_full;
  }
};

// Ids of a batch as spans the translation rewrites in place.
using IdSpan = std::span<int64_t>;
// The occurrence counts (each >= 1) of an IdSpan's elements, or empty: one occurrence each.
using CountSpan = std::span<const int64_t>;

class DynamicShard {
 public:
  // An empty shard of `slots` (>= 1) slots under `config`.
  void Reset(const sharding::DynamicConfig& config, int64_t slots);
  // What sets the rows a forward created: slots[i] was given to ids[i]; it must set their weights
  // and clear their optimizer state.
  using InitRows =
      std::function<void(std::span<const int32_t> slots, std::span<const int64_t> ids)>;
  // One training forward: every id of `ids` (any order, repeated) becomes its slot, or slots()
  // (the zero row) when it has no row. Decisions follow the distinct ids in ascending order, so
  // they depend on the ids alone. `init` is called once, at the end, when the forward created
  // rows (in the order it created them).
  void Translate(std::span<const IdSpan> ids, const InitRows& init) { Translate(ids, {}, init); }
  // As above, where `counts` is empty or holds a CountSpan per span of `ids`: an element counted
  // c times decides as c occurrences of its id would (the same touches, counts, admission and
  // slots), so a data-parallel copy translates other ranks' distinct ids once, not per
  // occurrence.
  void Translate(std::span<const IdSpan> ids, std::span<const CountSpan> counts,
                 const InitRows& init);

  // An evaluation forward (docs/dynamic-tables.md, "Evaluation"): every id of `ids` becomes its
  // slot, or slots() (the zero row) when it has no row; nothing else changes (no touch, count,
  // admission, insertion, eviction, dirty bit or step count).
  void Lookup(std::span<const IdSpan> ids) const;

  // The caller's eviction scores (SCORE policy only; docs/dynamic-tables.md, "Scores"): each
  // ids[i] with a row here takes scores[i] (the last one when repeated); the others are ignored.
  // Returns how many entries named a row. A new row scores 0.
  int64_t SetScores(std::span<const int64_t> ids, std::span<const double> scores);
  // Per slot [0, size()): its score; empty unless the policy is SCORE.
  std::span<const double> scores() const {
    return score_.empty() ? std::span<const double>{}
                          : std::span<const double>{score_.data(), static_cast<size_t>(used_)};
  }
  // A checkpoint's scores, after Restore: scores[i] for slot i (size() of them; ignored unless
  // the policy is SCORE; Restore alone leaves every score 0).
  void RestoreScores(std::span<const double> scores);

  int64_t slots() const { return slots_; }
  int64_t size() const { return used_; }
  const StepCounts& last() const { return last_; }
  const StepCounts& total() const { return total_; }
  // The side list's length from which it is folded into the queue (0: the default, 2^16 entries
  // or twice the queue); tests set it low to fold often.
  void set_side_limit(size_t n) { side_limit_set_ = n; }
  // Bytes of the index, the per-slot metadata and the sketch.
  size_t metadata_bytes() const;
  // The metadata_bytes() of a shard just Reset(config, slots), all of which Reset writes.
  static size_t MetadataBytesAtReset(const sharding::DynamicConfig& config, int64_t slots);

  // What a checkpoint saves (docs/checkpoint-format.md): slots [0, size()) hold rows, each with
  // its id, last-seen forward and count; forwards() is the forward counter the last-seen values
  // are relative to.
  int64_t forwards() const { return now_; }
  int64_t id(int64_t slot) const { return records_[static_cast<size_t>(slot)].id; }
  int64_t last_seen(int64_t slot) const { return base_ + records_[static_cast<size_t>(slot)].seen; }
  uint32_t count(int64_t slot) const { return records_[static_cast<size_t>(slot)].count; }
  // Slot s < size()'s id where the shard keeps it, at id_base()[s * id_stride()]: for a reader of
  // every slot's id that must not copy them (the optimizer keys a dynamic row's stochastic
  // rounding by its id, optim::ShardParams::row_ids). Valid until the next Reset.
  const int64_t* id_base() const { return IdBase(); }
  static constexpr int64_t id_stride() { return static_cast<int64_t>(kIdStride); }
  // Per slot [0, size()): its id, last-seen forward and count, copied out (the shard keeps them
  // in one record per slot, see SlotRecord).
  std::vector<int64_t> Ids() const;
  std::vector<int64_t> LastSeen() const;
  std::vector<uint32_t> Counts() const;
  const std::vector<uint16_t>& sketch() const { return sketch_.counters(); }
  // A checkpoint's rows replace every row: ids[i] (distinct, at most slots()) takes slot i with
  // its metadata, and the forward counter becomes `forwards`. `sketch` restores the admission
  // counts when it has this shard's size; otherwise they start from zero. The caller writes the
  // rows' weights and optimizer state.
  void Restore(int64_t forwards, std::span<const int64_t> ids, std::span<const int64_t> last_seen,
               std::span<const uint32_t> counts, const std::vector<uint16_t>& sketch);
  // A 2D merge's result (merge.h), or a table import's (rows added beside the held ones),
  // replaces every row as Restore does, but is not a Restore for delta tracking: the shard's
  // history since the mark stays known, so the tombstones are kept and gain `gone` (ids this shard
  // held that the merge evicted), which also count as evictions in total(), and replaced() does
  // not change; last() stays the last forward's.
  void RestoreMerged(int64_t forwards, std::span<const int64_t> ids,
                     std::span<const int64_t> last_seen, std::span<const uint32_t> counts,
                     const std::vector<uint16_t>& sketch, std::span<const int64_t> gone);

  // Delta tracking (docs/dynamic-tables.md, "Delta export"), off until the first Mark, which
  // turns it on and forgets what changed before. From then on a slot is dirty when a training
  // forward sees or inserts its id (a superset of the rows the optimizer changes), and each
  // evicted id is appended to the tombstones (8 bytes per eviction until the next Mark). A
  // Restore marks every restored row dirty, adds every id held before it to the tombstones (the
  // export drops those that have a row again), so replaying the delta onto the table at the mark
  // still gives the table, and sets replaced() until the next Mark.
  void Mark();
  bool tracking() const { return tracking_; }
  bool dirty(int64_t slot) const { return (dirty_[slot >> 6] >> (slot & 63)) & 1u; }
  const std::vector<int64_t>& tombstones() const { return tombstones_; }
  // A Restore (a checkpoint load) replaced the rows since the mark: every row is dirty, and the
  // delta is a full snapshot that a consumer in any state may take as the whole shard.
  bool replaced() const { return replaced_; }

  // Change tracking for the 2D merge (docs/dynamic-tables.md, "2D merge"), off until MarkMerged,
  // which a merge calls once it has written the shard every replica of it now holds, and off
  // again after a Restore or a Rebase (the shard no longer follows from that merge). While on,
  // every id whose row, optimizer state or metadata may differ from the merge's is listed by
  // ChangedSinceMerge: the ids of the slots a training forward saw or created or whose score
  // changed (as for delta tracking), and the ids evicted since. `states`: the merge also wrote
  // the optimizer states (a weights-and-state sync), so they too are the same on every replica.
  void MarkMerged(bool states);
  // 0: not tracking; 1: tracking since a weights-only merge; 2: since a weights-and-state merge.
  int merge_baseline() const { return merge_baseline_; }
  // The ids changed since MarkMerged (while tracking), ascending and distinct.
  std::vector<int64_t> ChangedSinceMerge() const;

 private:
  // Translate's three phases: every id with a row is touched and becomes its slot, the others
  // are kept in sorted_; sorted_ is ordered and grouped by id, and the admitted ones listed in
  // pending_; pending_ ids take free slots or victims' (created_slots_ / created_ids_), and every
  // occurrence in sorted_ becomes its slot or the zero row.
  void TouchKnown(std::span<const IdSpan> ids, std::span<const CountSpan> counts);
  // TouchKnown over one span, `count(i)` the occurrences of span[i].
  template <typename Count>
  void TouchSpan(const IdSpan& span, Count&& count);
  void GroupUnknown();
  void Place();
  // Fills victims_ with the `need` rows that leave first in the policy's order (fewer when fewer
  // rows may leave; docs/dynamic-tables.md, "Determinism"; shard_victims.cc), in
  // ascending slot order: the order new ids take them.
  void SelectVictims(int64_t need);
  // victims_ from queue_ (and, under LFU and SCORE, side_) (true), or false with victims_, queue_
  // and side_ unchanged when they run out first and the queue does not hold every candidate.
  bool TakeQueued(int64_t need);
  // queue_ becomes the first rows of this forward's candidates (collected in candidates_) in
  // eviction order, at least `need`; under LFU and SCORE side_ the rows this forward saw that
  // order before the queue's last.
  void BuildQueue(int64_t need);
  // The slots of candidates_' `need` smallest keys (all when fewer) into victims_, in no order.
  void TakeSmallest(size_t need);
  // Sorts victims_ (distinct slots below used_) ascending.
  void OrderBySlot();
  // Orders the `k` smallest keys of candidates_ first and drops the rest.
  void KeepSmallest(size_t k);
  // candidates_ becomes its `k` (< size) smallest keys, in no particular order.
  void SelectSmallest(size_t k);
  // Asks the cache for slot s's record (s may be SlotIndex::kNone: nothing).
  void PrefetchSlot(int32_t s) const {
    if (s < 0) return;
    core::PrefetchLine(records_.data() + s);
  }
  // Moves base_ up to the oldest row's last-seen forward (or as far as the 32-bit range needs,
  // clamping older rows) when now_ would no longer fit relative to it.
  void Rebase();
  // The forward counter relative to base_.
  uint32_t NowRel() const { return static_cast<uint32_t>(now_ - base_); }
  // TTL: slot's row was seen within ttl_steps forwards of `now` (NowRel()), so it may not leave.
  bool TooRecent(int32_t slot, uint32_t now) const {
    return int64_t{now - records_[static_cast<size_t>(slot)].seen} <= config_.ttl_steps;
  }

  sharding::DynamicConfig config_;
  int64_t slots_ = 0;
  int64_t used_ = 0;  // slots [0, used_) hold rows; a slot is reused only by eviction
  int64_t now_ = 0;   // training forwards translated so far
  SlotIndex index_;
  AdmissionSketch sketch_;  // empty unless the admission threshold is above 1
  // Per slot: its id, its last-seen forward relative to base_ and its occurrences since it got
  // the slot (saturating), in one 16-byte record: a lookup compares the id and a touch writes
  // the rest in the same cache line. 32 bits of forwards last 4 billion training forwards between
  // rebases; only rows unseen for that long would lose their order.
  struct SlotRecord {
    int64_t id;
    uint32_t seen;
    uint32_t count;
  };
  static_assert(sizeof(SlotRecord) == 16);
  static constexpr size_t kIdStride = sizeof(SlotRecord) / sizeof(int64_t);
  // The ids as the index reads them: ids[slot * kIdStride].
  const int64_t* IdBase() const { return &records_.data()->id; }
  HugeVector<SlotRecord> records_;
  int64_t base_ = 0;           // the forward that records_[s].seen == 0 means
  std::vector<double> score_;  // per slot: the caller's score (SCORE policy only)
  StepCounts last_, total_;
  bool tracking_ = false;
  bool replaced_ = false;        // see replaced()
  std::vector<uint64_t> dirty_;  // one bit per slot, while tracking
  std::vector<int64_t> tombstones_;
  int merge_baseline_ = 0;              // see merge_baseline()
  std::vector<uint64_t> merge_dirty_;   // one bit per slot, while merge_baseline_ > 0
  std::vector<int64_t> evicted_since_;  // ids evicted since MarkMerged, while tracking it
  void SetMergeDirty(int64_t slot) {
    if (merge_baseline_ > 0) merge_dirty_[slot >> 6] |= uint64_t{1} << (slot & 63);
  }
  void SetDirty(int64_t slot) {
    if (tracking_) dirty_[slot >> 6] |= uint64_t{1} << (slot & 63);
    SetMergeDirty(slot);
  }
  // Restore's and RestoreMerged's common part: the rows, metadata and forward counter replaced;
  // while tracking every row is dirty and the tombstones are left to the caller.
  void Replace(int64_t forwards, std::span<const int64_t> ids, std::span<const int64_t> last_seen,
               std::span<const uint32_t> counts, const std::vector<uint16_t>& sketch);
  void StopMergeTracking() {
    merge_baseline_ = 0;
    merge_dirty_.clear();
    evicted_since_.clear();
  }
  // Scratch of Translate, reused. Each occurrence of an id without a row is kept with where it
  // is written back, so its slot (or the zero row) reaches it from the sorted walk.
  struct Occurrence {
    int64_t id;
    int64_t* at;
  };
  std::vector<Occurrence> sorted_, sorted_scratch_;
  // Per counted element without a row (Translate's counts): its id and the occurrences it stands
  // for beyond its one entry in sorted_.
  std::vector<std::pair<int64_t, uint64_t>> extra_;
  std::vector<uint32_t> sort_count_;
  std::vector<size_t> group_begin_;  // per distinct id (ascending) + 1: its range in sorted_
  std::vector<int32_t> group_slot_;  // per distinct id: its slot, or SlotIndex::kNone
  std::vector<int64_t> pending_;     // admitted new ids, ascending
  std::vector<uint32_t> pending_count_;
  std::vector<size_t> pending_group_;
  std::vector<int32_t> victims_, victims_scratch_;
  std::vector<uint64_t> victim_bits_;   // scratch of OrderBySlot
  std::vector<int32_t> created_slots_;  // the rows this forward created, for InitRows
  std::vector<int64_t> created_ids_;
  struct Candidate {
    uint64_t hi;  // (LFU's count, 0 otherwise) << 32 | last seen relative to base_
    uint64_t lo;  // the id, sign bit flipped (unsigned order = the ids' order)
    int32_t slot;
  };
  std::vector<Candidate> candidates_, scratch_;  // scratch of SelectVictims
  // Slot `slot`'s candidate with its 128-bit eviction key under the policy
  // (shard_victims.cc), and the order of those keys.
  Candidate KeyOf(int32_t slot) const;
  static bool KeyLess(const Candidate& a, const Candidate& b) {
    return a.hi != b.hi ? a.hi < b.hi : a.lo < b.lo;
  }
  // Byte d (0 = least significant) of a candidate's 128-bit key (hi, lo).
  static size_t KeyDigit(const Candidate& c, int d) {
    return d < 8 ? (c.lo >> (8 * d)) & 0xff : (c.hi >> (8 * (d - 8))) & 0xff;
  }
  // Every row this forward did not see into candidates_, with its key (TTL's recency is checked
  // where victims are taken: a row too recent now may leave later).
  void CollectCandidates();
  // Gives candidates_ and scratch_ back after a scan, so a shard holds its 48 bytes per scanned
  // row only while it scans (keeping them for the next scan measured no faster: the step bench's
  // small shards, which scan every forward, 2026-11-27).
  void ReleaseScratch();
  // The first rows in eviction order that a scan of the whole shard found, with their keys,
  // consumed over the next forwards (a table of millions of slots is then scanned once per many
  // forwards, not per forward). An entry is stale once its slot's key differs: the row was seen
  // again (LRU, TTL, LFU), scored again (SCORE) or replaced. Under LRU and TTL such a row, and
  // every row outside the queue, is younger than every live entry. Under LFU and SCORE a row
  // seen, created or scored since the scan may still order before the queue's last entry (the
  // bound): its slot is noted in side_ (LFU: at its first touch in a forward, while its count
  // stays below the bound's; SCORE: when its score changes or it is created, and its key is below
  // the bound; both: by the scan, for the rows its forward saw), and victims are taken from both
  // in order. Under SCORE a live entry whose row a forward sees may not leave in that forward but
  // keeps its place: it moves to side_. A full side_ is folded into the queue (FoldSide), whose
  // last entry is then a new, lower bound. Cleared whenever keys are rewritten (Reset, Restore,
  // RestoreScores, Rebase).
  std::vector<Candidate> queue_;
  size_t queue_next_ = 0;        // entries before it are consumed
  bool queue_complete_ = false;  // the scan put every row its forward had not seen in
  int64_t queue_forward_ = 0;    // the forward of that scan
  // LFU: the bound's count (0: nothing noted), kept apart for NoteForLfu's one comparison.
  uint32_t lfu_bound_count_ = 0;
  std::vector<int32_t> side_;
  size_t side_limit_ = 0;    // beyond it the side list is folded into the queue (FoldSide)
  size_t queue_target_ = 0;  // the length BuildQueue gave the queue; a fold keeps at most this
  size_t side_limit_set_ = 0;
  // `c` orders before the queue's last entry (false without a queue; side_ is kept only under LFU
  // and SCORE). The queue is not changed between its scan and ClearQueue, so that entry is the
  // bound.
  bool BeforeBound(const Candidate& c) const {
    return !queue_.empty() && KeyLess(c, queue_.back());
  }
  // Appends `slot` to side_, folding side_ into the queue first when it is full (forwards
  // without eviction, or a caller rescoring many rows, noted many).
  void NoteSide(int32_t slot) {
    if (side_.size() >= side_limit_) FoldSide();
    if (!queue_.empty()) side_.push_back(slot);
  }
  // The queue becomes its live entries and the side list's rows still before the bound, in
  // order, at most queue_target_ of them (its last entry the new bound); side_ keeps only the
  // rows the current forward saw. Every row outside ordered at or after the old bound, so at or
  // after the new one: the queue keeps serving without a scan of the shard
  // (shard_victims.cc).
  void FoldSide();
  // The side list's rows still before the bound: the slots of those the current forward (`now`)
  // saw are appended to *seen_now, the current keys of the others to *before (unordered; a row
  // noted twice appears twice).
  void SplitSide(uint32_t now, std::vector<Candidate>* before,
                 std::vector<int32_t>* seen_now) const;
  // The notes a side list takes before a fold (beyond the rows a fold leaves in it).
  size_t SideLimit() const;
  // Under LFU, notes `slot` (just touched for the first time this forward, or created) when its
  // count stays below the bound. Inline: it runs for every row a forward touches.
  void NoteForLfu(int32_t slot, uint64_t count) {
    if (count < lfu_bound_count_) NoteSide(slot);
  }
  // Under SCORE, notes `slot` (just created, or its score just changed) when its key orders
  // before the bound.
  void NoteForScore(int32_t slot) {
    if (BeforeBound(KeyOf(slot))) NoteSide(slot);
  }
  void ClearQueue() {
    queue_.clear();
    queue_next_ = 0;
    queue_complete_ = false;
    lfu_bound_count_ = 0;
    side_.clear();
  }
};

}  // namespace shardrec::embedding::dynamic
