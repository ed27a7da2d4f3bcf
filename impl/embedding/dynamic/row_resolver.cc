// Dynamic rows' resolution (row_resolver.h).
#include "impl/embedding/dynamic/row_resolver.h"

#include "impl/embedding/dynamic/dp_agree.h"
#include "impl/embedding/timer.h"

namespace shardrec::embedding::dynamic {

Status DynamicRows::Resolve(RoutedBatch& rb, const std::vector<int64_t>& dp_words) {
  if (!s_.training) {
    s_.dynamic.Lookup(s_.exec, rb, s_.params);
    LookupDataParallel(s_.layout, rb, s_.dynamic, s_.params);
    return Status::Ok();
  }
  // A data-parallel dynamic table's copies agree on the inserts first (dp_agree.h), before any
  // sharded table inserts, so a failed gather changes no table.
  if (HasDataParallelDynamic(s_.layout)) {
    ScopedTimer t(&s_.timings.comm_seconds);
    SR_RETURN_IF_ERROR(AgreeDataParallelInserts(*s_.dp_comm, dp_words, s_.layout, rb, s_.dynamic,
                                                s_.params, s_.options.seed));
  }
  s_.dynamic.Translate(s_.exec, rb, s_.params, s_.options.seed);
  return Status::Ok();
}

}  // namespace shardrec::embedding::dynamic
