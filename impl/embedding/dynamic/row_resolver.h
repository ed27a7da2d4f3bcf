// Dynamic rows as a row-resolver stage (row_resolver.h, docs/dynamic-tables.md): a training
// forward agrees the data-parallel copies' inserts, then translates raw ids to slots (admission,
// insertion, eviction); an evaluation forward only looks rows up (unknown ids read the zero row).
#pragma once

#include "impl/embedding/row_resolver.h"

namespace shardrec::embedding::dynamic {

class DynamicRows final : public RowResolver {
 public:
  explicit DynamicRows(StepState* s) : s_(*s) {}
  Status Resolve(RoutedBatch& rb, const std::vector<int64_t>& dp_words) override;

 private:
  StepState& s_;
};

}  // namespace shardrec::embedding::dynamic
