// Which rows leave a full dynamic shard (shard.h, SelectVictims): the first ones in the
// order of docs/dynamic-tables.md, "Determinism", found without sorting the whole shard in every
// forward (a queue kept across forwards, or a selection when a forward needs most candidates).
// Every path gives the same victims as one sort of every candidate by the policy's order; they
// are handed out in slot order.
#include <algorithm>
#include <array>
#include <cstring>

#include "impl/core/check.h"
#include "impl/embedding/dynamic/radix_sort.h"
#include "impl/embedding/dynamic/shard.h"

namespace shardrec::embedding::dynamic {

using Eviction = sharding::DynamicConfig::Eviction;

namespace {

// A scan keeps several forwards' worth of victims, and at least a sixteenth of the shard, so a
// large shard is scanned once per many forwards.
constexpr size_t kQueueForwards = 4;
constexpr size_t kQueueShardFraction = 16;
// LFU, SCORE: a side list is folded into the queue once it holds this many rows and twice the
// queue's.
constexpr size_t kMinSideLimit = size_t{1} << 16;
// Equal candidates are one row: after a sort by key, the same slot's entries are side by side.
constexpr auto kSameSlot = [](const auto& a, const auto& b) { return a.slot == b.slot; };
// A finite score as 64 bits whose unsigned order is the scores' order (-0 taken as +0, which
// compares equal to it).
uint64_t ScoreBits(double score) {
  if (score == 0.0) score = 0.0;
  uint64_t u;
  std::memcpy(&u, &score, sizeof(u));
  return (u >> 63) != 0 ? ~u : u | (uint64_t{1} << 63);
}

}  // namespace

DynamicShard::Candidate DynamicShard::KeyOf(int32_t slot) const {
  // The policy's order as one 128-bit key: hi is, for LRU, TTL and LFU, (LFU's count, else 0)
  // << 32 | last seen (relative to base_, the same for every row), for SCORE the caller's score
  // in order-preserving bits; lo the id with its sign bit flipped. So the unsigned order of
  // (hi, lo) is the order of (count, last seen, id) or (score, id). Keys are distinct (ids are),
  // so any exact selection by key gives exactly the victims, in the order, that a sort of every
  // candidate by (count, last seen, id) or (score, id) would.
  const SlotRecord& m = records_[static_cast<size_t>(slot)];
  const uint64_t hi =
      config_.eviction == Eviction::kScore
          ? ScoreBits(score_[static_cast<size_t>(slot)])
          : (uint64_t{config_.eviction == Eviction::kLfu ? m.count : 0u} << 32) | m.seen;
  return Candidate{hi, static_cast<uint64_t>(m.id) ^ (uint64_t{1} << 63), slot};
}

void DynamicShard::CollectCandidates() {
  const uint32_t now = NowRel();
  candidates_.clear();
  for (int64_t s = 0; s < used_; ++s)
    if (records_[s].seen != now) candidates_.push_back(KeyOf(static_cast<int32_t>(s)));
}

void DynamicShard::ReleaseScratch() {
  std::vector<Candidate>().swap(candidates_);
  std::vector<Candidate>().swap(scratch_);
}

void DynamicShard::SelectSmallest(size_t k) {
  // A radix selection from the most significant byte down: per byte, the keys whose byte is
  // below the one where the k-th smallest falls are kept, those above dropped, and only the keys
  // that share it go on to the next byte. Keys are distinct, so exactly k remain. Linear, without
  // the branch per comparison that nth_element mispredicts on random ids.
  scratch_.clear();  // the kept ones; the undecided ones are candidates_[0, end)
  size_t end = candidates_.size();
  // Bytes every key shares (most of an LRU key's last-seen half) are skipped without a pass.
  uint64_t varies_hi = 0, varies_lo = 0;
  for (const Candidate& c : candidates_) {
    varies_hi |= c.hi ^ candidates_[0].hi;
    varies_lo |= c.lo ^ candidates_[0].lo;
  }
  for (int d = 15; d >= 0 && k > 0 && end > k; --d) {
    if (((d < 8 ? varies_lo >> (8 * d) : varies_hi >> (8 * (d - 8))) & 0xff) == 0) continue;
    std::array<size_t, 256> count{};
    for (size_t i = 0; i < end; ++i) ++count[KeyDigit(candidates_[i], d)];
    size_t below = 0, at = 0;
    while (below + count[at] < k) below += count[at++];
    size_t tied = 0;
    for (size_t i = 0; i < end; ++i) {
      const size_t digit = KeyDigit(candidates_[i], d);
      if (digit < at)
        scratch_.push_back(candidates_[i]);
      else if (digit == at)
        candidates_[tied++] = candidates_[i];
    }
    end = tied;
    k -= below;
  }
  scratch_.insert(scratch_.end(), candidates_.begin(),
                  candidates_.begin() + static_cast<int64_t>(k));
  candidates_.swap(scratch_);
}

void DynamicShard::KeepSmallest(size_t k) {
  // A radix sort (radix_sort.h) when most candidates are kept: a comparison sort of random ids
  // mispredicts about every other branch. When few are, a selection first (linear), so only the
  // kept ones are sorted.
  k = std::min(k, candidates_.size());
  if (k < candidates_.size() / 2) SelectSmallest(k);
  RadixSort<16>(&candidates_, &scratch_, KeyDigit);
  candidates_.resize(k);
}

bool DynamicShard::TakeQueued(int64_t need) {
  // Every row that orders before the queue's last entry is a live queue entry or (LFU, SCORE) in
  // the side list (shard.h), so taking them in order gives the first victims of the whole
  // shard while they last. Under TTL the first live entry that is too recent ends the victims:
  // every later row is at least as recent.
  const uint32_t now = NowRel();
  const bool ttl = config_.eviction == Eviction::kTtl;
  // The side list's rows still before the bound: those this forward saw stay noted for later
  // forwards; the others are this forward's candidates, in order, once.
  std::vector<Candidate> side;
  std::vector<int32_t> seen_now;
  SplitSide(now, &side, &seen_now);
  std::sort(side.begin(), side.end(), KeyLess);
  side.erase(std::unique(side.begin(), side.end(), kSameSlot), side.end());
  const size_t first = victims_.size();
  size_t i = queue_next_, j = 0;
  // Queue entries are checked in order, and their slots are scattered over the records: each
  // record is asked of the cache kQueueAhead entries before it is checked.
  constexpr size_t kQueueAhead = 16;
  auto live = [&](size_t at) {
    if (at + kQueueAhead < queue_.size()) PrefetchSlot(queue_[at + kQueueAhead].slot);
    const Candidate& q = queue_[at];
    const Candidate c = KeyOf(q.slot);
    if (c.hi != q.hi || c.lo != q.lo) return false;
    if (records_[static_cast<size_t>(q.slot)].seen != now) return true;
    seen_now.push_back(q.slot);  // SCORE (only there is a key kept by a touch): later forwards
    return false;
  };
  for (size_t a = i; a < std::min(queue_.size(), i + kQueueAhead); ++a)
    PrefetchSlot(queue_[a].slot);
  bool ended = false;  // TTL: no row left old enough
  while (static_cast<int64_t>(victims_.size() - first) < need) {
    while (i < queue_.size() && !live(i)) ++i;
    const bool from_queue = i < queue_.size();
    if (!from_queue && j == side.size()) break;
    // Equal keys are one row, both live in the queue and noted (SCORE: scored back to the value
    // it was queued with): taken once.
    const bool take_queue = from_queue && (j == side.size() || !KeyLess(side[j], queue_[i]));
    const int32_t slot = take_queue ? queue_[i].slot : side[j].slot;
    if (ttl && TooRecent(slot, now)) {
      ended = true;
      break;
    }
    victims_.push_back(slot);
    if (take_queue) {
      if (j < side.size() && side[j].slot == slot) ++j;
      ++i;
    } else {
      ++j;
    }
  }
  // A queue built in this forward holds every candidate: running out of it means no row is left.
  if (static_cast<int64_t>(victims_.size() - first) == need || ended ||
      (queue_complete_ && queue_forward_ == now_)) {
    queue_next_ = i;
    side_ = std::move(seen_now);
    for (size_t k = j; k < side.size(); ++k) side_.push_back(side[k].slot);
    return true;
  }
  victims_.resize(first);
  return false;
}

void DynamicShard::FoldSide() {
  // Live entries not yet consumed, and noted rows before the bound (their current keys); a row in
  // both has the same key in both, so the sort puts them side by side. Rows this forward saw stay
  // noted instead, as after a scan: the new bound is then a row seen before this forward, so a row
  // this forward sees later with the bound's LFU count orders after it (a later last-seen).
  const uint32_t now = NowRel();
  std::vector<Candidate> live, noted, folded;
  std::vector<int32_t> seen_now;
  for (size_t i = queue_next_; i < queue_.size(); ++i) {  // in key order already
    const Candidate c = KeyOf(queue_[i].slot);
    if (c.hi != queue_[i].hi || c.lo != queue_[i].lo) continue;
    if (records_[static_cast<size_t>(c.slot)].seen == now)
      seen_now.push_back(c.slot);
    else
      live.push_back(c);
  }
  SplitSide(now, &noted, &seen_now);
  // Nothing left to serve, or more rows this forward saw than the queue holds (they would fill
  // the side list again at once): dropped, the next eviction scans.
  if ((live.empty() && noted.empty()) || seen_now.size() > queue_target_) {
    ClearQueue();
    return;
  }
  RadixSort<16>(&noted, &scratch_, KeyDigit);
  folded.resize(live.size() + noted.size());
  std::merge(live.begin(), live.end(), noted.begin(), noted.end(), folded.begin(), KeyLess);
  folded.erase(std::unique(folded.begin(), folded.end(), kSameSlot), folded.end());
  if (folded.size() > queue_target_) {
    folded.resize(queue_target_);
    queue_complete_ = false;
  }
  queue_ = std::move(folded);
  queue_next_ = 0;
  side_ = std::move(seen_now);
  side_limit_ = SideLimit() + side_.size();
  if (config_.eviction == Eviction::kLfu)
    lfu_bound_count_ = static_cast<uint32_t>(queue_.back().hi >> 32);
}

void DynamicShard::SplitSide(uint32_t now, std::vector<Candidate>* before,
                             std::vector<int32_t>* seen_now) const {
  for (const int32_t slot : side_) {
    const Candidate c = KeyOf(slot);
    if (!BeforeBound(c)) continue;
    if (records_[static_cast<size_t>(slot)].seen == now)
      seen_now->push_back(slot);
    else
      before->push_back(c);
  }
}

size_t DynamicShard::SideLimit() const {
  return side_limit_set_ > 0 ? side_limit_set_ : std::max(kMinSideLimit, 2 * queue_target_);
}

void DynamicShard::BuildQueue(int64_t need) {
  const size_t n = candidates_.size();
  const size_t k = std::max(static_cast<size_t>(need) * kQueueForwards,
                            static_cast<size_t>(used_) / kQueueShardFraction);
  KeepSmallest(k);
  queue_.assign(candidates_.begin(), candidates_.end());
  queue_next_ = 0;
  queue_complete_ = candidates_.size() == n;
  queue_forward_ = now_;
  side_.clear();
  lfu_bound_count_ = 0;
  const bool lfu = config_.eviction == Eviction::kLfu;
  if ((lfu || config_.eviction == Eviction::kScore) && !queue_.empty()) {
    // From now on a row may order before the last entry when seen (LFU: its count stays below the
    // last entry's; its last-seen forward is later, so an equal count orders after), created or
    // scored (SCORE). The rows this forward already saw are noted here; later ones note
    // themselves.
    if (lfu) lfu_bound_count_ = static_cast<uint32_t>(queue_.back().hi >> 32);
    queue_target_ = queue_.size();
    side_limit_ = SideLimit();
    const uint32_t now = NowRel();
    for (int64_t s = 0; s < used_; ++s)
      if (records_[s].seen == now && BeforeBound(KeyOf(static_cast<int32_t>(s))))
        side_.push_back(static_cast<int32_t>(s));
  }
  ReleaseScratch();
}

void DynamicShard::TakeSmallest(size_t need) {
  if (need < candidates_.size()) SelectSmallest(need);
  for (const Candidate& c : candidates_) victims_.push_back(c.slot);
}

void DynamicShard::SelectVictims(int64_t need) {
  if (!TakeQueued(need)) {
    CollectCandidates();
    if (2 * static_cast<size_t>(need) > candidates_.size()) {
      // This forward needs more than half the candidates: what a queue would keep could not serve
      // another forward like it, so the victims are selected (linear) and no queue is kept or
      // sorted (the replayed-batch case of the step bench, every forward).
      ClearQueue();
      if (config_.eviction == Eviction::kTtl) {
        const uint32_t now = NowRel();
        std::erase_if(candidates_, [&](const Candidate& c) { return TooRecent(c.slot, now); });
      }
      TakeSmallest(static_cast<size_t>(need));
      ReleaseScratch();
    } else {
      BuildQueue(need);
      const bool taken = TakeQueued(need);
      SR_CHECK(taken);
    }
  }
  // Which victim a new id gets is the slot order's: any fixed rule would do, and this one needs
  // no ordering of the victims by key (the selections above leave them unordered).
  OrderBySlot();
}

void DynamicShard::OrderBySlot() {
  const size_t n = victims_.size();
  if (n < 256) {
    std::sort(victims_.begin(), victims_.end());
  } else if (n * 64 >= static_cast<size_t>(used_)) {
    // Dense among the rows (a small shard evicting much of itself): one bit per row, read back in
    // order, touches fewer bytes than any sort.
    victim_bits_.assign((static_cast<size_t>(used_) + 63) / 64, 0);
    for (int32_t s : victims_) victim_bits_[static_cast<size_t>(s) >> 6] |= uint64_t{1} << (s & 63);
    size_t k = 0;
    for (size_t w = 0; w < victim_bits_.size(); ++w)
      for (uint64_t b = victim_bits_[w]; b != 0; b &= b - 1)
        victims_[k++] = static_cast<int32_t>(w * 64 + static_cast<size_t>(__builtin_ctzll(b)));
  } else {
    RadixSort<4>(&victims_, &victims_scratch_, [](int32_t s, int d) -> size_t {
      return (static_cast<uint32_t>(s) >> (8 * d)) & 0xff;
    });
  }
}

}  // namespace shardrec::embedding::dynamic
