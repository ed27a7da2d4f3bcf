// Tiered rows' resolution (row_resolver.h).
#include "impl/embedding/tiered/row_resolver.h"

#include "impl/embedding/tiered/tables.h"

namespace shardrec::embedding::tiered {

Status TieredRows::Resolve(RoutedBatch& rb, const std::vector<int64_t>& dp_words) {
  SR_RETURN_IF_ERROR(inner_->Resolve(rb, dp_words));
  // The last forwarded batch, until its backward consumed it, may still be trained: its slots
  // (its rows are slots already) must keep their rows.
  const RoutedBatch* in_flight =
      s_.current != nullptr && !s_.current_consumed ? s_.current.get() : nullptr;
  return s_.tiered->Resolve(rb, in_flight, s_.training);
}

void TieredRows::Prefetch(const RoutedBatch& rb) { s_.tiered->Prefetch(rb); }

}  // namespace shardrec::embedding::tiered
