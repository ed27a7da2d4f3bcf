// Tiered rows as a row-resolver stage (row_resolver.h, docs/disk-tier.md): after the plan's own
// resolver (fixed or dynamic rows) it makes the rows of the tiered shards resident in their
// caches and turns them into slots (TieredTables::Resolve), pinning the slots of the batch a
// backward may still train; with the pipelined input distribution it prefetches the next batch's
// misses as soon as its ids arrived.
#pragma once

#include <memory>

#include "impl/embedding/row_resolver.h"

namespace shardrec::embedding::tiered {

class TieredRows final : public RowResolver {
 public:
  // `s->tiered` must be open and not empty; `inner` resolves first.
  TieredRows(StepState* s, std::unique_ptr<RowResolver> inner) : s_(*s), inner_(std::move(inner)) {}
  Status Resolve(RoutedBatch& rb, const std::vector<int64_t>& dp_words) override;
  void Prefetch(const RoutedBatch& rb) override;

 private:
  StepState& s_;
  std::unique_ptr<RowResolver> inner_;
};

}  // namespace shardrec::embedding::tiered
