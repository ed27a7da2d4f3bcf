// The host engine's step (host_engine.h): routing on the host, lookups whose travelling rows are
// exchanged behind the lookup of this rank's own, the combine, and the backward's exchange and
// updates.
#include "impl/embedding/host_engine.h"

#include <algorithm>

#include "impl/embedding/dynamic/dp_agree.h"
#include "impl/embedding/output_dist.h"
#include "impl/embedding/timer.h"

namespace shardrec::embedding {

Status HostEngine::Init(const comm::Communicator& /*comm*/) { return Status::Ok(); }

Status HostEngine::HostComm(std::shared_ptr<comm::Communicator>* /*comm*/, bool /*local_ok*/) {
  return Status::Ok();
}

void HostEngine::AgreementWords(int64_t* words) const {
  for (int i = 0; i < kAgreeWords; ++i) words[i] = 1;  // no device capability
}

Status HostEngine::MakeInputComm(comm::Communicator& comm,
                                 std::unique_ptr<comm::Communicator>* out) {
  return comm.Split(0, comm.Rank(), out);
}

void HostEngine::Adopt(const int64_t* /*agreed*/) {}

Status HostEngine::SetDataParallelComm(const std::shared_ptr<comm::Communicator>& given) {
  s_.dp_comm = given ? given : s_.comm;
  return Status::Ok();
}

Status HostEngine::RouteLocal(const Batch& batch, RoutedBatch* rb) {
  const RouteOptions route{s_.options.bounds, s_.options.check_non_finite};
  return RouteBatch(s_.exec, s_.layout, route, batch, rb);
}

bool HostEngine::WireInKernels(comm::Encoding e) const {
  return s_.layout.world > 1 && e != comm::Encoding::kFp32;
}

Status HostEngine::LookupAndCombine(RoutedBatch& rb, float* out, const Status& local,
                                    const DeviceOutput* /*device_out*/) {
  // A training forward's dynamic tables insert here: after the input exchange, which every rank
  // passed only if no rank rejected the batch. A rank can still refuse its output buffer, which
  // it learns only now (the pipelined forward gets it last), so the ranks agree on that first: a
  // forward refused anywhere inserts nothing. The same agreement carries the training mode, so
  // ranks in different modes (one inserting, one not) fail alike without a collective of their
  // own. An evaluation forward only reads. Whether the agreement runs is the plan's business
  // (a dynamic table anywhere), not this rank's shards: a rank that holds no dynamic shard (a
  // table-wise plan with more ranks than tables) still takes part.
  // A data-parallel dynamic table's copies then agree on the inserts (dynamic/dp_agree.h): each
  // rank's count of ids rides on that all-reduce when the data-parallel group is the collection's
  // (on a mesh, whose data-parallel group is the world, the outcome, mode and counts are agreed
  // over that group as well), and one all-gather brings the ids. It runs before any sharded table
  // inserts, so a failed gather changes no table. A plain forward agreed in its input exchange
  // already (AgreesForwardInInputExchange): that exchange went through only if every rank
  // accepted its output buffer and all announced one mode, and it brought the gather sizes
  // (ForwardWords).
  if (s_.layout.has_dynamic) {
    std::vector<int64_t> dp_words;
    const bool dp_dynamic = dynamic::HasDataParallelDynamic(s_.layout);
    const Status agreed = rb.forward_agreed ? local : AgreeForward(local, rb, &dp_words);
    // (A forward agrees in its input exchange only where the data-parallel group is this one.)
    if (rb.forward_agreed && s_.training && dp_dynamic) dp_words = rb.forward_words;
    if (dp_dynamic && s_.dp_comm.get() != s_.comm.get()) {
      ScopedTimer t(&s_.timings.comm_seconds);
      const int64_t words = agreed.ok() && s_.training
                                ? dynamic::DataParallelGatherWords(s_.layout, rb, s_.dynamic)
                                : 0;
      SR_RETURN_IF_ERROR(
          dynamic::AgreeDataParallelGroup(*s_.dp_comm, agreed, s_.training, words, &dp_words));
    }
    SR_RETURN_IF_ERROR(agreed);
    if (s_.training) {
      if (dp_dynamic) {
        ScopedTimer t(&s_.timings.comm_seconds);
        SR_RETURN_IF_ERROR(dynamic::AgreeDataParallelInserts(
            *s_.dp_comm, dp_words, s_.layout, rb, s_.dynamic, s_.params, s_.options.seed));
      }
      s_.dynamic.Translate(s_.exec, rb, s_.params, s_.options.seed);
    } else {
      s_.dynamic.Lookup(s_.exec, rb, s_.params);
      dynamic::LookupDataParallel(s_.layout, rb, s_.dynamic, s_.params);
    }
  }
  Status s = LookupAndReturn(rb);
  if (s.ok() && local.ok()) {
    ScopedTimer phase(&s_.timings.output_dist_seconds);
    WireRows wire;
    if (WireInKernels(s_.options.forward_encoding)) {
      wire.data = s_.wire.recv.data();
      wire.add = comm::DecodeAdderFor(s_.options.forward_encoding);
    }
    s = CombineOutput(s_.exec, s_.layout, s_.params, rb, s_.ret_recv.data(), s_.SelfRows(rb),
                      &s_.jobs, out, nullptr, wire);
  }
  return s;
}

bool HostEngine::AgreesForwardInInputExchange() const {
  return s_.layout.has_dynamic &&
         (s_.dp_comm.get() == s_.comm.get() || !dynamic::HasDataParallelDynamic(s_.layout));
}

bool HostEngine::AgreesForwardBeyondInput() const {
  return dynamic::HasDataParallelDynamic(s_.layout) && s_.dp_comm.get() != s_.comm.get();
}

void HostEngine::JoinForwardAgreement(const Status& refused) {
  // LookupAndCombine's AgreeDataParallelGroup as a refusing rank makes it: no gather words.
  ScopedTimer t(&s_.timings.comm_seconds);
  std::vector<int64_t> words;
  (void)dynamic::AgreeDataParallelGroup(*s_.dp_comm, refused, s_.training, /*words=*/0, &words);
}

bool HostEngine::ChecksOutputInInputExchange() const {
  // With dynamic tables that agree after the exchange (AgreeForward, over a mesh's data-parallel
  // group), a rank refusing its output buffer must reach that agreement: it refuses there.
  return !s_.layout.has_dynamic || AgreesForwardInInputExchange();
}

int64_t HostEngine::ForwardWords(const RoutedBatch& rb) {
  // AgreeForward's carried words (AgreesForwardInInputExchange: the data-parallel group is this
  // communicator); 0 without a data-parallel dynamic table.
  return dynamic::DataParallelGatherWords(s_.layout, rb, s_.dynamic);
}

Status HostEngine::AgreeForward(const Status& local, const RoutedBatch& rb,
                                std::vector<int64_t>* dp_words) {
  // Under kMax: which rank refused (rank + 1, or 0), whether any rank trains, whether any rank
  // evaluates; then, for a training forward with a data-parallel dynamic table whose group is
  // this communicator, each rank's gather size at its own index (the others 0).
  const int n = s_.comm->Size();
  // The length depends on the plan alone, so ranks in different modes still reduce alike.
  const bool carry =
      dynamic::HasDataParallelDynamic(s_.layout) && s_.dp_comm.get() == s_.comm.get();
  std::vector<int64_t> w(carry ? 3 + static_cast<size_t>(n) : 3, 0);
  w[0] = local.ok() ? 0 : s_.comm->Rank() + 1;
  w[1] = s_.training ? 1 : 0;
  w[2] = s_.training ? 0 : 1;
  if (carry && local.ok() && s_.training)
    w[3 + static_cast<size_t>(s_.comm->Rank())] =
        dynamic::DataParallelGatherWords(s_.layout, rb, s_.dynamic);
  SR_RETURN_IF_ERROR(
      s_.comm->AllReduce(w.data(), w.data(), w.size(), DType::kInt64, comm::ReduceOp::kMax));
  if (!local.ok()) return local;
  if (w[0] != 0) return OutputRefused(w[0] - 1);
  if (w[1] != 0 && w[2] != 0) return ModesDiffer();
  if (carry && s_.training) dp_words->assign(w.begin() + 3, w.end());
  return Status::Ok();
}

Status HostEngine::LookupAndReturn(RoutedBatch& rb) {
  const size_t recv_total = SizeReturn(rb);
  const comm::Encoding enc = s_.options.forward_encoding;
  const bool in_kernels = WireInKernels(enc);
  if (in_kernels) {
    // The travelling rows are encoded by the lookups and decoded by the combine (WireRows).
    if (s_.wire.send.size() < rb.ret_self_offset) s_.wire.send.resize(rb.ret_self_offset);
    if (s_.wire.recv.size() < recv_total) s_.wire.recv.resize(recv_total);
  }
  if (s_.layout.world == 1) {
    // A single rank looks up only its own samples, which never travel (SelfRows).
    ScopedTimer phase(&s_.timings.lookup_seconds);
    return LookupToSend(s_.exec, s_.layout, s_.params, rb, &s_.jobs, s_.ret_send.data());
  }
  auto exchange = [this, &rb, in_kernels, enc] {
    if (in_kernels)
      return s_.comm->AllToAllV(s_.wire.send.data(), ReturnSendCounts(rb), s_.wire.recv.data(),
                                ReturnRecvCounts(rb), comm::WireType(enc));
    return comm::EncodedAllToAllV(*s_.comm, enc, s_.ret_send.data(), ReturnSendCounts(rb),
                                  s_.ret_recv.data(), ReturnRecvCounts(rb), &s_.wire);
  };
  // The rows that travel are looked up first and sent by the background worker while this thread
  // looks up the rows of its own samples, which stay here: the exchange (and the wait for the
  // slowest rank) hides behind that lookup.
  WireRows wire;
  if (in_kernels) {
    wire.data = s_.wire.send.data();
    wire.encode = comm::EncoderFor(enc);
  }
  {
    ScopedTimer phase(&s_.timings.lookup_seconds);
    SR_RETURN_IF_ERROR(LookupToSend(s_.exec, s_.layout, s_.params, rb, &s_.jobs, s_.ret_send.data(),
                                    wire, RunSet::kTravelling));
  }
  double worker_seconds = 0;
  std::shared_ptr<comm::Work> sent = s_.worker->Submit([&exchange, &worker_seconds] {
    ScopedTimer t(&worker_seconds);
    return exchange();
  });
  Status own;
  try {
    ScopedTimer phase(&s_.timings.lookup_seconds);
    own = LookupToSend(s_.exec, s_.layout, s_.params, rb, &s_.jobs, s_.ret_send.data(), wire,
                       RunSet::kOwn);
  } catch (...) {
    (void)sent->Wait();  // the worker reads this frame's buffers: it finishes first
    throw;
  }
  Status s;
  double waited = 0;
  {
    ScopedTimer phase(&s_.timings.output_dist_seconds);
    ScopedTimer t(&waited);
    s = sent->Wait();
  }
  // The exchange's time is the worker's (the wait lies within it): collective time is the union
  // of the two, and the output distribution phase only what this thread waited.
  s_.timings.comm_seconds += std::max(worker_seconds, waited);
  s_.timings.embedding_comm_seconds += worker_seconds;
  return own.ok() ? s : own;
}

Status HostEngine::Backward(const float* grad, size_t /*grad_len*/, const Status& local,
                            const DeviceGradient* /*device_grad*/) {
  {
    ScopedTimer t(&s_.timings.comm_seconds);
    SR_RETURN_IF_ERROR(AgreeBackward(local));
  }
  const RoutedBatch& rb = *s_.current;
  s_.current_consumed = true;
  const int64_t step = s_.params.step() + 1;
  s_.params.set_step(step);
  // The gradient travels the forward's return route backwards: the sample side packs into the
  // buffer it received into, the owners receive into the buffer they looked up into; the rows of
  // this rank's own samples are written straight to where its shards read them (SelfRows).
  const comm::Encoding benc = s_.options.backward_encoding;
  if (WireInKernels(benc)) {
    // The other ranks' gradient rows are encoded as they are packed, sent 16-bit, and decoded
    // once into the blocks the kernels read; this rank's own rows stay fp32 (SelfRows).
    size_t send_total = 0;
    for (size_t v : ReturnRecvCounts(rb)) send_total += v;
    if (s_.wire.send.size() < send_total) s_.wire.send.resize(send_total);
    if (s_.wire.recv.size() < rb.ret_self_offset) s_.wire.recv.resize(rb.ret_self_offset);
    PackGradients(s_.exec, s_.layout, rb, grad, s_.ret_recv.data(), s_.SelfRows(rb),
                  WireRows{s_.wire.send.data(), comm::EncoderFor(benc), nullptr});
    {
      ScopedTimer t(&s_.timings.comm_seconds);
      ScopedTimer e(&s_.timings.embedding_comm_seconds);
      SR_RETURN_IF_ERROR(s_.comm->AllToAllV(s_.wire.send.data(), ReturnRecvCounts(rb),
                                            s_.wire.recv.data(), ReturnSendCounts(rb),
                                            comm::WireType(benc)));
    }
    // One decoding pass, not a widening per id in the kernels: each gradient row is read once per
    // id of its bag (~20 times), and widening it each time cost the compute threads ~1.5 ms per
    // step at world 2 where this pass costs ~0.1 ms (RESULTS.md, 2026-11-24 evening).
    const uint16_t* arrived = s_.wire.recv.data();
    float* decoded = s_.ret_send.data();
    s_.exec.ParallelFor(
        0, static_cast<int64_t>(rb.ret_self_offset), int64_t{1} << 16, [&](int64_t b, int64_t e) {
          comm::DecodeFloats(benc, arrived + b, static_cast<size_t>(e - b), decoded + b);
        });
    SR_RETURN_IF_ERROR(s_.updater.ApplySharded(s_.exec, *s_.comm, rb, s_.ret_send.data(),
                                               s_.table_optim, step, &s_.timings.comm_seconds));
    return ApplyDataParallelTables(rb, grad, step, nullptr);
  }
  PackGradients(s_.exec, s_.layout, rb, grad, s_.ret_recv.data(), s_.SelfRows(rb));
  {
    ScopedTimer t(&s_.timings.comm_seconds);
    ScopedTimer e(&s_.timings.embedding_comm_seconds);
    SR_RETURN_IF_ERROR(comm::EncodedAllToAllV(*s_.comm, benc, s_.ret_recv.data(),
                                              ReturnRecvCounts(rb), s_.ret_send.data(),
                                              ReturnSendCounts(rb), &s_.wire));
  }
  SR_RETURN_IF_ERROR(s_.updater.ApplySharded(s_.exec, *s_.comm, rb, s_.ret_send.data(),
                                             s_.table_optim, step, &s_.timings.comm_seconds));
  return ApplyDataParallelTables(rb, grad, step, nullptr);
}

}  // namespace shardrec::embedding
