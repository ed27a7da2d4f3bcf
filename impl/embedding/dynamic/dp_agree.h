// The agreement of a data-parallel dynamic table's inserts (docs/dynamic-tables.md, "Data-parallel
// tables"): every rank holds the whole table and sees only its part of the batch, so before a
// training forward translates, the ranks gather every rank's ids of these tables and each runs
// the same translation over all of them; the copies then make the same decisions and stay equal.
#pragma once

#include <cstdint>
#include <vector>

#include "impl/comm/communicator.h"
#include "impl/core/status.h"
#include "impl/embedding/dynamic/tables.h"
#include "impl/embedding/input_dist.h"
#include "impl/embedding/layout.h"
#include "impl/embedding/param_store.h"

namespace shardrec::embedding::dynamic {

// Whether `l` has a data-parallel dynamic table.
bool HasDataParallelDynamic(const Layout& l);

// How many int64 words this rank contributes to the gather of a training forward (0 when the
// layout has no data-parallel dynamic table). Builds the block the gather sends into
// tables.data_parallel(): per such table (in table order) a header {ids, scores}, then per table
// its ids and its pending scores. `ids` >= 0: that many ids follow, every occurrence (in
// Layout::dp_pairs order); `ids` < 0: -ids distinct ids follow, ascending, then their occurrence
// counts (chosen when shorter: 2 x distinct < occurrences, unless more than 90% of the first
// 1024 ids are distinct). `scores`: that many (id, score bits)
// pairs follow, the entries set_scores recorded on this rank since the last training forward.
int64_t DataParallelGatherWords(const Layout& l, const RoutedBatch& rb, DynamicTables& tables);

// Where the data-parallel group is not the collection's communicator (a 2D mesh, whose
// data-parallel tables reduce over the world), the forward's outcome must be agreed over that
// group as well: a rank of another sharding group may have refused the forward, or evaluate. One
// all-gather over `dp` of (refused, training, gather size) per rank; `agreed` is this rank's
// outcome of its own collection's agreement. Fails on every rank of `dp` when any rank refused or
// the modes differ (returning `agreed` itself where it failed); otherwise *words gets every rank's
// DataParallelGatherWords (`words` this rank's), empty for an evaluation forward.
Status AgreeDataParallelGroup(comm::Communicator& dp, const Status& agreed, bool training,
                              int64_t words, std::vector<int64_t>* all_words);

// A training forward's agreement over `comm` (the data-parallel group, every rank of which calls
// this with the same layout): `words[r]` is rank r's DataParallelGatherWords, agreed before (by
// the collection's forward agreement or AgreeDataParallelGroup). One all-gather brings every
// rank's block (DataParallelGatherWords). Per table, every rank's pending scores are set first,
// in rank order and each rank's call order (a later entry for an id wins; ids without a row are
// ignored), so this forward's evictions already see them; then the shard translates every rank's
// ids (distinct ids once each with their counts; the zero row cleared first, new rows
// initialised from (seed, table, id, column)), which gives every copy the same slots, admission
// counts and evictions (the translation depends on the multiset of ids alone), and this rank's
// ids in rb.dp_rows become their slots. A failed gather changes no table and keeps the pending
// scores.
Status AgreeDataParallelInserts(comm::Communicator& comm, const std::vector<int64_t>& words,
                                const Layout& l, RoutedBatch& rb, DynamicTables& tables,
                                ParamStore& params, uint64_t seed);

// An evaluation forward: this rank's ids of the data-parallel dynamic tables become their slots
// or the zero row (DynamicShard::Lookup); nothing is gathered and no table changes.
void LookupDataParallel(const Layout& l, RoutedBatch& rb, DynamicTables& tables,
                        ParamStore& params);

}  // namespace shardrec::embedding::dynamic
