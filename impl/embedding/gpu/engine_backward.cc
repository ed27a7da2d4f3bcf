// The device engine's backward (engine.h): the verdict agreed on the host, on the device
// in its own phase, or on the device as the gate of the update phase; the gradient exchange
// staged or between device buffers; and what a stream-ordered call leaves to learn (Settle).
#include "impl/embedding/gpu/engine.h"
#include "impl/embedding/output_dist.h"
#include "impl/embedding/timer.h"

namespace shardrec::embedding {

bool DeviceEngine::TakesDeviceGradient() const {
  if (device_ == nullptr) return false;
  // Data-parallel gradients accumulated on the host (a 16-bit or host data-parallel group) need
  // it there; a message over a host communicator leaves from host memory.
  if (!s_.layout.dp_pairs.empty() && !device_dp_) return false;
  return s_.layout.world == 1 ||
         (device_comm_ != nullptr && s_.options.backward_encoding == comm::Encoding::kFp32);
}

Status DeviceEngine::Settle(SettlePoint point) {
  switch (point) {
    case SettlePoint::kBeforeInput:
      return device_input_ ? Status::Ok() : Wait();
    case SettlePoint::kAfterInput:
      return device_input_ ? Wait() : Status::Ok();
    case SettlePoint::kBeforeBackward:
      // The last stream-ordered backward's verdict decides which batch and step this one takes:
      // learnt first (one wait; every rank learns the same and returns here alike on a
      // rejection).
      return pending_verdict_.pending ? Wait() : Status::Ok();
    case SettlePoint::kWait:
      break;
  }
  return Wait();
}

Status DeviceEngine::AgreeOnDevice(const Status& local) {
  int64_t agreed = 0;
  Status s;
  {
    ScopedTimer t(&s_.timings.comm_seconds);
    comm::Communicator* c = s_.layout.world > 1 ? device_comm_.get() : nullptr;
    s = device_->Verdict(c, local.ok() ? 0 : s_.comm->Rank() + 1, &agreed);
  }
  if (!local.ok()) return local;
  SR_RETURN_IF_ERROR(s);
  if (agreed != 0)
    return Status::InvalidArgument("rank ", agreed - 1,
                                   " rejected its backward call (its error says why); no rank "
                                   "changed any state");
  return Status::Ok();
}

Status DeviceEngine::Backward(const float* grad, size_t grad_len, const Status& local,
                              const DeviceGradient* device_grad) {
  const bool device_verdict =
      device_grad != nullptr || (device_comm_ != nullptr && s_.layout.world > 1);
  // Gated on the device when the gradient message also travels between device blocks (or not at
  // all): a 16-bit wire keeps the staged exchange below.
  if (device_verdict &&
      (s_.layout.world == 1 || s_.options.backward_encoding == comm::Encoding::kFp32))
    return BackwardGated(grad, local, device_grad);
  // A device gradient is taken only where the gate is (TakesDeviceGradient): from here on the
  // gradient is host memory.
  if (device_grad != nullptr)
    return Status::Internal("a device gradient outside the gated backward");
  if (device_verdict) {
    // Over a device communicator (with a 16-bit wire) the verdicts are agreed between device
    // buffers, so every rank issues the same collective.
    SR_RETURN_IF_ERROR(AgreeOnDevice(local));
  } else {
    ScopedTimer t(&s_.timings.comm_seconds);
    SR_RETURN_IF_ERROR(agreement_.Backward(local));
  }
  const RoutedBatch& rb = *s_.current;
  s_.current_consumed = true;
  const int64_t step = s_.params.step() + 1;
  s_.params.set_step(step);
  // Data-parallel tables trained on the device (dp.h) ride in the sharded tables' phase.
  const DeviceDpWork dpw = DataParallelWork(grad, grad_len);
  const DeviceDpWork* dp = device_dp_ ? &dpw : nullptr;
  // The gradient travels the forward's return route backwards: the sample side packs into the
  // buffer it received into, the owners receive into the buffer they looked up into; the rows of
  // this rank's own samples are written straight to where its shards read them (SelfRows).
  PackGradients(s_.exec, s_.layout, rb, grad, s_.ret_recv.data(), s_.SelfRows(rb));
  DeviceStep::ShardedInputs in;
  in.grads = s_.ret_send.data();
  in.dp = dp;
  if (device_comm_ != nullptr && s_.layout.world > 1 &&
      s_.options.backward_encoding == comm::Encoding::kFp32) {
    // Over NCCL the message travels into the device block the backward kernels read.
    const DeviceExchange x{device_comm_.get(), ReturnRecvCounts(rb), ReturnSendCounts(rb)};
    in.x = &x;
    in.packed = s_.ret_recv.data();
    SR_RETURN_IF_ERROR(device_->ApplySharded(*s_.comm, s_.updater, rb, s_.table_optim, step,
                                             &s_.timings.comm_seconds, in));
    return FinishBackward(rb, grad, step);
  }
  {
    ScopedTimer t(&s_.timings.comm_seconds);
    ScopedTimer e(&s_.timings.embedding_comm_seconds);
    SR_RETURN_IF_ERROR(comm::EncodedAllToAllV(*s_.comm, s_.options.backward_encoding,
                                              s_.ret_recv.data(), ReturnRecvCounts(rb),
                                              s_.ret_send.data(), ReturnSendCounts(rb), &s_.wire));
  }
  SR_RETURN_IF_ERROR(device_->ApplySharded(*s_.comm, s_.updater, rb, s_.table_optim, step,
                                           &s_.timings.comm_seconds, in));
  return FinishBackward(rb, grad, step);
}

Status DeviceEngine::FinishBackward(const RoutedBatch& rb, const float* grad, int64_t step) {
  if (!device_dp_) return ApplyDataParallelTables(rb, grad, step, device_.get());
  ++s_.timings.backwards;
  return Status::Ok();
}

DeviceDpWork DeviceEngine::DataParallelWork(const float* host_grad, size_t floats) const {
  DeviceDpWork w;
  w.comm = dp_device_comm_.get();
  w.comm_size = s_.dp_comm->Size();
  w.host_grad = host_grad;
  w.host_grad_floats = floats;
  return w;
}

Status DeviceEngine::BackwardGated(const float* grad, const Status& local,
                                   const DeviceGradient* device_grad) {
  // Every rank takes part in the step's collectives with its batch. Without one (no forward since
  // the last backward) no rank has one, as forwards and backwards succeed or fail on every rank
  // together (a rank that refused its output keeps its batch: Finish), so every rank stops here.
  if (s_.current == nullptr || s_.current_consumed) return local;
  const RoutedBatch& rb = *s_.current;
  const Layout& layout = s_.layout;
  const size_t rows = static_cast<size_t>(layout.sequence ? rb.num_values : rb.batch_size);
  const size_t need = rows * static_cast<size_t>(layout.output_dim);
  const bool on_device = device_grad != nullptr && TakesDeviceGradient();
  // A rank that rejected its call packs and accumulates a gradient whose values do not matter:
  // the agreed verdict shuts every update.
  const float* g = grad;
  if (!local.ok() && on_device) {
    SR_RETURN_IF_ERROR(device_->JunkGradient(need, &g));
  } else if (!local.ok()) {
    junk_grad_.assign(need, 0.0f);
    g = junk_grad_.data();
  }
  const int64_t step = s_.params.step() + 1;
  DeviceVerdictWork v;
  v.comm = layout.world > 1 ? device_comm_.get() : nullptr;
  v.local_flag = local.ok() ? 0 : s_.comm->Rank() + 1;
  v.grad = on_device ? g : nullptr;
  v.n = on_device ? need : 0;
  v.check = on_device && local.ok() && s_.options.check_non_finite;
  v.rank = s_.comm->Rank();
  v.caller = on_device ? device_grad->stream : nullptr;
  const DeviceDpWork dpw = on_device ? DataParallelWork(nullptr, 0) : DataParallelWork(g, need);
  const DeviceExchange x{device_comm_.get(), ReturnRecvCounts(rb), ReturnSendCounts(rb)};
  DeviceStep::ShardedInputs in;
  in.verdict = &v;
  in.dp = device_dp_ ? &dpw : nullptr;
  in.x = layout.world > 1 ? &x : nullptr;
  if (on_device) {
    // Checked, packed and exchanged on the device.
    in.grad_dev = g;
    in.grad_on_device = true;
  } else {
    // Packed on the host (the sample side into the buffer it received into, this rank's own rows
    // where its shards read them); over NCCL the message travels between device blocks.
    PackGradients(s_.exec, layout, rb, g, s_.ret_recv.data(), s_.SelfRows(rb));
    in.grads = s_.ret_send.data();
    in.packed = s_.ret_recv.data();
  }
  // A CUDA gradient view is stream-ordered: the call returns with the update phase queued.
  in.async = on_device;
  const Status s = device_->ApplySharded(*s_.comm, s_.updater, rb, s_.table_optim, step,
                                         &s_.timings.comm_seconds, in);
  if (in.async && s.ok()) {
    // Counted now, taken back at the next synchronisation if any rank rejected it (Settle). A
    // rank's own rejection is reported there too, as its peers learn of it, so every rank's next
    // synchronising call fails alike.
    pending_verdict_ = PendingVerdict{true, step, s_.timings.forwards, local};
    s_.current_consumed = true;
    s_.params.set_step(step);
    ++s_.timings.backwards;
    return Status::Ok();
  }
  // A rank's own rejection says more than a failure of the step it took part in.
  if (!local.ok()) return local;
  SR_RETURN_IF_ERROR(s);
  int64_t agreed = 0, first_bad = -1;
  float bad_value = 0.0f;
  device_->ReadVerdict(&agreed, &first_bad, &bad_value);
  if (first_bad >= 0) return GradNotFinite(layout, static_cast<size_t>(first_bad), bad_value);
  if (agreed != 0)
    return Status::InvalidArgument("rank ", agreed - 1,
                                   " rejected its backward call (its error says why); no rank "
                                   "changed any state");
  s_.current_consumed = true;
  s_.params.set_step(step);
  ++s_.timings.backwards;
  return Status::Ok();
}

Status DeviceEngine::Wait() {
  if (device_ == nullptr) return Status::Ok();
  const Status waited = device_->Synchronize();
  const Status deferred = device_->TakeDeferredError();
  Status verdict;
  if (pending_verdict_.pending && device_->VerdictArrived()) {
    const PendingVerdict p = pending_verdict_;
    pending_verdict_ = PendingVerdict{};
    int64_t agreed = 0, first_bad = -1;
    float bad_value = 0.0f;
    device_->ReadVerdict(&agreed, &first_bad, &bad_value);
    if (!p.local.ok()) {
      verdict = p.local;
    } else if (first_bad >= 0) {
      verdict = GradNotFinite(s_.layout, static_cast<size_t>(first_bad), bad_value);
    } else if (agreed != 0) {
      verdict = Status::InvalidArgument("rank ", agreed - 1,
                                        " rejected its last backward call (its error says why); "
                                        "no rank changed any state");
    }
    if (!verdict.ok()) {
      // Its updates were gated off: the step does not count, and its batch may be trained again
      // while it is still the last one forwarded.
      s_.params.set_step(p.step - 1);
      --s_.timings.backwards;
      if (s_.timings.forwards == p.forwards) s_.current_consumed = false;
    }
  }
  // A failed wait says most; then the verdict (every rank learns the same); then an internal
  // error found on this rank's device.
  if (!waited.ok()) return waited;
  if (!verdict.ok()) return verdict;
  return deferred;
}

}  // namespace shardrec::embedding
