// The agreement of data-parallel dynamic tables' inserts (dp_agree.h).
#include "impl/embedding/dynamic/dp_agree.h"

#include <algorithm>
#include <bit>
#include <climits>
#include <cstring>
#include <utility>

#include "impl/embedding/dynamic/placement.h"

namespace shardrec::embedding::dynamic {
namespace {

// This rank's ids of table t in rb.dp_rows: one span per pair of t, in Layout::dp_pairs order.
std::vector<IdSpan> LocalSpans(const Layout& l, RoutedBatch& rb, int32_t t) {
  std::vector<IdSpan> spans;
  const auto B = static_cast<size_t>(rb.batch_size);
  for (size_t k = 0; k < l.dp_pairs.size(); ++k) {
    if (l.pairs[l.dp_pairs[k]].table != t) continue;
    const int64_t* off = rb.dp_offsets.data() + rb.dp_offsets_begin[k];
    spans.emplace_back(rb.dp_rows.data() + off[0], static_cast<size_t>(off[B] - off[0]));
  }
  return spans;
}

// The distinct ids of `spans` with their occurrences, ascending, into d->runs, when sending them
// is shorter than every occurrence (2 x distinct < occurrences); false, early, once the distinct
// ids reach half the occurrences or more than 90% of the first 1024 ids are distinct. An
// open-addressing count (at most half full), then a sort of the distinct ids only: cheaper than
// sorting every occurrence, and a batch of mostly distinct ids stops after about half of them.
bool CountDistinct(const std::vector<IdSpan>& spans, size_t occurrences,
                   DynamicTables::DataParallel::Distinct* d) {
  d->runs.clear();
  if (occurrences < 3) return false;
  size_t size = 4;
  while (size < occurrences) size *= 2;
  const int shift = 64 - std::countr_zero(size);
  d->table.assign(size, -1);
  // A batch of mostly distinct ids (uniform over a large table) would count half its ids before
  // failing: its first kProbe ids decide it sooner (a batch's distinct share only falls as it
  // grows, so a prefix this distinct rarely hides a shorter whole).
  constexpr size_t kProbe = 1024;
  size_t seen = 0;
  for (const IdSpan& s : spans)
    for (const int64_t id : s) {
      if (++seen == kProbe && 10 * d->runs.size() > 9 * kProbe) return false;
      size_t h = static_cast<size_t>(Mix64(static_cast<uint64_t>(id)) >> shift);
      for (;; h = (h + 1) & (size - 1)) {
        int32_t& e = d->table[h];
        if (e < 0) {
          if (2 * (d->runs.size() + 1) >= occurrences) return false;
          e = static_cast<int32_t>(d->runs.size());
          d->runs.emplace_back(id, 1);
          break;
        }
        if (d->runs[static_cast<size_t>(e)].first == id) {
          ++d->runs[static_cast<size_t>(e)].second;
          break;
        }
      }
    }
  std::sort(d->runs.begin(), d->runs.end());
  return true;
}

}  // namespace

bool HasDataParallelDynamic(const Layout& l) { return !l.dp_dynamic_tables.empty(); }

int64_t DataParallelGatherWords(const Layout& l, const RoutedBatch& rb, DynamicTables& tables) {
  DynamicTables::DataParallel& dp = tables.data_parallel();
  dp.block.clear();
  dp.block_ready = false;
  const std::vector<int32_t>& dyn = l.dp_dynamic_tables;
  if (dyn.empty()) return 0;
  dp.block.assign(2 * dyn.size(), 0);
  for (size_t i = 0; i < dyn.size(); ++i) {
    // LocalSpans only reads here; it takes a mutable batch because the agreement rewrites it.
    const std::vector<IdSpan> spans = LocalSpans(l, const_cast<RoutedBatch&>(rb), dyn[i]);
    size_t occurrences = 0;
    for (const IdSpan& s : spans) occurrences += s.size();
    if (CountDistinct(spans, occurrences, &dp.distinct)) {
      const std::vector<std::pair<int64_t, int64_t>>& runs = dp.distinct.runs;
      dp.block[2 * i] = -static_cast<int64_t>(runs.size());
      for (const auto& run : runs) dp.block.push_back(run.first);
      for (const auto& run : runs) dp.block.push_back(run.second);
    } else {
      dp.block[2 * i] = static_cast<int64_t>(occurrences);
      for (const IdSpan& s : spans) dp.block.insert(dp.block.end(), s.begin(), s.end());
    }
    const auto found = dp.pending_scores.find(dyn[i]);
    if (found == dp.pending_scores.end()) continue;
    dp.block[2 * i + 1] = static_cast<int64_t>(found->second.size());
    for (const auto& [id, score] : found->second) {
      dp.block.push_back(id);
      dp.block.push_back(std::bit_cast<int64_t>(score));
    }
  }
  dp.block_ready = true;
  return static_cast<int64_t>(dp.block.size());
}

Status AgreeDataParallelGroup(comm::Communicator& dp, const Status& agreed, bool training,
                              int64_t words, std::vector<int64_t>* all_words) {
  const auto n = static_cast<size_t>(dp.Size());
  const int64_t mine[3] = {agreed.ok() ? 0 : 1, training ? 1 : 0, words};
  std::vector<int64_t> all(3 * n);
  const std::vector<size_t> threes(n, 3);
  SR_RETURN_IF_ERROR(dp.AllGatherV(mine, 3, all.data(), threes, DType::kInt64));
  if (!agreed.ok()) return agreed;
  bool trains = false, evaluates = false;
  for (size_t r = 0; r < n; ++r) {
    if (all[3 * r] != 0)
      return Status::InvalidArgument("rank ", r,
                                     " of the data-parallel group refused this forward (its error "
                                     "says why); no rank changed any state");
    (all[3 * r + 1] != 0 ? trains : evaluates) = true;
  }
  if (trains && evaluates)
    return Status::InvalidUsage(
        "the ranks of the data-parallel group differ in training mode for this forward "
        "(shardrec_embedding_set_training must be the same on every rank); no rank changed any "
        "state");
  all_words->clear();
  if (training)
    for (size_t r = 0; r < n; ++r) all_words->push_back(all[3 * r + 2]);
  return Status::Ok();
}

Status AgreeDataParallelInserts(comm::Communicator& comm, const std::vector<int64_t>& words,
                                const Layout& l, RoutedBatch& rb, DynamicTables& tables,
                                ParamStore& params, uint64_t seed) {
  const std::vector<int32_t>& dyn = l.dp_dynamic_tables;
  if (dyn.empty()) return Status::Ok();
  DynamicTables::DataParallel& dp = tables.data_parallel();
  if (!dp.block_ready) DataParallelGatherWords(l, rb, tables);
  dp.block_ready = false;
  const std::vector<int64_t>& mine = dp.block;
  const int n = comm.Size();
  const auto me = static_cast<size_t>(comm.Rank());
  if (words.size() != static_cast<size_t>(n) || words[me] != static_cast<int64_t>(mine.size()))
    return Status::Internal("data-parallel dynamic agreement: this rank's ", mine.size(),
                            " words were counted differently");
  const size_t T = dyn.size();
  std::vector<size_t> counts(words.begin(), words.end());
  std::vector<size_t> begin(static_cast<size_t>(n) + 1, 0);
  for (int r = 0; r < n; ++r) {
    if (words[r] < static_cast<int64_t>(2 * T))
      return Status::Internal("data-parallel dynamic agreement: rank ", r, " sent ", words[r],
                              " words for ", T, " tables");
    begin[r + 1] = begin[r] + counts[r];
  }
  std::vector<int64_t> all(begin[static_cast<size_t>(n)]);
  SR_RETURN_IF_ERROR(comm.AllGatherV(mine.data(), mine.size(), all.data(), counts, DType::kInt64));
  // Each rank's block must add up: a header beyond its block is a corrupt exchange, refused
  // before any table changes.
  for (int r = 0; r < n; ++r) {
    int64_t sum = static_cast<int64_t>(2 * T);
    for (size_t i = 0; i < T; ++i) {
      const int64_t ids = all[begin[r] + 2 * i], scores = all[begin[r] + 2 * i + 1];
      if (ids == INT64_MIN || scores < 0 || scores > words[r] || ids > words[r] || -ids > words[r])
        return Status::Internal("data-parallel dynamic agreement: rank ", r,
                                "'s header is corrupt");
      sum += (ids < 0 ? -2 * ids : ids) + 2 * scores;
    }
    if (sum != words[r])
      return Status::Internal("data-parallel dynamic agreement: rank ", r,
                              "'s block does not add up");
  }
  std::vector<size_t> cursor(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) cursor[r] = begin[r] + 2 * T;
  // Per table and rank: where its ids (and counts) and its scores lie in `all`.
  struct Part {
    int64_t ids = 0;
    size_t at = 0;
    int64_t scores = 0;
    size_t scores_at = 0;
  };
  std::vector<std::vector<Part>> parts(T, std::vector<Part>(static_cast<size_t>(n)));
  for (int r = 0; r < n; ++r)
    for (size_t i = 0; i < T; ++i) {
      Part& p = parts[i][r];
      p.ids = all[begin[r] + 2 * i];
      p.scores = all[begin[r] + 2 * i + 1];
      p.at = cursor[r];
      p.scores_at = p.at + static_cast<size_t>(p.ids < 0 ? -2 * p.ids : p.ids);
      cursor[r] = p.scores_at + 2 * static_cast<size_t>(p.scores);
      if (p.ids >= 0) continue;
      for (int64_t k = 0; k < -p.ids; ++k)
        if (all[p.at + static_cast<size_t>(-p.ids + k)] < 1)
          return Status::Internal("data-parallel dynamic agreement: rank ", r,
                                  " sent an id counted ",
                                  all[p.at + static_cast<size_t>(-p.ids + k)], " times");
    }
  dp.pending_scores.clear();  // sent: every copy now sets them
  std::vector<int64_t> score_ids;
  std::vector<double> score_values;
  for (size_t i = 0; i < T; ++i) {
    const int32_t t = dyn[i];
    const int32_t li = l.tables[t].shard_local[static_cast<size_t>(l.rank)];
    DynamicShard* shard = tables.Shard(li);
    SR_CHECK(shard != nullptr);
    const LocalShard& ls = l.local[li];
    for (int r = 0; r < n; ++r) {
      const Part& p = parts[i][r];
      if (p.scores == 0) continue;
      score_ids.clear();
      score_values.clear();
      for (int64_t k = 0; k < p.scores; ++k) {
        score_ids.push_back(all[p.scores_at + 2 * static_cast<size_t>(k)]);
        score_values.push_back(
            std::bit_cast<double>(all[p.scores_at + 2 * static_cast<size_t>(k) + 1]));
      }
      shard->SetScores(score_ids, score_values);
    }
    // Other ranks' distinct ids are translated once each with their counts (as many occurrences
    // decide); this rank's own ids are translated where they lie, so they become its slots
    // without a copy back.
    std::vector<IdSpan> spans;
    std::vector<CountSpan> counts;
    for (int r = 0; r < n; ++r) {
      const Part& p = parts[i][r];
      if (static_cast<size_t>(r) == me) {
        const std::vector<IdSpan> own = LocalSpans(l, rb, t);
        spans.insert(spans.end(), own.begin(), own.end());
        counts.resize(spans.size());
      } else if (p.ids >= 0) {
        spans.emplace_back(all.data() + p.at, static_cast<size_t>(p.ids));
        counts.emplace_back();
      } else {
        const auto distinct = static_cast<size_t>(-p.ids);
        spans.emplace_back(all.data() + p.at, distinct);
        counts.emplace_back(all.data() + p.at + distinct, distinct);
      }
    }
    params.ClearRow(ls, shard->slots());  // the zero row, which the last backward trained
    shard->Translate(spans, counts,
                     [&](std::span<const int32_t> slots, std::span<const int64_t> ids) {
                       params.InitRowsForIds(ls, slots, ids, seed);
                     });
  }
  return Status::Ok();
}

void LookupDataParallel(const Layout& l, RoutedBatch& rb, DynamicTables& tables,
                        ParamStore& params) {
  for (int32_t t : l.dp_dynamic_tables) {
    const int32_t li = l.tables[t].shard_local[static_cast<size_t>(l.rank)];
    DynamicShard* shard = tables.Shard(li);
    SR_CHECK(shard != nullptr);
    params.ClearRow(l.local[li], shard->slots());
    const std::vector<IdSpan> spans = LocalSpans(l, rb, t);
    shard->Lookup(spans);
  }
}

}  // namespace shardrec::embedding::dynamic
