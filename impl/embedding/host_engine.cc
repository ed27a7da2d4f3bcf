// The host engine's step (host_engine.h): routing on the host, lookups whose travelling rows are
// exchanged behind the lookup of this rank's own, the combine, and the backward's exchange and
// updates.
#include "impl/embedding/host_engine.h"

#include <algorithm>

#include "impl/embedding/output_dist.h"
#include "impl/embedding/timer.h"

namespace shardrec::embedding {

Status HostEngine::Init(const comm::Communicator& /*comm*/) {
  return Status::Ok();  // no device capability to offer (offer_ stays 1)
}

Status HostEngine::HostComm(std::shared_ptr<comm::Communicator>* /*comm*/, bool /*local_ok*/) {
  return Status::Ok();
}

Status HostEngine::Connect(const int64_t* /*agreed*/,
                           const std::shared_ptr<comm::Communicator>& given) {
  SR_RETURN_IF_ERROR(s_.comm->Split(0, s_.comm->Rank(), &s_.input_comm));
  if (s_.input_comm == nullptr) return Status::Internal("input communicator split failed");
  s_.dp_comm = given ? given : s_.comm;
  traits_ = EngineTraits{};
  return reduce_.Init(s_.layout, *s_.comm);
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
    if (enc == comm::Encoding::kFp32 && reduce_.active())
      return reduce_.Forward(*s_.comm, rb, s_.ret_send.data(), s_.ret_recv.data());
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
    SR_RETURN_IF_ERROR(agreement_.Backward(local));
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
    if (benc == comm::Encoding::kFp32 && reduce_.active())
      SR_RETURN_IF_ERROR(reduce_.Backward(*s_.comm, rb, s_.ret_recv.data(), s_.ret_send.data()));
    else
      SR_RETURN_IF_ERROR(comm::EncodedAllToAllV(*s_.comm, benc, s_.ret_recv.data(),
                                                ReturnRecvCounts(rb), s_.ret_send.data(),
                                                ReturnSendCounts(rb), &s_.wire));
  }
  SR_RETURN_IF_ERROR(s_.updater.ApplySharded(s_.exec, *s_.comm, rb, s_.ret_send.data(),
                                             s_.table_optim, step, &s_.timings.comm_seconds));
  return ApplyDataParallelTables(rb, grad, step, nullptr);
}

}  // namespace shardrec::embedding
