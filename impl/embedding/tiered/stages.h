// The row-resolver stages of a collection with tiered tables (row_resolver.h, docs/disk-tier.md).
// The plan's own resolver (fixed or dynamic rows) resolves first; then
//   - tiered dynamic tables (dynamic_tier.h): the rows the translation created and the zero row
//     are written where their slots live (TieredDynamicRows, right after the translation);
//   - the tier makes the rows resident and turns them into cache slots (TieredRows);
//   - tiered dynamic tables: each cache slot's rounding is keyed by its id (TieredDynamicKeys);
//   - every rank agrees on the outcome (TieredVerdict, resolve_verdict.h): a forward that fails
//     on one rank fails on every rank at once, naming it. A training forward of tiered dynamic
//     tables first agrees that every cache holds its batch (DynamicTier::CheckFits), before any
//     id is translated, so that refusal changes no table on any rank.
#pragma once

#include <memory>

#include "impl/embedding/row_resolver.h"

namespace shardrec::embedding::tiered {

// `rows` behind the stages above where any rank of `s->comm` holds a tiered table, else `rows`
// itself. Collective at creation (every rank calls it once, after the creation's agreement): the
// ranks' tiers may differ, and the verdicts must be taken by every rank or none, so one all-reduce
// says whether any rank holds a tiered table and whether any holds a tiered dynamic one.
std::unique_ptr<RowResolver> WrapTiered(StepState* s, std::unique_ptr<RowResolver> rows);

}  // namespace shardrec::embedding::tiered
