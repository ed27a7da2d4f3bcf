// The parts of a step both engines share (engine.h): the routing's verdict, the host-buffer id
// exchange, the return buffers' sizes and the data-parallel tables' end of a backward.
#include "impl/embedding/engine.h"

#include <new>
#include <string>

#include "impl/embedding/output_dist.h"
#include "impl/embedding/timer.h"

namespace shardrec::embedding {

Status Engine::Route(const Batch& batch, const Status& rejected, RoutedBatch* rb) {
  if (!rejected.ok()) return rejected;
  try {
    return RouteLocal(batch, rb);
  } catch (const StatusError& e) {
    return e.status();
  } catch (const std::bad_alloc&) {
    return Status::OutOfMemory("routing the batch: out of host memory");
  } catch (const std::exception& e) {
    return Status::Internal("routing the batch: ", e.what());
  }
}

Status Engine::DistributeInput(const Batch& batch, const Status& rejected, RoutedBatch* rb,
                               const InputTerms& terms) {
  Status local = Route(batch, rejected, rb);
  if (local.ok() && terms.check) local = terms.check(rb->batch_size, rb->num_values);
  return ExchangeAndUnpack(local, rb, terms);
}

Status Engine::ExchangeAndUnpack(const Status& local, RoutedBatch* rb, const InputTerms& terms) {
  Status s;
  rb->device_input = false;
  {
    ScopedTimer t(&s_.timings.comm_seconds);
    const int64_t words = local.ok() && terms.mode == ForwardMode::kTraining && terms.words
                              ? terms.words(*rb)
                              : int64_t{0};
    s = ExchangeInput(s_.layout, *s_.input_comm, local, rb, terms.mode, words);
  }
  return s.ok() ? UnpackInput(s_.layout, rb) : s;
}

size_t Engine::SizeReturn(const RoutedBatch& rb) {
  // Backward writes the gradient message into these (PackGradients), so they keep their sizes.
  s_.ret_send.resize(rb.ret_floats_total);
  size_t recv_total = 0;
  for (size_t v : ReturnRecvCounts(rb)) recv_total += v;
  s_.ret_recv.resize(recv_total);
  return recv_total;
}

Status Engine::ApplyDataParallelTables(const RoutedBatch& rb, const float* grad, int64_t step,
                                       RowApplier* rows) {
  // The data-parallel all-reduce is this step's only collective: its comm time is all embedding
  // communication.
  const double before = s_.timings.comm_seconds;
  SR_RETURN_IF_ERROR(
      s_.updater.ApplyDataParallel(s_.exec, *s_.dp_comm, s_.options.backward_encoding, rb, grad,
                                   s_.table_optim, step, &s_.timings.comm_seconds, rows));
  s_.timings.embedding_comm_seconds += s_.timings.comm_seconds - before;
  ++s_.timings.backwards;
  return Status::Ok();
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
