// The host engine's step (host_engine.h): routing on the host, and each later stage in one call
// to its file: the lookups, return exchange and combine (output_dist.h), the backward's
// agreement, then its exchange and updates (backward.h).
#include "impl/embedding/host_engine.h"

#include "impl/embedding/backward.h"
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

Status HostEngine::DistributeInput(const Batch& batch, const Status& rejected, RoutedBatch* rb,
                                   const InputTerms& terms) {
  // The batch's checks, its routing and its output buffer's verdict in one call to the routing
  // (input_route.cc), then the exchange and unpack (input_exchange.cc).
  Status local = rejected;
  if (local.ok()) {
    const RouteOptions route{s_.options.bounds, s_.options.check_non_finite};
    const OutputBuffer* output = terms.check_output ? &terms.output : nullptr;
    local = Guarded([&] { return RouteBatch(s_.exec, s_.layout, route, batch, rb, output); });
  }
  return ExchangeAndUnpack(local, rb, terms);
}

Status HostEngine::LookupAndCombine(RoutedBatch& rb, float* out, const Status& local,
                                    const DeviceOutput* /*device_out*/) {
  return LookupReturnAndCombine(s_, rb, out, local, &reduce_);
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
  return ExchangeAndApplyGradients(s_, rb, grad, step, &reduce_);
}

}  // namespace shardrec::embedding
