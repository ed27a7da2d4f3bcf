// The row-resolver stage of a forward (docs/embedding-engine.md): between the input exchange and
// the lookups it turns the ids a rank received into row slots of its parameter store, so the
// lookup, backward and optimizer kernels see slots only. Fixed tables' ids are their rows (the
// routing applied the bounds policy and made them shard-relative); dynamic tables translate raw
// ids, admitting, inserting and evicting rows (dynamic/row_resolver.h). A disk tier would be a
// third resolver that faults rows in.
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
};

// The resolver of `s`'s plan: fixed rows, or dynamic rows where the plan has a dynamic table.
std::unique_ptr<RowResolver> MakeRowResolver(StepState* s);

}  // namespace shardrec::embedding
