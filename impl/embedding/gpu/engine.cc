// The device engine's creation and forward (engine.h): the device paths every rank agrees
// on, the staged host-buffer communicators, routing and the input distribution, and the lookups
// with the combine on the device or the host.
#include "impl/embedding/gpu/engine.h"

#include <new>

#include "impl/comm/staged_comm.h"
#include "impl/core/cuda_plugin.h"
#include "impl/embedding/gpu/dispatch.h"
#include "impl/embedding/gpu/input.h"
#include "impl/embedding/output_dist.h"
#include "impl/embedding/timer.h"

namespace shardrec::embedding {

Status DeviceEngine::Available() const { return core::CheckDevice(s_.options.device); }

Status DeviceEngine::Init(const comm::Communicator& comm) {
  const CollectionOptions& o = s_.options;
  // Whether this rank's communicator and encodings allow the device input distribution
  // (input.h); every rank must, or none uses it (the agreement). The same for
  // data-parallel tables trained on the device (dp.h), which also depend on the group.
  can_device_input_ = !comm.device().is_host() && s_.layout.plan->world_size > 1 &&
                      o.forward_encoding == comm::Encoding::kFp32 &&
                      o.backward_encoding == comm::Encoding::kFp32;
  device_ = std::make_unique<DeviceStep>();
  Status local =
      device_->Init(&s_.layout, &s_.params, o.device.index, o.capacity, can_device_input_);
  // Data-parallel gradients stay on the device when their group needs no collective or
  // all-reduces them between device buffers of this device (fp32: a 16-bit wire keeps the host's
  // encoded all-reduce).
  const comm::Communicator& group = o.dp_comm ? *o.dp_comm : comm;
  can_device_dp_ =
      local.ok() && !s_.layout.dp_tables.empty() &&
      (group.Size() == 1 || (group.device().is_cuda() && group.device().index == o.device.index &&
                             o.backward_encoding == comm::Encoding::kFp32));
  if (can_device_dp_) local = device_->InitDataParallel(o.capacity);
  offer_[0] = can_device_input_ ? 0 : 1;
  offer_[1] = can_device_dp_ ? 0 : 1;
  return local;
}

Status DeviceEngine::HostComm(std::shared_ptr<comm::Communicator>* comm, bool local_ok) {
  if ((*comm)->device().is_host()) return Status::Ok();
  // A device (NCCL) communicator: the host-buffer collectives go through a staging wrapper on
  // the step's stream; the payloads that stay on the device use the communicator itself.
  std::unique_ptr<comm::StagedComm> staged;
  SR_RETURN_IF_ERROR(comm::StagedComm::Create(*comm, (*comm)->device().index,
                                              device_ != nullptr ? device_->stream() : nullptr,
                                              /*own_stream=*/false, &staged));
  // The data-parallel gradients' all-reduce goes through it with the plan's one size (unless
  // they stay on the device): allocated here, not in a step.
  if (local_ok && !s_.layout.dp_tables.empty() && !can_device_dp_)
    SR_RETURN_IF_ERROR(staged->Reserve(sizeof(float) * s_.layout.dp_grad_size));
  device_comm_ = *comm;
  *comm = std::move(staged);
  return Status::Ok();
}

Status DeviceEngine::Connect(const int64_t* agreed,
                             const std::shared_ptr<comm::Communicator>& given) {
  comm::Communicator& comm = *s_.comm;
  if (device_comm_ == nullptr) {
    SR_RETURN_IF_ERROR(comm.Split(0, comm.Rank(), &s_.input_comm));
  } else {
    // The input exchange runs on the communication worker's thread: its own stream.
    std::unique_ptr<comm::Communicator> child;
    SR_RETURN_IF_ERROR(device_comm_->Split(0, comm.Rank(), &child));
    if (child == nullptr) return Status::Internal("input communicator split failed");
    std::unique_ptr<comm::StagedComm> staged;
    SR_RETURN_IF_ERROR(comm::StagedComm::Create(std::move(child), s_.options.device.index, nullptr,
                                                /*own_stream=*/true, &staged));
    s_.input_comm = std::move(staged);
  }
  if (s_.input_comm == nullptr) return Status::Internal("input communicator split failed");
  // What every rank allows.
  device_input_ = can_device_input_ && agreed[0] == 0;
  device_dp_ = can_device_dp_ && agreed[1] == 0;
  if (device_input_) route_tables_ = BuildRouteTables(s_.layout);
  s_.dp_comm = given ? given : s_.comm;
  if (!s_.dp_comm->device().is_host()) {
    std::unique_ptr<comm::StagedComm> staged;
    SR_RETURN_IF_ERROR(comm::StagedComm::Create(s_.dp_comm, s_.options.device.index,
                                                device_->stream(),
                                                /*own_stream=*/false, &staged));
    // The data-parallel gradients' all-reduce has one size (the plan's): allocated here.
    if (!s_.layout.dp_tables.empty() && !device_dp_)
      SR_RETURN_IF_ERROR(staged->Reserve(sizeof(float) * s_.layout.dp_grad_size));
    s_.dp_comm = std::move(staged);
  }
  if (device_dp_ && s_.dp_comm->Size() > 1) dp_device_comm_ = given ? given : device_comm_;
  traits_.writes_device_output = WritesDeviceOutput();
  traits_.takes_device_gradient = TakesDeviceGradient();
  traits_.exchanges_input_inline = device_comm_ != nullptr;
  traits_.agrees_outputs_first = device_comm_ == nullptr;
  return Status::Ok();
}

Status DeviceEngine::RouteLocal(const Batch& batch, RoutedBatch* rb) {
  const RouteOptions route{s_.options.bounds, s_.options.check_non_finite};
  if (device_ != nullptr && batch.device.is_cuda()) {
    if (batch.device.index != s_.options.device.index)
      return Status::InvalidArgument("the batch is on ", batch.device.ToString(),
                                     " but the collection on ", s_.options.device.ToString());
    if (route_device_ == nullptr) {
      route_tables_ = BuildRouteTables(s_.layout);
      route_device_ =
          std::make_unique<DeviceRouteBackend>(s_.options.device.index, device_->stream());
    }
    SR_RETURN_IF_ERROR(AfterCallersStream(batch));
    return RouteWith(s_.layout, route_tables_, route, batch, *route_device_, rb);
  }
  return RouteBatch(s_.exec, s_.layout, route, batch, rb);
}

namespace dk = kernels::device;

Status DeviceEngine::AfterCallersStream(const Batch& batch) {
  // The caller may have written the batch on its own stream just before the call: the route reads
  // it on the step's stream, behind that work (an event wait, no host wait).
  if (batch.stream == device_->stream()) return Status::Ok();
  return dk::StreamWaitStream(s_.options.device.index, device_->stream(), batch.stream);
}

Status DeviceEngine::DistributeInput(const Batch& batch, const Status& rejected, RoutedBatch* rb,
                                     const InputTerms& terms) {
  if (!device_input_) return Engine::DistributeInput(batch, rejected, rb, terms);
  // A batch slot the last forwarded batch, whose backward still reads its ids, does not use.
  rb->device_slot = s_.current != nullptr && s_.current->device_slot == 0 ? 1 : 0;
  rb->send_on_device = false;
  // A device batch is routed on the device, so its output buffer is judged first, by the
  // batch's own sizes.
  const bool on_device = batch.device.is_cuda() && batch.device.index == s_.options.device.index;
  Status verdict = rejected;
  if (verdict.ok() && on_device && terms.check_output)
    verdict = CheckOutputBuffer(s_.layout, terms.output, batch.batch_size,
                                static_cast<int64_t>(batch.num_values));
  if (verdict.ok() && on_device) return RouteAndGatherOnDevice(batch, rb);
  // Routed on the host (or rejected): the summary goes up with the exchange.
  Status local = Route(batch, verdict, rb);
  if (local.ok() && terms.check_output && !on_device)
    local = CheckOutputBuffer(s_.layout, terms.output, rb->batch_size, rb->num_values);
  HostRouteSummary(route_tables_, local, *rb, &summary_);
  const size_t per = RouteSummaryBytes(route_tables_);
  gathered_.resize(per * static_cast<size_t>(s_.layout.world));
  Status s;
  {
    ScopedTimer t(&s_.timings.comm_seconds);
    s = device_->GatherSummaries(*device_comm_, summary_.data(), sizeof(SummaryHeader), nullptr,
                                 summary_.data() + sizeof(SummaryHeader),
                                 per - sizeof(SummaryHeader), gathered_.data());
  }
  // A rank's own rejection says more than the exchange's failure.
  if (!s.ok()) return local.ok() ? s : local;
  const RouteOptions route{s_.options.bounds, s_.options.check_non_finite};
  s = ReadRouteSummaries(s_.layout, route_tables_, route, local, gathered_, rb);
  return s.ok() ? UnpackCounts(s_.layout, rb) : s;
}

Status DeviceEngine::RouteAndGatherOnDevice(const Batch& batch, RoutedBatch* rb) {
  const Layout& layout = s_.layout;
  const RouteOptions route{s_.options.bounds, s_.options.check_non_finite};
  if (route_device_ == nullptr)
    route_device_ =
        std::make_unique<DeviceRouteBackend>(s_.options.device.index, device_->stream());
  RouteCounted counted;
  Status local = AfterCallersStream(batch);
  try {
    if (local.ok())
      local = RouteCountOnly(layout, route_tables_, route, batch, *route_device_, &counted);
  } catch (const StatusError& e) {
    local = e.status();
  } catch (const std::bad_alloc&) {
    local = Status::OutOfMemory("routing the batch: out of host memory");
  }
  // The route's read-back goes straight from its workspace into the exchange: the route's
  // sizing and every rank's counts come down together, with one wait.
  const SummaryHeader h{local.ok() ? 0 : 1, batch.batch_size,
                        static_cast<int64_t>(batch.num_values), batch.weights != nullptr ? 1 : 0};
  const size_t body = RouteReadbackBytes(route_tables_);
  const size_t per = sizeof(h) + body;
  summary_.assign(body, 0);
  gathered_.resize(per * static_cast<size_t>(layout.world));
  Status s;
  {
    ScopedTimer t(&s_.timings.comm_seconds);
    s = device_->GatherSummaries(*device_comm_, &h, sizeof(h),
                                 local.ok() ? counted.readback : nullptr,
                                 local.ok() ? nullptr : summary_.data(), body, gathered_.data());
  }
  if (!s.ok()) return local.ok() ? s : local;
  RouteFillPlan plan;
  if (local.ok())
    local =
        RouteSize(layout, route_tables_, route, batch,
                  gathered_.data() + static_cast<size_t>(layout.rank) * per + sizeof(h), rb, &plan);
  SR_RETURN_IF_ERROR(ReadRouteSummaries(layout, route_tables_, route, local, gathered_, rb));
  SR_RETURN_IF_ERROR(UnpackCounts(layout, rb));
  // The messages are written straight into the batch's slot block, where they leave from.
  SR_RETURN_IF_ERROR(device_->ReserveDeviceInput(*rb));
  SR_RETURN_IF_ERROR(
      RouteFill(layout, batch, *route_device_, counted, plan, device_->SlotSend(*rb), rb));
  rb->send_on_device = true;
  return Status::Ok();
}

bool DeviceEngine::CombinesOnDevice() const {
  // The returned rows are on the device at world 1 and over NCCL (fp32 messages).
  if (device_ == nullptr) return false;
  return s_.layout.world == 1 ||
         (device_comm_ != nullptr && s_.options.forward_encoding == comm::Encoding::kFp32);
}

bool DeviceEngine::WritesDeviceOutput() const { return device_ != nullptr && CombinesOnDevice(); }

Status DeviceEngine::LookupAndCombine(RoutedBatch& rb, float* out, const Status& local,
                                      const DeviceOutput* device_out) {
  if (CombinesOnDevice()) {
    Status s;
    CombineOut target{out, device_out != nullptr,
                      device_out != nullptr ? device_out->stream : nullptr};
    // A device output is stream-ordered: the call returns with the phase queued.
    target.async = device_out != nullptr;
    // A rank that refused its output takes part in the same phase (every exchange of it) and
    // drops the output.
    if (!local.ok()) target = CombineOut{nullptr, false, nullptr, /*discard=*/true};
    {
      ScopedTimer phase(&s_.timings.lookup_seconds);
      s = LookupCombineOnDevice(rb, target);
    }
    if (s.ok() && local.ok() && device_out == nullptr) {
      ScopedTimer phase(&s_.timings.output_dist_seconds);
      DivideMeans(s_.exec, s_.layout, rb, out);
    }
    return s;
  }
  Status s = LookupAndReturn(rb);
  if (s.ok() && local.ok()) {
    ScopedTimer phase(&s_.timings.output_dist_seconds);
    s = CombineOutput(s_.exec, s_.layout, s_.params, rb, s_.ret_recv.data(), s_.SelfRows(rb),
                      &s_.jobs, out, device_.get(), WireRows{});
  }
  return s;
}

Status DeviceEngine::LookupCombineOnDevice(RoutedBatch& rb, const CombineOut& out) {
  SizeReturn(rb);
  if (s_.layout.world == 1) return device_->LookupCombine(rb, nullptr, out);
  const DeviceExchange x{device_comm_.get(), ReturnSendCounts(rb), ReturnRecvCounts(rb)};
  return device_->LookupCombine(rb, &x, out);
}

Status DeviceEngine::LookupAndReturn(RoutedBatch& rb) {
  SizeReturn(rb);
  if (device_comm_ != nullptr && s_.layout.world > 1 &&
      s_.options.forward_encoding == comm::Encoding::kFp32) {
    // Over NCCL the message leaves from the device block the lookups wrote (step.h).
    ScopedTimer phase(&s_.timings.lookup_seconds);
    const DeviceExchange x{device_comm_.get(), ReturnSendCounts(rb), ReturnRecvCounts(rb)};
    return device_->LookupExchange(rb, x, s_.ret_recv.data(), s_.ret_send.data());
  }
  {
    ScopedTimer phase(&s_.timings.lookup_seconds);
    SR_RETURN_IF_ERROR(device_->LookupToSend(rb, s_.ret_send.data()));
  }
  // A single rank looks up only its own samples, which never travel (SelfRows).
  if (s_.layout.world == 1) return Status::Ok();
  ScopedTimer phase(&s_.timings.output_dist_seconds);
  ScopedTimer t(&s_.timings.comm_seconds);
  ScopedTimer e(&s_.timings.embedding_comm_seconds);
  return comm::EncodedAllToAllV(*s_.comm, s_.options.forward_encoding, s_.ret_send.data(),
                                ReturnSendCounts(rb), s_.ret_recv.data(), ReturnRecvCounts(rb),
                                &s_.wire);
}

}  // namespace shardrec::embedding
