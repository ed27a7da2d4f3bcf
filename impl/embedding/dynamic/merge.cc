// The 2D merge by key of a dynamic shard's replicas (merge.h).
#include "impl/embedding/dynamic/merge.h"

#include <algorithm>
#include <cstring>
#include <tuple>

#include "impl/core/check.h"
#include "impl/core/element.h"

namespace shardrec::embedding::dynamic {
namespace {

using Eviction = sharding::DynamicConfig::Eviction;

// One id of the union and where its holders keep it.
struct Key {
  int64_t id = 0;
  int64_t last_seen = 0;
  int64_t count = 0;
  double score = 0.0;
  size_t first = 0;  // its holders: holders_[first, first + n)
  size_t n = 0;
  int64_t clean = -1;  // its row in CleanRows (held alike by every replica), or -1
};

struct Holder {
  int replica = 0;
  int64_t row = 0;
};

// The keys of `replicas`' rows, ascending, with their holders in replica order.
void KeysOfReplicas(std::span<const ReplicaRows> replicas, std::vector<Key>* keys,
                    std::vector<Holder>* holders) {
  // Every (id, replica, row), by id then replica: each id's holders in replica order. Replicas
  // send their rows in ascending id order after a merge (only the changed ones, by id): their
  // lists then merge in one pass; otherwise (rows in slot order) they are sorted.
  std::vector<std::tuple<int64_t, int, int64_t>> all;
  size_t total = 0;
  bool ascending = true;
  for (const ReplicaRows& rr : replicas) {
    total += rr.ids.size();
    ascending = ascending && std::is_sorted(rr.ids.begin(), rr.ids.end());
  }
  all.reserve(total);
  if (ascending) {
    std::vector<size_t> at(replicas.size(), 0);
    for (size_t k = 0; k < total; ++k) {
      size_t best = replicas.size();
      for (size_t r = 0; r < replicas.size(); ++r)
        if (at[r] < replicas[r].ids.size() &&
            (best == replicas.size() || replicas[r].ids[at[r]] < replicas[best].ids[at[best]]))
          best = r;
      all.emplace_back(replicas[best].ids[at[best]], static_cast<int>(best),
                       static_cast<int64_t>(at[best]));
      ++at[best];
    }
  } else {
    for (size_t r = 0; r < replicas.size(); ++r) {
      const ReplicaRows& rr = replicas[r];
      for (size_t i = 0; i < rr.ids.size(); ++i)
        all.emplace_back(rr.ids[i], static_cast<int>(r), static_cast<int64_t>(i));
    }
    std::sort(all.begin(), all.end());
  }
  holders->reserve(all.size());
  for (size_t i = 0; i < all.size();) {
    Key k;
    k.id = std::get<0>(all[i]);
    k.first = holders->size();
    bool first_score = true;
    for (; i < all.size() && std::get<0>(all[i]) == k.id; ++i) {
      const auto [id, r, row] = all[i];
      const ReplicaRows& rr = replicas[static_cast<size_t>(r)];
      k.last_seen = std::max(k.last_seen, rr.last_seen[static_cast<size_t>(row)]);
      k.count = std::max(k.count, rr.counts[static_cast<size_t>(row)]);
      // The maximum: a key any replica scored high stays (scores are finite, maybe negative).
      const double score = rr.scores.empty() ? 0.0 : rr.scores[static_cast<size_t>(row)];
      k.score = first_score ? score : std::max(k.score, score);
      first_score = false;
      holders->push_back({r, row});
    }
    k.n = holders->size() - k.first;
    keys->push_back(k);
  }
}

// `keys` (ascending) with the clean rows' keys woven in by id (no id is in both).
void AddClean(const CleanRows& clean, std::vector<Key>* keys) {
  std::vector<Key> woven;
  woven.reserve(keys->size() + clean.ids.size());
  size_t a = 0;
  for (size_t c = 0; c < clean.ids.size(); ++c) {
    for (; a < keys->size() && (*keys)[a].id < clean.ids[c]; ++a) woven.push_back((*keys)[a]);
    Key k;
    k.id = clean.ids[c];
    k.last_seen = clean.last_seen[c];
    k.count = clean.counts[c];
    k.score = clean.scores.empty() ? 0.0 : clean.scores[c];
    k.n = static_cast<size_t>(clean.replicas);
    k.clean = static_cast<int64_t>(c);
    woven.push_back(k);
  }
  for (; a < keys->size(); ++a) woven.push_back((*keys)[a]);
  keys->swap(woven);
}

constexpr size_t kChunk = 64;  // columns MergeClean averages at a time

// sum[c] /= n for c < m. Dividing by a power of two is multiplying by its exact inverse (the same
// quotient, rounded once), which vectorizes; other counts divide.
void Divide(float* sum, size_t m, int n) {
  if ((n & (n - 1)) == 0) {
    const float inverse = 1.0f / static_cast<float>(n);
    for (size_t c = 0; c < m; ++c) sum[c] *= inverse;
  } else {
    const auto d = static_cast<float>(n);
    for (size_t c = 0; c < m; ++c) sum[c] /= d;
  }
}

// A clean row's bytes `from` as merged into `to` (the same row, or one that does not overlap it):
// this replica's own bytes when it keeps its own, else the average of the replicas' identical
// copies, summed in replica order as MergeReplicas sums the rows sent (a sum of n equal fp32
// values need not be n times the value).
void MergeClean(const MergeTensor& mt, int replicas, const uint8_t* from, uint8_t* to) {
  const size_t es = DTypeSize(mt.dtype);
  if (mt.own_if_held || replicas == 1) {
    if (to != from) std::memcpy(to, from, mt.cols * es);
    return;
  }
  if (replicas == 2 && mt.dtype == DType::kFloat32) {  // the usual case, in one vectorized pass
    const auto* x = reinterpret_cast<const float*>(from);
    auto* o = reinterpret_cast<float*>(to);
    for (size_t c = 0; c < mt.cols; ++c) o[c] = ((0.0f + x[c]) + x[c]) * 0.5f;
    return;
  }
  float x[kChunk], sum[kChunk];
  for (size_t c0 = 0; c0 < mt.cols; c0 += kChunk) {
    const size_t m = std::min(kChunk, mt.cols - c0);
    if (mt.dtype == DType::kFloat32) {
      std::memcpy(x, from + c0 * es, m * es);
    } else {
      for (size_t c = 0; c < m; ++c) x[c] = LoadElement(mt.dtype, from + (c0 + c) * es);
    }
    // 0 + x first, as the sum of the rows sent starts (-0 becomes +0); two replicas, the usual
    // group, in a loop the compiler vectorizes.
    if (replicas == 2) {
      for (size_t c = 0; c < m; ++c) sum[c] = (0.0f + x[c]) + x[c];
    } else {
      for (size_t c = 0; c < m; ++c) {
        float s = 0.0f;
        for (int r = 0; r < replicas; ++r) s += x[c];
        sum[c] = s;
      }
    }
    Divide(sum, m, replicas);
    if (mt.dtype == DType::kFloat32) {
      std::memcpy(to + c0 * es, sum, m * es);
    } else {
      for (size_t c = 0; c < m; ++c) StoreElement(mt.dtype, sum[c], to + (c0 + c) * es);
    }
  }
}

}  // namespace

void MergeReplicas(const sharding::DynamicConfig& config, int64_t slots,
                   std::span<const MergeTensor> tensors, std::span<const ReplicaRows> replicas,
                   const CleanRows* clean, int self, MergedShard* out) {
  SR_CHECK(self >= 0 && static_cast<size_t>(self) < replicas.size());
  SR_CHECK(clean == nullptr || clean->replicas == static_cast<int>(replicas.size()));
  // Cleared, not replaced: a caller that merges every sync keeps the buffers' memory.
  out->forwards = 0;
  out->gone.clear();
  out->evicted = 0;
  out->sketch.clear();
  out->scores.clear();
  for (const ReplicaRows& rr : replicas) out->forwards = std::max(out->forwards, rr.forwards);
  bool scored = clean != nullptr && !clean->scores.empty();
  for (const ReplicaRows& rr : replicas) scored = scored || !rr.scores.empty();
  std::vector<Key> keys;
  std::vector<Holder> holders;
  KeysOfReplicas(replicas, &keys, &holders);
  if (clean != nullptr) AddClean(*clean, &keys);
  // Over capacity: the ids that leave first under the table's order (SCORE: lowest score, as a
  // forward evicts; LFU: fewest occurrences; otherwise, and for tables that never evict in
  // training, least recently seen; ties by id).
  const int64_t excess = static_cast<int64_t>(keys.size()) - slots;
  if (excess > 0) {
    std::vector<size_t> order(keys.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    const bool lfu = config.eviction == Eviction::kLfu;
    const bool by_score = config.eviction == Eviction::kScore;
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      const Key& x = keys[a];
      const Key& y = keys[b];
      if (by_score) return std::tie(x.score, x.id) < std::tie(y.score, y.id);
      if (lfu) return std::tie(x.count, x.last_seen, x.id) < std::tie(y.count, y.last_seen, y.id);
      return std::tie(x.last_seen, x.id) < std::tie(y.last_seen, y.id);
    });
    std::vector<char> leaves(keys.size(), 0);
    for (int64_t i = 0; i < excess; ++i) leaves[order[static_cast<size_t>(i)]] = 1;
    std::vector<Key> kept;
    kept.reserve(static_cast<size_t>(slots));
    for (size_t i = 0; i < keys.size(); ++i) {
      if (!leaves[i]) {
        kept.push_back(keys[i]);
        continue;
      }
      bool held = keys[i].clean >= 0;  // a clean row: every replica holds it
      for (size_t h = keys[i].first; !held && h < keys[i].first + keys[i].n; ++h)
        held = holders[h].replica == self;
      if (held) out->gone.push_back(keys[i].id);
    }
    keys.swap(kept);
    out->evicted = excess;
  }
  const size_t n = keys.size();
  out->ids.resize(n);
  out->last_seen.resize(n);
  out->counts.resize(n);
  out->clean_row.resize(n);
  if (scored) out->scores.resize(n);
  size_t packed = 0;  // merged rows not clean: their bytes go to out->tensors
  for (size_t i = 0; i < n; ++i) {
    out->clean_row[i] = keys[i].clean;
    packed += keys[i].clean < 0 ? 1 : 0;
    if (scored) out->scores[i] = keys[i].score;
    out->ids[i] = keys[i].id;
    out->last_seen[i] = keys[i].last_seen;
    out->counts[i] = static_cast<uint32_t>(std::min<int64_t>(keys[i].count, UINT32_MAX));
  }
  // Admission counters: the maximum, like the counts (a sum would count again, at every later
  // sync, the occurrences summed at the previous one).
  for (const ReplicaRows& rr : replicas) {
    if (rr.sketch.size() > out->sketch.size()) out->sketch.resize(rr.sketch.size(), 0);
    for (size_t i = 0; i < rr.sketch.size(); ++i)
      out->sketch[i] = std::max(out->sketch[i], rr.sketch[i]);
  }
  out->tensors.resize(tensors.size());
  std::vector<float> sum;
  for (size_t t = 0; t < tensors.size(); ++t) {
    const MergeTensor& mt = tensors[t];
    const size_t es = DTypeSize(mt.dtype);
    const size_t row_bytes = mt.cols * es;
    std::vector<uint8_t>& dst = out->tensors[t];
    dst.resize(packed * row_bytes);
    sum.assign(mt.cols, 0.0f);
    uint8_t* next = dst.data();
    for (size_t i = 0; i < n; ++i) {
      const Key& k = keys[i];
      if (k.clean >= 0) continue;  // WriteMerged moves it
      uint8_t* to = next;
      next += row_bytes;
      const Holder* own = nullptr;
      if (mt.own_if_held)
        for (size_t h = k.first; h < k.first + k.n; ++h)
          if (holders[h].replica == self) own = &holders[h];
      if (own != nullptr || k.n == 1) {
        // One holder (or this replica's own row): its bytes, unrounded.
        const Holder& h = own != nullptr ? *own : holders[k.first];
        std::memcpy(to, replicas[static_cast<size_t>(h.replica)].tensors[t] + h.row * row_bytes,
                    row_bytes);
        continue;
      }
      std::fill(sum.begin(), sum.end(), 0.0f);
      for (size_t h = k.first; h < k.first + k.n; ++h) {
        const uint8_t* from = replicas[static_cast<size_t>(holders[h].replica)].tensors[t] +
                              holders[h].row * row_bytes;
        if (mt.dtype == DType::kFloat32) {  // a loop the compiler vectorizes
          const float* x = reinterpret_cast<const float*>(from);
          for (size_t c = 0; c < mt.cols; ++c) sum[c] += x[c];
        } else {
          for (size_t c = 0; c < mt.cols; ++c) sum[c] += LoadElement(mt.dtype, from + c * es);
        }
      }
      Divide(sum.data(), mt.cols, static_cast<int>(k.n));
      if (mt.dtype == DType::kFloat32) {
        std::memcpy(to, sum.data(), row_bytes);
      } else {
        for (size_t c = 0; c < mt.cols; ++c) StoreElement(mt.dtype, sum[c], to + c * es);
      }
    }
  }
}

void WriteMerged(const MergedShard& merged, const CleanRows* clean,
                 std::span<const MergeTensor> tensors, std::span<uint8_t* const> dst,
                 std::span<const size_t> strides, size_t rows, size_t dirty_end) {
  const size_t n = merged.ids.size();
  SR_CHECK(n <= rows && merged.clean_row.size() == n);
  // The clean rows' moves, (from slot, to slot), in merged order. Both rise together when the
  // clean slots rise with the ids (a shard written by a merge): then a row moving up is never the
  // source of a row moving down and vice versa, so the ones moving up go from the last and the
  // others from the first, each read before anything lands on it. Otherwise (never after a
  // merge) they are staged first.
  std::vector<std::pair<size_t, size_t>> moves;
  for (size_t i = 0; i < n; ++i)
    if (merged.clean_row[i] >= 0)
      moves.emplace_back(
          static_cast<size_t>(clean->slots[static_cast<size_t>(merged.clean_row[i])]), i);
  bool rising = true;
  for (size_t k = 1; k < moves.size(); ++k) rising = rising && moves[k - 1].first < moves[k].first;
  std::vector<uint8_t> staged;
  for (size_t t = 0; t < tensors.size(); ++t) {
    const MergeTensor& mt = tensors[t];
    const size_t row_bytes = mt.cols * DTypeSize(mt.dtype);
    uint8_t* const base = dst[t];
    const size_t stride = strides[t];
    if (!moves.empty()) SR_CHECK(clean != nullptr && clean->tensors[t] == base);
    if (rising) {
      for (size_t k = moves.size(); k-- > 0;)
        if (moves[k].second > moves[k].first)
          MergeClean(mt, clean->replicas, base + moves[k].first * stride,
                     base + moves[k].second * stride);
      for (const auto& [from, to] : moves)
        if (to <= from) MergeClean(mt, clean->replicas, base + from * stride, base + to * stride);
    } else {
      staged.resize(moves.size() * row_bytes);
      for (size_t k = 0; k < moves.size(); ++k)
        std::memcpy(staged.data() + k * row_bytes, base + moves[k].first * stride, row_bytes);
      for (size_t k = 0; k < moves.size(); ++k)
        MergeClean(mt, clean->replicas, staged.data() + k * row_bytes,
                   base + moves[k].second * stride);
    }
    const uint8_t* packed = merged.tensors[t].data();
    for (size_t i = 0; i < n; ++i) {
      if (merged.clean_row[i] >= 0) continue;
      std::memcpy(base + i * stride, packed, row_bytes);
      packed += row_bytes;
    }
    // The free slots and the zero row hold nothing: cleared, so the replicas agree on every byte.
    for (size_t i = n; i < std::min(dirty_end, rows); ++i)
      std::memset(base + i * stride, 0, row_bytes);
    if (dirty_end < rows) std::memset(base + (rows - 1) * stride, 0, row_bytes);
  }
}

}  // namespace shardrec::embedding::dynamic
