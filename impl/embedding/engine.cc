// The parts of a step both engines share (engine.h): the routing's verdict and the input
// distribution of a batch routed by RouteLocal (the device engine's host path), and the words of
// a non-finite gradient.
#include "impl/embedding/engine.h"

#include <string>

namespace shardrec::embedding {

Status Engine::Route(const Batch& batch, const Status& rejected, RoutedBatch* rb) {
  if (!rejected.ok()) return rejected;
  return Guarded([&] { return RouteLocal(batch, rb); });
}

Status Engine::DistributeInput(const Batch& batch, const Status& rejected, RoutedBatch* rb,
                               const InputTerms& terms) {
  Status local = Route(batch, rejected, rb);
  if (local.ok() && terms.check_output)
    local = CheckOutputBuffer(s_.layout, terms.output, rb->batch_size, rb->num_values);
  return ExchangeAndUnpack(local, rb, terms);
}

Status GradNotFinite(const Layout& layout, size_t i, float value) {
  const auto D = static_cast<size_t>(layout.output_dim);
  const int64_t col = static_cast<int64_t>(i % D);
  std::string where;
  if (!layout.sequence) {
    for (const Pair& p : layout.pairs) {
      const auto& t = layout.plan->tables[p.table];
      if (col < p.out_offset || col >= p.out_offset + t.dim) continue;
      where =
          StrCat(", feature '", layout.plan->features[p.feature].name, "' of table '", t.name, "'");
      break;
    }
  }
  return Status::InvalidArgument("grad: element ", i, " (", layout.sequence ? "row " : "sample ",
                                 i / D, ", column ", col, where, ") is ", value,
                                 ", which is not finite");
}

}  // namespace shardrec::embedding
