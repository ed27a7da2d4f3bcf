// The collection's step entries, plain and VBE (vbe.h, docs/variable-batch.md): a VBE batch is
// checked and padded here, runs through the plain pipeline (RunForward & co., collection.cc), and
// its output and gradient are re-laid out around it. Each entry records which VBE shape the
// forward runs with (vbe_source_), so the batch the backward trains keeps its own.
#include <cmath>

#include "impl/core/finite.h"
#include "impl/embedding/collection.h"

namespace shardrec::embedding {

Status EmbeddingCollection::RefuseVbeOnDevice() const {
  return Status::Unsupported(
      "variable batch size per feature (a VBE view) is not supported on GPU collections yet "
      "(docs/variable-batch.md); expand the batch to a plain one, or train on a host collection");
}

Status EmbeddingCollection::Forward(const Batch& batch, float* out, size_t out_len,
                                    const Status& rejected, const DeviceOutput* device_out) {
  vbe_forward_.Clear();
  vbe_source_ = &vbe_forward_;
  return RunForward(batch, out, out_len, rejected, device_out);
}

Status EmbeddingCollection::ForwardVbe(const VbeBatch& batch, float* out, size_t out_len,
                                       const Status& rejected) {
  if (pending_ != nullptr)  // RunForward's refusal, before the shape in flight is touched
    return RunForward(Batch{}, nullptr, 0, rejected, nullptr);
  Status local = rejected;
  Batch padded;
  vbe_forward_.Clear();
  if (local.ok() && !s_.options.device.is_host()) local = RefuseVbeOnDevice();
  if (local.ok()) local = vbe_forward_.Prepare(s_.layout, batch, &padded);
  if (local.ok() && !vbe_forward_.vbe()) {
    // A plain view in a VBE call: the plain forward.
    vbe_source_ = &vbe_forward_;
    return RunForward(padded, out, out_len, Status::Ok(), nullptr);
  }
  if (local.ok() && out_len != vbe_forward_.output_len())
    local = Status::InvalidArgument("out_len is ", out_len, " but this VBE batch's output needs ",
                                    vbe_forward_.output_len(), " floats (vbe_output_len)");
  if (local.ok() && out_len > 0 && out == nullptr)
    local = Status::InvalidArgument("out must not be NULL");
  if (!local.ok()) {
    // The rejection rides on the step's first exchange, so every rank fails alike.
    vbe_forward_.Clear();
    vbe_source_ = &vbe_forward_;
    return RunForward(Batch{}, nullptr, 0, local, nullptr);
  }
  vbe_out_.resize(vbe_forward_.padded_len());
  vbe_source_ = &vbe_forward_;
  SR_RETURN_IF_ERROR(RunForward(padded, vbe_out_.data(), vbe_out_.size(), Status::Ok(), nullptr));
  // Finish made the forward's shape the current batch's.
  vbe_current_.Scatter(s_.layout, vbe_out_.data(), out);
  return Status::Ok();
}

Status EmbeddingCollection::StartInputDist(const Batch& batch, const Status& rejected) {
  if (pending_ == nullptr) vbe_pending_.Clear();
  return RunStartInputDist(batch, rejected);
}

Status EmbeddingCollection::StartInputDistVbe(const VbeBatch& batch, const Status& rejected) {
  if (pending_ != nullptr) return RunStartInputDist(Batch{}, rejected);
  Status local = rejected;
  Batch padded;
  vbe_pending_.Clear();
  if (local.ok() && !s_.options.device.is_host()) local = RefuseVbeOnDevice();
  if (local.ok()) local = vbe_pending_.Prepare(s_.layout, batch, &padded);
  if (!local.ok()) {
    vbe_pending_.Clear();
    return RunStartInputDist(Batch{}, local);
  }
  return RunStartInputDist(padded, Status::Ok());
}

Status EmbeddingCollection::ForwardDistributed(float* out, size_t out_len, const Status& rejected,
                                               const DeviceOutput* device_out) {
  if (pending_ == nullptr || pending_work_ != nullptr || !vbe_pending_.vbe()) {
    vbe_source_ = &vbe_pending_;
    return RunForwardDistributed(out, out_len, rejected, device_out);
  }
  // The consumed batch is a VBE one: `out` has its layout.
  Status local = rejected;
  if (local.ok() && device_out != nullptr)
    local = Status::Internal("a device output for a VBE batch (host collections only)");
  if (local.ok() && out_len != vbe_pending_.output_len())
    local = Status::InvalidArgument("out_len is ", out_len,
                                    " but the started VBE batch's output needs ",
                                    vbe_pending_.output_len(), " floats (vbe_output_len)");
  if (local.ok() && out_len > 0 && out == nullptr)
    local = Status::InvalidArgument("out must not be NULL");
  vbe_out_.resize(vbe_pending_.padded_len());
  vbe_source_ = &vbe_pending_;
  SR_RETURN_IF_ERROR(RunForwardDistributed(vbe_out_.data(), vbe_out_.size(), local, nullptr));
  vbe_current_.Scatter(s_.layout, vbe_out_.data(), out);
  return Status::Ok();
}

Status EmbeddingCollection::Backward(const float* grad, size_t grad_len, const Status& rejected,
                                     const DeviceGradient* device_grad) {
  // Only a batch the backward may train takes the VBE path; every other refusal is RunBackward's.
  const bool trains = rejected.ok() && device_grad == nullptr && !last_forward_failed_ &&
                      s_.current != nullptr && !s_.current_consumed && !current_evaluated_;
  if (trains && vbe_current_.vbe()) return BackwardVbe(grad, grad_len);
  return RunBackward(grad, grad_len, rejected, device_grad);
}

Status EmbeddingCollection::BackwardVbe(const float* grad, size_t grad_len) {
  Status local;
  const size_t need = vbe_current_.output_len();
  if (grad_len != need) {
    local = Status::InvalidArgument("grad_len is ", grad_len, " but the last forward's VBE output ",
                                    "has ", need, " elements");
  } else if (need > 0 && grad == nullptr) {
    local = Status::InvalidArgument("grad must not be NULL");
  } else if (s_.options.check_non_finite) {
    const size_t i = FirstNonFinite(grad, need);
    if (i != need)
      local = Status::InvalidArgument("grad[", i, "] is ", grad[i],
                                      ": the output gradient must be finite (nothing was trained)");
  }
  if (!local.ok()) return RunBackward(nullptr, 0, local, nullptr);
  vbe_grad_.resize(vbe_current_.padded_len());
  vbe_current_.Gather(s_.layout, grad, vbe_grad_.data());
  return RunBackward(vbe_grad_.data(), vbe_grad_.size(), Status::Ok(), nullptr);
}

}  // namespace shardrec::embedding
