// White-box checks of a dynamic shard's internals that the C API cannot reach quickly: the slot
// index against a std::unordered_map under random inserts and erases (long probe runs and
// wrap-around included), its walks ending on an inconsistent index, the new ids' sort against
// std::sort, the 32-bit last-seen forwards near and past their rebase, and the eviction victims
// (which slot each new id takes; outputs alone would not show it), over one forward and over
// hundreds against a plain reference, counted ids (a data-parallel copy's) against the same ids
// one occurrence at a time, and delta tracking across a Restore and a RestoreMerged.
#include "impl/embedding/dynamic/shard.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "impl/embedding/dynamic/radix_sort.h"
#include "impl/embedding/dynamic/slot_index.h"

namespace shardrec::embedding::dynamic {
namespace {

using Eviction = sharding::DynamicConfig::Eviction;

// Random inserts, erases and lookups (hits and misses) on a full-ish index, against a map; one
// key at a time (Find) and, every 500 steps, a batch longer than FindAll's look-ahead (whose probes
// rest on guesses made from the buckets ahead), at both of its distances.
TEST(DynamicSlotIndex, MatchesMapUnderChurn) {
  for (int64_t slots : {1, 2, 7, 16, 100, 5000}) {
    std::mt19937_64 rng(static_cast<uint64_t>(slots));
    SlotIndex index;
    index.Reset(slots);
    std::vector<int64_t> ids(static_cast<size_t>(slots), 0);
    std::vector<int32_t> free_slots;
    for (int64_t s = slots - 1; s >= 0; --s) free_slots.push_back(static_cast<int32_t>(s));
    std::unordered_map<int64_t, int32_t> ref;
    // Keys from a small range so that misses of recently erased ids are common.
    auto key = [&] { return static_cast<int64_t>(rng() % static_cast<uint64_t>(3 * slots + 5)); };
    for (int step = 0; step < 20000; ++step) {
      const int64_t x = key();
      auto it = ref.find(x);
      ASSERT_EQ(index.Find(x, ids.data()), it == ref.end() ? SlotIndex::kNone : it->second)
          << "slots " << slots << " step " << step;
      if (step % 500 == 0) {
        std::vector<int64_t> batch(200);
        for (int64_t& k : batch) k = key();
        auto check = [&](size_t i, int32_t got) {
          const auto want = ref.find(batch[i]);
          ASSERT_EQ(got, want == ref.end() ? SlotIndex::kNone : want->second)
              << "slots " << slots << " step " << step << " batch key " << i;
        };
        index.FindAll(batch, ids.data(), 1, check);
        // The distances of an index beyond the cache, which these small ones never reach.
        index.FindAllAhead<SlotIndex::kFarBucketAhead, SlotIndex::kFarRecordAhead>(
            batch, ids.data(), 1, check);
      }
      if (it == ref.end() && !free_slots.empty() && rng() % 3 != 0) {
        const int32_t s = free_slots.back();
        free_slots.pop_back();
        ids[s] = x;
        index.Insert(x, s);
        ref.emplace(x, s);
      } else if (it != ref.end() && rng() % 2 == 0) {
        index.Erase(x, ids.data());
        free_slots.push_back(it->second);
        ref.erase(it);
      }
    }
    for (const auto& [x, s] : ref) ASSERT_EQ(index.Find(x, ids.data()), s);
  }
}

// Runs `body` in a forked child that an alarm kills after 10 s: a walk that never ends fails the
// test instead of hanging it. Returns the child's exit code, or -signal when it was killed.
int RunWithAlarm(int (*body)()) {
  const pid_t pid = fork();
  if (pid == 0) {
    alarm(10);
    std::_Exit(body());
  }
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) != pid) return -1000;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
}

// What a corrupt checkpoint once restored: one id in 8 slots of a 64-slot index. Evicting those
// slots last first, each erase of the id takes the first entry still naming it, so the entries of
// the slots not yet evicted go first and an erase then finds none. It used to walk the buckets
// forever (a forward stuck at 100 % CPU that shardrec_comm_abort could not stop); now it
// throws an internal error and changes nothing. 0: as expected; else which check failed.
int EraseOfAnIdTheIndexLostThrows() {
  SlotIndex index;
  index.Reset(64);
  std::vector<int64_t> ids(64);
  for (int32_t s = 0; s < 64; ++s) {
    ids[s] = s < 8 ? 5 : 1000 + s;
    index.Insert(ids[s], s);
  }
  for (int32_t s = 7; s >= 0; --s) {
    try {
      index.Erase(5, ids.data());
    } catch (const StatusError& e) {
      if (e.status().code() != Code::kInternal) return 2;
      // Nothing changed: the other ids are still found.
      for (int32_t t = 8; t < 64; ++t)
        if (index.Find(ids[t], ids.data()) != t) return 3;
      return 0;
    }
    ids[s] = 2000 + s;
    index.Insert(ids[s], s);
  }
  return 1;  // every erase found an entry
}

// More entries than slots (12 in the one bucket of an 8-slot index): the insert that finds no
// free entry throws an internal error instead of walking forever.
int InsertIntoAFullIndexThrows() {
  SlotIndex index;
  index.Reset(8);
  std::vector<int64_t> ids(13);
  for (int32_t s = 0; s < 13; ++s) {
    ids[s] = 7 * s + 1;
    try {
      index.Insert(ids[s], s);
    } catch (const StatusError& e) {
      return s == 12 && e.status().code() == Code::kInternal ? 0 : 2;
    }
  }
  return 1;
}

TEST(DynamicSlotIndex, EraseOfAnIdItLostFailsInsteadOfSpinning) {
  EXPECT_EQ(RunWithAlarm(EraseOfAnIdTheIndexLostThrows), 0)
      << "a negative value is the signal that killed it (14: the alarm, the walk did not end)";
}

TEST(DynamicSlotIndex, InsertIntoAFullIndexFailsInsteadOfSpinning) {
  EXPECT_EQ(RunWithAlarm(InsertIntoAFullIndexThrows), 0)
      << "a negative value is the signal that killed it (14: the alarm, the walk did not end)";
}

// The new ids' sort (radix_sort.h, SortByKey64) against std::sort: random, sequential,
// crowded (most keys in a narrow range below a few large ones, so one bucket is large), all equal
// and heavily repeated keys, at sizes around its small-input cut-off. Keys must come out in order
// and every element (key, payload) exactly once.
TEST(DynamicRadixSort, SortByKey64MatchesStdSort) {
  struct Item {
    uint64_t key;
    uint32_t payload;
  };
  std::mt19937_64 rng(7);
  std::vector<uint32_t> count;
  for (size_t n : {0, 1, 2, 63, 64, 65, 1000, 5000, 70000}) {
    for (int kind = 0; kind < 5; ++kind) {
      std::vector<Item> v(n), scratch;
      for (size_t i = 0; i < n; ++i) {
        uint64_t k = rng();
        if (kind == 1) k = i * 3;
        if (kind == 2) k = i % 50 == 0 ? rng() : rng() % 100;
        if (kind == 3) k = 42;
        if (kind == 4) k = rng() % 7;
        v[i] = Item{k, static_cast<uint32_t>(i)};
      }
      std::shuffle(v.begin(), v.end(), rng);
      std::vector<Item> want = v;
      auto by_both = [](const Item& a, const Item& b) {
        return std::tie(a.key, a.payload) < std::tie(b.key, b.payload);
      };
      std::sort(want.begin(), want.end(), by_both);
      SortByKey64(&v, &scratch, &count, [](const Item& x) { return x.key; });
      ASSERT_EQ(v.size(), n);
      for (size_t i = 1; i < n; ++i)
        ASSERT_LE(v[i - 1].key, v[i].key) << "n " << n << " kind " << kind << " at " << i;
      std::sort(v.begin(), v.end(), by_both);
      for (size_t i = 0; i < n; ++i)
        ASSERT_TRUE(v[i].key == want[i].key && v[i].payload == want[i].payload)
            << "n " << n << " kind " << kind;
    }
  }
}

// One training forward of `ids` (one span); returns the rows they became.
std::vector<int64_t> Step(DynamicShard* shard, std::vector<int64_t> ids) {
  std::vector<IdSpan> spans{IdSpan(ids)};
  shard->Translate(spans, [](std::span<const int32_t>, std::span<const int64_t>) {});
  return ids;
}

// A shard restored at a forward counter beyond 32 bits keeps exact last-seen forwards and the
// LRU order, and one whose counter crosses the 32-bit range relative to its oldest row rebases
// without changing any value.
TEST(DynamicShardLastSeen, ExactAcrossRebase) {
  sharding::DynamicConfig config;
  config.enabled = true;
  config.eviction = Eviction::kLru;
  DynamicShard shard;
  shard.Reset(config, 3);
  const int64_t f = (int64_t{1} << 33) + 12345;
  // Rows last seen UINT32_MAX - 1, 5 and 0 forwards before `f`.
  shard.Restore(f, std::vector<int64_t>{10, 20, 30},
                std::vector<int64_t>{f - int64_t{UINT32_MAX} + 1, f - 5, f},
                std::vector<uint32_t>{1, 2, 3}, {});
  EXPECT_EQ(shard.LastSeen(), (std::vector<int64_t>{f - int64_t{UINT32_MAX} + 1, f - 5, f}));
  // Forward f + 1 touches 30: still within 32 bits of the oldest row.
  EXPECT_EQ(Step(&shard, {30}), (std::vector<int64_t>{2}));
  // Forward f + 2 needs a rebase (the oldest row is UINT32_MAX + 1 forwards back): the oldest
  // row is clamped to the new base and is still the LRU victim for the new id 40.
  EXPECT_EQ(Step(&shard, {40, 30}), (std::vector<int64_t>{0, 2}));
  EXPECT_EQ(shard.id(0), 40);
  EXPECT_EQ(shard.LastSeen(), (std::vector<int64_t>{f + 2, f - 5, f + 2}));
  EXPECT_EQ(shard.Counts(), (std::vector<uint32_t>{1, 2, 5}));
  // Next victim: 20 (seen at f - 5).
  EXPECT_EQ(Step(&shard, {50}), (std::vector<int64_t>{1}));
  EXPECT_EQ(shard.LastSeen(), (std::vector<int64_t>{f + 2, f + 3, f + 2}));
  EXPECT_EQ(shard.forwards(), f + 3);
}

// Delta tracking across a Restore (a checkpoint load): every id held before it joins the
// tombstones (whatever the export finds with a row again it drops), earlier ones are kept, every
// restored row is dirty and replaced() holds until the next Mark; RestoreMerged (a 2D merge or a
// table import) keeps the tombstones, adds its `gone` and leaves replaced() as it was.
TEST(DynamicShardDelta, RestoreKeepsTheIdsThatLeft) {
  sharding::DynamicConfig config;
  config.enabled = true;
  config.eviction = Eviction::kLru;
  DynamicShard shard;
  shard.Reset(config, 3);
  Step(&shard, {1, 2, 3});
  shard.Mark();
  Step(&shard, {4});  // 1 leaves
  EXPECT_EQ(shard.tombstones(), (std::vector<int64_t>{1}));
  EXPECT_FALSE(shard.replaced());
  shard.Restore(9, std::vector<int64_t>{3, 5}, std::vector<int64_t>{9, 9},
                std::vector<uint32_t>{1, 1}, {});
  EXPECT_EQ(shard.tombstones(), (std::vector<int64_t>{1, 2, 3, 4}));
  EXPECT_TRUE(shard.replaced());
  EXPECT_TRUE(shard.dirty(0) && shard.dirty(1));
  shard.RestoreMerged(9, std::vector<int64_t>{3, 5, 6}, std::vector<int64_t>{9, 9, 9},
                      std::vector<uint32_t>{1, 1, 1}, {}, std::vector<int64_t>{7});
  EXPECT_EQ(shard.tombstones(), (std::vector<int64_t>{1, 2, 3, 4, 7}));
  EXPECT_TRUE(shard.replaced());
  shard.Mark();
  EXPECT_FALSE(shard.replaced());
  EXPECT_TRUE(shard.tombstones().empty());
  shard.RestoreMerged(9, std::vector<int64_t>{3}, std::vector<int64_t>{9}, std::vector<uint32_t>{1},
                      {}, std::vector<int64_t>{5, 6});
  EXPECT_FALSE(shard.replaced());
  EXPECT_EQ(shard.tombstones(), (std::vector<int64_t>{5, 6}));
  // Untracked, a Restore records nothing.
  DynamicShard quiet;
  quiet.Reset(config, 3);
  Step(&quiet, {1});
  quiet.Restore(1, std::vector<int64_t>{2}, std::vector<int64_t>{1}, std::vector<uint32_t>{1}, {});
  EXPECT_TRUE(quiet.tombstones().empty());
  EXPECT_FALSE(quiet.replaced());
}

// The rows that leave are the first in the documented order (LFU: count, then last seen, then id;
// LRU and TTL: last seen, then id), over random metadata with many ties and negative ids, and the
// k-th smallest new id takes the k-th lowest of their slots. 120 new ids of 300 rows take the
// queue's path; 160 and 200 (more than half the rows) are selected without one. Last-seen values
// spread over 12 or 600 forwards; under TTL about half the rows are old enough, fewer than 160.
TEST(DynamicShardVictims, OrderMatchesReferenceSort) {
  for (Eviction policy : {Eviction::kLru, Eviction::kLfu, Eviction::kTtl, Eviction::kScore})
    for (int64_t num_new : {120, 160, 200})
      for (int64_t spread : {12, 600})
        for (uint64_t seed = 1; seed <= 5; ++seed) {
          std::mt19937_64 rng(seed);
          sharding::DynamicConfig config;
          config.enabled = true;
          config.eviction = policy;
          config.ttl_steps = spread == 12 ? 15 : 300;
          const int64_t slots = 300;
          DynamicShard shard;
          shard.Reset(config, slots);
          const int64_t forwards = spread + 8;
          std::vector<int64_t> ids, seen;
          std::vector<uint32_t> counts;
          std::vector<double> scores;
          std::unordered_map<int64_t, bool> used;
          while (static_cast<int64_t>(ids.size()) < slots) {
            const auto x = static_cast<int64_t>(rng() % 2001) - 1000;  // negative ids too
            if (!used.emplace(x, true).second) continue;
            ids.push_back(x);
            seen.push_back(static_cast<int64_t>(rng() % static_cast<uint64_t>(spread)));  // ties
            counts.push_back(static_cast<uint32_t>(rng() % 4));
            scores.push_back(static_cast<double>(static_cast<int64_t>(rng() % 7) - 3) * 0.25);
          }
          shard.Restore(forwards, ids, seen, counts, {});
          shard.RestoreScores(scores);  // ignored unless SCORE
          // The reference: every row may leave (none is seen by the next forward, whose ids are all
          // new), except under TTL the rows seen within ttl_steps of that forward.
          std::vector<int32_t> order;
          for (int32_t s = 0; s < slots; ++s)
            if (policy != Eviction::kTtl || forwards + 1 - seen[s] > config.ttl_steps)
              order.push_back(s);
          std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
            if (policy == Eviction::kScore)
              return std::tie(scores[a], ids[a]) < std::tie(scores[b], ids[b]);
            const uint32_t ca = policy == Eviction::kLfu ? counts[a] : 0;
            const uint32_t cb = policy == Eviction::kLfu ? counts[b] : 0;
            return std::tie(ca, seen[a], ids[a]) < std::tie(cb, seen[b], ids[b]);
          });
          std::vector<int64_t> fresh;
          for (int64_t k = 0; k < num_new; ++k) fresh.push_back(5000 + k);  // ascending, all new
          order.resize(std::min(order.size(), fresh.size()));
          std::sort(order.begin(), order.end());
          const std::vector<int64_t> rows = Step(&shard, fresh);
          for (size_t k = 0; k < fresh.size(); ++k) {
            const int64_t want = k < order.size() ? order[k] : slots;  // no victim left: zero row
            ASSERT_EQ(rows[k], want)
                << "policy " << static_cast<int>(policy) << " seed " << seed << " new ids "
                << num_new << " spread " << spread << " new id " << k;
          }
        }
}

// The documented rule, as plainly as it can be written: per slot (id, last seen, count); known ids
// are touched, the new ones (ascending) take free slots, then the slots (ascending) of the first
// victims of a full sort.
class ReferenceShard {
 public:
  ReferenceShard(const sharding::DynamicConfig& config, int64_t slots)
      : config_(config), slots_(slots) {}
  // The rows `ids` become (slots_ for an id left without one).
  std::vector<int64_t> Step(const std::vector<int64_t>& ids) {
    ++now_;
    std::map<int64_t, uint32_t> fresh;
    for (int64_t x : ids) {
      auto it = slot_of_.find(x);
      if (it == slot_of_.end()) {
        ++fresh[x];
        continue;
      }
      rows_[it->second].seen = now_;
      ++rows_[it->second].count;
    }
    std::vector<int32_t> victims;
    for (int32_t s = 0; s < static_cast<int32_t>(rows_.size()); ++s) {
      const Row& r = rows_[s];
      if (r.seen == now_) continue;
      if (config_.eviction == Eviction::kTtl && now_ - r.seen <= config_.ttl_steps) continue;
      victims.push_back(s);
    }
    const bool lfu = config_.eviction == Eviction::kLfu;
    const bool by_score = config_.eviction == Eviction::kScore;
    std::sort(victims.begin(), victims.end(), [&](int32_t a, int32_t b) {
      const Row &x = rows_[a], &y = rows_[b];
      if (by_score) return std::make_tuple(x.score, x.id) < std::make_tuple(y.score, y.id);
      return std::make_tuple(lfu ? x.count : 0u, x.seen, x.id) <
             std::make_tuple(lfu ? y.count : 0u, y.seen, y.id);
    });
    const int64_t free = slots_ - static_cast<int64_t>(rows_.size());
    const auto need = static_cast<size_t>(std::max<int64_t>(0, std::ssize(fresh) - free));
    victims.resize(std::min(victims.size(), need));
    std::sort(victims.begin(), victims.end());
    size_t v = 0;
    for (const auto& [id, occ] : fresh) {
      int32_t slot;
      if (static_cast<int64_t>(rows_.size()) < slots_) {
        slot = static_cast<int32_t>(rows_.size());
        rows_.push_back({});
      } else if (v < victims.size()) {
        slot = victims[v++];
        slot_of_.erase(rows_[slot].id);
      } else {
        continue;
      }
      rows_[slot] = Row{id, now_, occ, 0.0};
      slot_of_[id] = slot;
    }
    std::vector<int64_t> out;
    for (int64_t x : ids) {
      auto it = slot_of_.find(x);
      out.push_back(it == slot_of_.end() ? slots_ : it->second);
    }
    return out;
  }
  // SCORE: each id with a row takes its score (the last one when repeated).
  void SetScores(const std::vector<int64_t>& ids, const std::vector<double>& scores) {
    for (size_t i = 0; i < ids.size(); ++i) {
      auto it = slot_of_.find(ids[i]);
      if (it != slot_of_.end()) rows_[it->second].score = scores[i];
    }
  }

 private:
  struct Row {
    int64_t id = 0;
    int64_t seen = 0;
    uint32_t count = 0;
    double score = 0.0;
  };
  sharding::DynamicConfig config_;
  int64_t slots_;
  int64_t now_ = 0;
  std::vector<Row> rows_;
  std::map<int64_t, int32_t> slot_of_;
};

// Many forwards on shards large against the victims each needs (so every policy takes victims
// from the queue kept across forwards, and LFU and SCORE from their side lists, rebuilt when they
// run out; scores set after each forward, ties, negatives and -0 among them), with known ids
// touched unevenly and a few new ids each forward: every id's row equals the plain reference's,
// forward after forward. A phase without new ids lets the LFU notes pile up; a phase whose
// forwards need more than half the rows selects without a queue (and under TTL runs out of rows
// old enough); a last phase of only new ids empties the queue repeatedly.
// Run twice: as configured, and with side lists folded into the queue once they hold 16 rows (as
// a caller rescoring many rows, or many LFU notes, fold them: here several times a forward).
void ManyForwards(size_t side_limit) {
  for (Eviction policy : {Eviction::kLru, Eviction::kTtl, Eviction::kLfu, Eviction::kScore}) {
    sharding::DynamicConfig config;
    config.enabled = true;
    config.eviction = policy;
    config.ttl_steps = 5;
    const int64_t slots = 3000;
    DynamicShard shard;
    shard.Reset(config, slots);
    shard.set_side_limit(side_limit);
    ReferenceShard ref(config, slots);
    std::mt19937_64 rng(static_cast<uint64_t>(policy) + 11);
    int64_t next_new = 1;
    for (int forward = 0; forward < 400; ++forward) {
      std::vector<int64_t> ids;
      const bool flood = forward >= 360;                   // only new ids: many victims at once
      const bool quiet = forward >= 200 && forward < 230;  // known ids only: no eviction
      const bool crush = forward >= 330 && forward < 345;  // most rows leave, known ids too
      const int64_t fresh = flood   ? 700
                            : quiet ? 0
                            : crush ? 1500 + static_cast<int64_t>(rng() % 200)
                                    : static_cast<int64_t>(rng() % 40);
      for (int64_t k = 0; k < fresh; ++k) {
        const int64_t id = (next_new++ * 7919) % 1000003 - 500000;  // distinct, negative too
        ids.push_back(id);
        if (rng() % 4 == 0) ids.push_back(id);  // a repeated new id
      }
      if (!flood)
        for (int k = 0; k < 300; ++k) {
          // Known ids, skewed towards the recent ones (some may have left since).
          const int64_t back = static_cast<int64_t>(rng() % 64) * static_cast<int64_t>(rng() % 64);
          if (back >= next_new - 1) continue;
          ids.push_back(((next_new - 1 - back) * 7919) % 1000003 - 500000);
        }
      std::shuffle(ids.begin(), ids.end(), rng);
      const std::vector<int64_t> want = ref.Step(ids);
      const std::vector<int64_t> got = Step(&shard, ids);
      ASSERT_EQ(got, want) << "policy " << static_cast<int>(policy) << " forward " << forward
                           << " side limit " << side_limit;
      if (policy == Eviction::kScore) {
        // Scores for some of this forward's ids and for some earlier ids it did not see (rows
        // queued, or behind the queue, rescored below its last entry, or back to the score they
        // were queued with): ties, negatives and -0 among them.
        std::vector<int64_t> sid;
        std::vector<double> sv;
        auto score = [&](int64_t id, size_t k) {
          sid.push_back(id);
          const auto r = static_cast<int64_t>(rng() % 9) - 4;
          sv.push_back(r == 0 && k % 2 == 0 ? -0.0 : static_cast<double>(r) * 0.5);
        };
        for (size_t k = 0; k < ids.size(); k += 3) score(ids[k], k);
        for (size_t k = 0; k < 20; ++k)
          score(((1 + static_cast<int64_t>(rng() % static_cast<uint64_t>(next_new))) * 7919) %
                        1000003 -
                    500000,
                k);
        shard.SetScores(sid, sv);
        ref.SetScores(sid, sv);
      }
    }
  }
}

TEST(DynamicShardVictims, ManyForwardsMatchTheReference) { ManyForwards(0); }

TEST(DynamicShardVictims, SideListsFoldedIntoTheQueueMatchTheReference) { ManyForwards(16); }

// A data-parallel copy translates other ranks' distinct ids with their counts
// (DynamicShard::Translate with CountSpans): every forward must decide as the same ids given one
// occurrence at a time (slots, last-seen forwards, counts, admission counts, step counts, and so
// the later victims), under each policy, with and without admission, new counted ids included.
TEST(DynamicShardCounts, CountedIdsDecideAsTheirOccurrences) {
  for (Eviction policy : {Eviction::kNone, Eviction::kLru, Eviction::kTtl, Eviction::kLfu})
    for (int32_t threshold : {1, 3}) {
      sharding::DynamicConfig config;
      config.enabled = true;
      config.eviction = policy;
      config.ttl_steps = 2;
      config.admission_threshold = threshold;
      config.admission_decay_steps = threshold > 1 ? 7 : 0;
      const int64_t slots = 60;
      DynamicShard expanded, counted;
      expanded.Reset(config, slots);
      counted.Reset(config, slots);
      std::mt19937_64 rng(static_cast<uint64_t>(policy) * 10 + static_cast<uint64_t>(threshold));
      for (int forward = 0; forward < 300; ++forward) {
        // This rank's ids (one occurrence each) and another rank's (skewed: many repeats).
        std::vector<int64_t> own, other;
        for (int k = 0; k < 40; ++k) own.push_back(static_cast<int64_t>(rng() % 150) - 20);
        for (int k = 0; k < 60; ++k)
          other.push_back(static_cast<int64_t>((rng() % 12) * (rng() % 12)) - 20);
        std::map<int64_t, int64_t> runs;
        for (int64_t id : other) ++runs[id];
        std::vector<int64_t> distinct, counts;
        for (const auto& [id, c] : runs) {
          distinct.push_back(id);
          counts.push_back(c);
        }
        const std::vector<int64_t> distinct_ids = distinct;  // Translate rewrites `distinct`
        std::vector<int64_t> own_a = own, own_b = own, other_a = other;
        const std::vector<IdSpan> spans_a{IdSpan(own_a), IdSpan(other_a)};
        expanded.Translate(spans_a, [](std::span<const int32_t>, std::span<const int64_t>) {});
        const std::vector<IdSpan> spans_b{IdSpan(own_b), IdSpan(distinct)};
        const std::vector<CountSpan> count_spans{CountSpan{}, CountSpan(counts)};
        counted.Translate(spans_b, count_spans,
                          [](std::span<const int32_t>, std::span<const int64_t>) {});
        const std::string where = "policy " + std::to_string(static_cast<int>(policy)) +
                                  " threshold " + std::to_string(threshold) + " forward " +
                                  std::to_string(forward);
        ASSERT_EQ(own_a, own_b) << where;
        for (size_t k = 0; k < other.size(); ++k) {
          const auto at = std::lower_bound(distinct_ids.begin(), distinct_ids.end(), other[k]);
          ASSERT_EQ(other_a[k], distinct[static_cast<size_t>(at - distinct_ids.begin())]) << where;
        }
        ASSERT_EQ(expanded.Ids(), counted.Ids()) << where;
        ASSERT_EQ(expanded.LastSeen(), counted.LastSeen()) << where;
        ASSERT_EQ(expanded.Counts(), counted.Counts()) << where;
        ASSERT_EQ(expanded.sketch(), counted.sketch()) << where;
        const StepCounts a = expanded.last(), b = counted.last();
        ASSERT_TRUE(a.inserted == b.inserted && a.evicted == b.evicted &&
                    a.rejected_admission == b.rejected_admission &&
                    a.rejected_full == b.rejected_full)
            << where;
      }
      // The table filled: rows were replaced, or (without eviction) new ids refused.
      if (policy == Eviction::kNone)
        EXPECT_GT(expanded.total().rejected_full, 0);
      else
        EXPECT_GT(expanded.total().inserted, slots);
    }
}

}  // namespace
}  // namespace shardrec::embedding::dynamic
