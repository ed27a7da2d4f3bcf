// The 2D merge by key of one dynamic shard's replicas (docs/dynamic-tables.md, "2D merge"): the
// union of their ids, each row averaged over the replicas that hold it, and when the union
// exceeds the shard's slots the victims chosen by the eviction order, so that every replica,
// given the same gathered rows, rebuilds the same shard.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "impl/sharding/types.h"

namespace shardrec::embedding::dynamic {

// One tensor of the shard (the weights, then each optimizer state): its element type and row
// width. `own_if_held`: a replica keeps its own row of the ids it holds and takes the holders'
// average only for ids it lacks (optimizer state under a weights-only sync).
struct MergeTensor {
  DType dtype = DType::kFloat32;
  size_t cols = 0;
  bool own_if_held = false;
};

// One replica's shard as gathered: rows i < ids.size() of every tensor are packed in slot order.
struct ReplicaRows {
  int64_t forwards = 0;
  std::span<const int64_t> ids, last_seen, counts;
  std::span<const uint16_t> sketch;     // admission counters; empty without admission
  std::span<const double> scores;       // per row: the caller's score; empty unless SCORE
  std::vector<const uint8_t*> tensors;  // per MergeTensor
};

// The rows of the shard that no replica changed since the last merge (DynamicShard::MarkMerged),
// read from this replica's own shard: every replica holds each of them with the same bytes and
// metadata, so none is gathered. Row i sits at slot slots[i] of each tensor (`tensors[t]` is slot
// 0, `strides[t]` bytes between slots); ids ascending.
struct CleanRows {
  int replicas = 0;  // the replica group's size: each row's number of holders
  std::vector<int64_t> ids, last_seen, counts;
  std::vector<double> scores;  // SCORE tables; else empty
  std::vector<int32_t> slots;
  std::vector<const uint8_t*> tensors;  // per MergeTensor
  std::vector<size_t> strides;
};

// The shard every replica holds after the merge: ids ascending (slot i holds ids[i]).
struct MergedShard {
  int64_t forwards = 0;
  std::vector<int64_t> ids, last_seen;
  std::vector<uint32_t> counts;
  std::vector<double> scores;  // per row (SCORE tables); empty when no replica sent scores
  std::vector<uint16_t> sketch;
  // Per merged row: its row in the CleanRows given (its bytes are not in `tensors`), or -1.
  std::vector<int64_t> clean_row;
  // Per MergeTensor, packed: the merged rows whose clean_row is -1, in order.
  std::vector<std::vector<uint8_t>> tensors;
  std::vector<int64_t> gone;  // ids replica `self` held that the merge evicted
  int64_t evicted = 0;        // ids of the union left out (over capacity)
};

// Merges `replicas` (the same shard on every replica of a group, in replica order) into a shard
// of at most `slots` rows under `config`'s eviction order, as seen from replica `self` (only
// `gone` and the own_if_held tensors depend on it). `clean` (may be null: none) adds rows held
// by every replica alike that `replicas` do not list; they merge exactly as if every replica had
// sent them (the same sums in the same order), so a merge of the changed rows plus the clean ones
// equals the merge of every row. Per id: the weights and each state are the
// fp32 sum over its holders in replica order divided by their number (16-bit storage widened,
// rounded once); last seen, count and score (SCORE tables) take the maximum; the forward counter
// and each admission counter take the maximum over all replicas. Over capacity the victims are
// the lowest scores in a SCORE table, the fewest counts in an LFU one, else the least recently
// seen; ties by id.
void MergeReplicas(const sharding::DynamicConfig& config, int64_t slots,
                   std::span<const MergeTensor> tensors, std::span<const ReplicaRows> replicas,
                   const CleanRows* clean, int self, MergedShard* out);

// Writes `merged` into the shard's tensors: merged row i to slot i of each (`dst[t]` is slot 0 of
// tensor t, `strides[t]` bytes between slots, `rows` slots in all, the last the zero row), and
// clears the slots past the merged rows, but for those from `dirty_end` to the zero row, which the
// caller knows hold zeros (`rows`: clear all). `clean` (null when merged.clean_row holds no row) is
// the CleanRows MergeReplicas was given; its rows are read from those same tensors, so they are
// moved in an order that reads every row before anything overwrites it, then the others are
// copied in.
void WriteMerged(const MergedShard& merged, const CleanRows* clean,
                 std::span<const MergeTensor> tensors, std::span<uint8_t* const> dst,
                 std::span<const size_t> strides, size_t rows, size_t dirty_end);

}  // namespace shardrec::embedding::dynamic
