// The row-resolver stage of a forward (docs/embedding-engine.md): between the input exchange and
// the lookups it turns the ids a rank received into row slots of its parameter store, so the
// lookup, backward and optimizer kernels see slots only. Fixed tables' ids are their rows (the
// routing applied the bounds policy and made them shard-relative); dynamic tables translate raw
// ids, admitting, inserting and evicting rows (dynamic/row_resolver.h). Tiered tables' rows are
// faulted into a DRAM cache over a disk store and become cache slots (tiered/row_resolver.h).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "impl/core/status.h"
#include "impl/embedding/input_dist.h"
#include "impl/embedding/step_state.h"

namespace shardrec::embedding {

class RowResolver {
 public:
  virtual ~RowResolver() = default;
  // Resolves `rb`'s ids in place, after every rank agreed on the forward (StepAgreement::
  // BeforeRows); `dp_words` is what that agreement gave a training forward (every rank's
  // data-parallel gather size), else empty. Collective where the rows of data-parallel copies
  // must agree (every rank calls it for the same forward). Not OK: no table changed.
  virtual Status Resolve(RoutedBatch& rb, const std::vector<int64_t>& dp_words) = 0;
  // Called on the input distribution's worker once a started batch's ids arrived (unpacked),
  // while the collection's thread may still train the batch before it: a resolver that reads
  // rows from slow storage starts reading this batch's rows here, on threads of its own; the
  // batch's Resolve waits for them. `rb` is not changed and not kept. Nothing by default.
  virtual void Prefetch(const RoutedBatch& /*rb*/) {}
};

// The resolver of `s`'s plan: fixed rows, or dynamic rows where the plan has a dynamic table;
// behind the tiered rows' resolver when `s->tiered` holds tiered shards.
std::unique_ptr<RowResolver> MakeRowResolver(StepState* s);

}  // namespace shardrec::embedding
