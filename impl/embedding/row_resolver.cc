// The fixed rows' resolver and the choice of a plan's (row_resolver.h).
#include "impl/embedding/row_resolver.h"

#include "impl/embedding/dynamic/row_resolver.h"
#include "impl/embedding/tiered/stages.h"
#include "impl/embedding/tiered/tables.h"

namespace shardrec::embedding {

namespace {

// Fixed tables: the routing already made every id a shard-relative row under the bounds policy,
// which is the slot the kernels read; nothing is left to resolve.
class FixedRows final : public RowResolver {
 public:
  Status Resolve(RoutedBatch& /*rb*/, const std::vector<int64_t>& /*dp_words*/) override {
    return Status::Ok();
  }
};

}  // namespace

std::unique_ptr<RowResolver> MakeRowResolver(StepState* s) {
  std::unique_ptr<RowResolver> rows;
  if (s->layout.has_dynamic) {
    rows = std::make_unique<dynamic::DynamicRows>(s);
  } else {
    rows = std::make_unique<FixedRows>();
  }
  return tiered::WrapTiered(s, std::move(rows));
}

}  // namespace shardrec::embedding
