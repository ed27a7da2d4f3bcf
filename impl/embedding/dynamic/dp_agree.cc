// The agreement of data-parallel dynamic tables' inserts (dp_agree.h).
#include "impl/embedding/dynamic/dp_agree.h"

#include <algorithm>
#include <cstring>

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

std::vector<int32_t> DynamicDpTables(const Layout& l) {
  std::vector<int32_t> out;
  for (int32_t t : l.dp_tables)
    if (l.tables[t].dynamic) out.push_back(t);
  return out;
}

}  // namespace

bool HasDataParallelDynamic(const Layout& l) {
  return std::any_of(l.dp_tables.begin(), l.dp_tables.end(),
                     [&](int32_t t) { return l.tables[t].dynamic; });
}

int64_t DataParallelGatherWords(const Layout& l, const RoutedBatch& rb) {
  int64_t words = 0;
  const auto B = static_cast<size_t>(rb.batch_size);
  for (size_t k = 0; k < l.dp_pairs.size(); ++k) {
    if (!l.tables[l.pairs[l.dp_pairs[k]].table].dynamic) continue;
    const int64_t* off = rb.dp_offsets.data() + rb.dp_offsets_begin[k];
    words += off[B] - off[0];
  }
  for (int32_t t : l.dp_tables) words += l.tables[t].dynamic ? 1 : 0;
  return words;
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
  const std::vector<int32_t> dyn = DynamicDpTables(l);
  if (dyn.empty()) return Status::Ok();
  const int n = comm.Size();
  // This rank's block: each table's id count, then each table's ids.
  std::vector<int64_t> mine;
  std::vector<std::vector<IdSpan>> local(dyn.size());
  for (size_t i = 0; i < dyn.size(); ++i) {
    local[i] = LocalSpans(l, rb, dyn[i]);
    int64_t count = 0;
    for (const IdSpan& s : local[i]) count += static_cast<int64_t>(s.size());
    mine.push_back(count);
  }
  for (const auto& spans : local)
    for (const IdSpan& s : spans) mine.insert(mine.end(), s.begin(), s.end());
  if (words.size() != static_cast<size_t>(n) ||
      words[static_cast<size_t>(comm.Rank())] != static_cast<int64_t>(mine.size()))
    return Status::Internal("data-parallel dynamic agreement: this rank's ", mine.size(),
                            " words were counted differently");
  std::vector<size_t> counts(words.begin(), words.end());
  std::vector<size_t> begin(static_cast<size_t>(n) + 1, 0);
  for (int r = 0; r < n; ++r) {
    if (words[r] < static_cast<int64_t>(dyn.size()))
      return Status::Internal("data-parallel dynamic agreement: rank ", r, " sent ", words[r],
                              " words for ", dyn.size(), " tables");
    begin[r + 1] = begin[r] + counts[r];
  }
  std::vector<int64_t> all(begin[static_cast<size_t>(n)]);
  SR_RETURN_IF_ERROR(comm.AllGatherV(mine.data(), mine.size(), all.data(), counts, DType::kInt64));
  // Each rank's block must add up: a count beyond its block is a corrupt exchange, refused before
  // any table changes.
  for (int r = 0; r < n; ++r) {
    int64_t sum = 0;
    for (size_t i = 0; i < dyn.size(); ++i) {
      const int64_t c = all[begin[r] + i];
      if (c < 0) return Status::Internal("data-parallel dynamic agreement: a negative count");
      sum += c;
    }
    if (sum + static_cast<int64_t>(dyn.size()) != words[r])
      return Status::Internal("data-parallel dynamic agreement: rank ", r,
                              "'s block does not add up");
  }
  std::vector<size_t> cursor(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) cursor[r] = begin[r] + dyn.size();
  for (size_t i = 0; i < dyn.size(); ++i) {
    const int32_t t = dyn[i];
    const int32_t li = l.tables[t].shard_local[static_cast<size_t>(l.rank)];
    DynamicShard* shard = tables.Shard(li);
    SR_CHECK(shard != nullptr);
    const LocalShard& ls = l.local[li];
    std::vector<IdSpan> spans;
    IdSpan own;
    for (int r = 0; r < n; ++r) {
      const auto c = static_cast<size_t>(all[begin[r] + i]);
      spans.emplace_back(all.data() + cursor[r], c);
      if (r == comm.Rank()) own = spans.back();
      cursor[r] += c;
    }
    params.ClearRow(ls, shard->slots());  // the zero row, which the last backward trained
    shard->Translate(spans,
                     [&](int32_t slot, int64_t id) { params.InitRowForId(ls, slot, id, seed); });
    // This rank's ids, now slots, go back where the lookup and the backward read them.
    size_t at = 0;
    for (const IdSpan& s : local[i]) {
      std::memcpy(s.data(), own.data() + at, s.size() * sizeof(int64_t));
      at += s.size();
    }
  }
  return Status::Ok();
}

void LookupDataParallel(const Layout& l, RoutedBatch& rb, DynamicTables& tables,
                        ParamStore& params) {
  for (int32_t t : DynamicDpTables(l)) {
    const int32_t li = l.tables[t].shard_local[static_cast<size_t>(l.rank)];
    DynamicShard* shard = tables.Shard(li);
    SR_CHECK(shard != nullptr);
    params.ClearRow(l.local[li], shard->slots());
    const std::vector<IdSpan> spans = LocalSpans(l, rb, t);
    shard->Lookup(spans);
  }
}

}  // namespace shardrec::embedding::dynamic
